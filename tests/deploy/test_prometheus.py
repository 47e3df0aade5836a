#!/usr/bin/python3
"""test_prometheus.py — the alert rules and the Grafana dashboard against a real
Prometheus scraping a real piperec.

1. promtool: `check rules` on deploy/prometheus/piperec-rules.yaml and `test
   rules` on piperec-rules.test.yaml (each alert fires on synthetic series
   and stays silent on a healthy pipeline).
2. Live: `piperec demo` (embedded broker, producer at a modest rate, the
   pipeline, a trainer) and `prometheus` on free loopback ports, scraping
   every second with the rule file loaded. Once a few scrapes are in:
   - `promtool check metrics` accepts the live /metrics;
   - every dashboard panel query (variables substituted: $job, $pipeline
     -> ".+", $__rate_interval -> 15s) returns data, and so do the
     dashboard's variable queries;
   - every alert expression is accepted by /api/v1/query, every metric name it
     uses exists in the scraped data (except those this setup cannot produce,
     listed in NOT_IN_DEMO), and Prometheus reports every loaded rule healthy.
Processes are always stopped; the whole run takes ~30 s.
"""
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

import yaml

SRC = os.environ.get("PR_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
PIPEREC = os.environ["PIPEREC"]
TMP = os.environ.get("PR_TMP", "/tmp/piperec-test-prometheus")
RULES = os.path.join(SRC, "deploy", "prometheus", "piperec-rules.yaml")
RULE_TESTS = os.path.join(SRC, "deploy", "prometheus", "piperec-rules.test.yaml")
DASHBOARD = os.path.join(SRC, "deploy", "grafana", "piperec-dashboard.json")
DEADLINE_S = 75  # for data to show up in every panel
# Metric names the alerts use that this setup cannot produce (with why).
NOT_IN_DEMO = {
    "piperec_dead_letters_total": "the demo pipeline has no dead_letter_topic",
}
errors = []


def fail(msg):
    errors.append(msg)
    print("FAIL:", msg, flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_get(url, timeout=5):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read().decode()


def tool(*args):
    r = subprocess.run(args, capture_output=True, text=True, cwd=os.path.dirname(RULES))
    print("$ %s -> %d\n%s" % (" ".join(args), r.returncode, (r.stdout + r.stderr).strip()), flush=True)
    return r.returncode


os.makedirs(TMP, exist_ok=True)

# ---- 1. promtool on the rules
if tool("promtool", "check", "rules", RULES) != 0:
    fail("promtool check rules")
if tool("promtool", "test", "rules", RULE_TESTS) != 0:
    fail("promtool test rules")

with open(RULES) as f:
    rules = [r for g in yaml.safe_load(f)["groups"] for r in g["rules"]]
with open(DASHBOARD) as f:
    dash = json.load(f)


def panel_queries(d):
    for p in d["panels"]:
        for sub in [p] + p.get("panels", []):
            for t in sub.get("targets", []):
                yield sub["title"], t["expr"]


def substitute(expr):
    return (expr.replace("$__rate_interval", "15s").replace("$job", ".+")
            .replace("$pipeline", ".+"))


panels = list(panel_queries(dash))
titles = {t for t, _ in panels}
print("dashboard: %d panels with %d queries; rules: %d alerts" % (len(titles), len(panels), len(rules)))

# ---- 2. live
demo = prom = None
demo_log = open(os.path.join(TMP, "demo.log"), "w+")
prom_log = open(os.path.join(TMP, "prometheus.log"), "w")
try:
    demo = subprocess.Popen([PIPEREC, "demo", "--duration", str(DEADLINE_S + 30), "--rate", "20000"],
                            stdout=demo_log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    target = None
    t0 = time.time()
    while time.time() - t0 < 20 and target is None and demo.poll() is None:
        time.sleep(0.2)
        demo_log.seek(0)
        m = re.search(r"metrics http://([0-9.]+:\d+)/metrics", demo_log.read())
        target = m.group(1) if m else None
    if not target:
        raise RuntimeError("piperec demo printed no metrics address (see %s)" % demo_log.name)
    print("piperec demo: metrics at %s" % target, flush=True)

    pport = free_port()
    cfg = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s", "scrape_timeout": "1s"},
        "rule_files": [RULES],
        "scrape_configs": [{"job_name": "piperec", "static_configs": [{"targets": [target]}]}],
    }
    cfg_path = os.path.join(TMP, "prometheus.yml")
    with open(cfg_path, "w") as f:
        yaml.safe_dump(cfg, f)
    prom = subprocess.Popen(["prometheus", "--config.file=" + cfg_path,
                             "--storage.tsdb.path=" + os.path.join(TMP, "tsdb"),
                             "--web.listen-address=127.0.0.1:%d" % pport, "--log.level=warn"],
                            stdout=prom_log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    base = "http://127.0.0.1:%d" % pport

    def query(expr):
        u = base + "/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        try:
            return json.loads(http_get(u))
        except urllib.error.HTTPError as e:  # 400 on a bad expression
            return json.loads(e.read().decode())

    t0 = time.time()
    while True:
        try:
            http_get(base + "/-/ready")
            break
        except (OSError, urllib.error.URLError):
            if time.time() - t0 > 20 or prom.poll() is not None:
                raise RuntimeError("prometheus did not become ready (see %s)" % prom_log.name)
            time.sleep(0.3)
    print("prometheus: ready on %s" % base, flush=True)

    # Poll until at least 5 scrapes are in and every panel query has data
    # (lag needs a first commit, rates two scrapes with batches flowing).
    t0 = time.time()
    while True:
        empty = []
        r = query('count_over_time(up{job="piperec"}[1m]) >= 5')
        if not r.get("data", {}).get("result"):
            empty.append(("(scrapes)", "count_over_time(up[1m]) >= 5", "fewer than 5 scrapes"))
        for title, expr in panels:
            r = query(substitute(expr))
            if r.get("status") != "success" or not r["data"]["result"]:
                empty.append((title, expr, r.get("error", "no data")))
        if not empty or time.time() - t0 > DEADLINE_S:
            break
        time.sleep(2)
    waited = time.time() - t0
    for title, expr, why in empty:
        fail("panel '%s': %s: %s" % (title, expr, why))
    print("panels: %d/%d queries return data (after %.0f s of scrapes)" % (len(panels) - len(empty), len(panels), waited),
          flush=True)

    for v in dash["templating"]["list"]:
        if v["type"] != "query":
            continue
        m = re.fullmatch(r"label_values\((.*),\s*(\w+)\)", v["definition"])
        sel, label = m.group(1), m.group(2)
        u = base + "/api/v1/series?" + urllib.parse.urlencode({"match[]": substitute(sel)})
        vals = {s.get(label) for s in json.loads(http_get(u))["data"]} - {None}
        if not vals:
            fail("dashboard variable $%s (%s) has no values" % (v["name"], v["definition"]))
        else:
            print("variable $%s: %s" % (v["name"], sorted(vals)))

    names = set(json.loads(http_get(base + "/api/v1/label/__name__/values"))["data"])
    for r in rules:
        res = query(r["expr"])
        if res.get("status") != "success":
            fail("alert %s: expression rejected: %s" % (r["alert"], res.get("error")))
        used = set(re.findall(r"\b((?:piperec|process)_[a-z0-9_]+|up)\b(?!\s*\()", r["expr"]))
        missing = {n for n in used if n not in names and n not in NOT_IN_DEMO}
        if missing:
            fail("alert %s uses metrics the service does not export: %s" % (r["alert"], sorted(missing)))
    print("alerts: %d expressions evaluated (%s not produced by the demo: %s)"
          % (len(rules), ", ".join(NOT_IN_DEMO), "; ".join(NOT_IN_DEMO.values())), flush=True)

    loaded = json.loads(http_get(base + "/api/v1/rules"))["data"]["groups"]
    bad = [(r["name"], r.get("lastError")) for g in loaded for r in g["rules"] if r.get("health") != "ok"]
    n_loaded = sum(len(g["rules"]) for g in loaded)
    if n_loaded != len(rules) or bad:
        fail("prometheus loaded %d/%d rules; unhealthy: %s" % (n_loaded, len(rules), bad))
    else:
        print("prometheus: %d rules loaded and evaluated healthy" % n_loaded)
    firing = json.loads(http_get(base + "/api/v1/alerts"))["data"]["alerts"]
    print("alerts pending/firing on the healthy demo: %s"
          % ([(a["labels"]["alertname"], a["state"]) for a in firing] or "none"))

    live = os.path.join(TMP, "metrics.txt")
    with open(live, "w") as f:
        f.write(http_get("http://%s/metrics" % target))
    with open(live) as f:
        r = subprocess.run(["promtool", "check", "metrics"], stdin=f, capture_output=True, text=True)
    if r.returncode != 0:
        fail("promtool check metrics on the live /metrics: %s" % (r.stdout + r.stderr))
    # The demo runs the default spec: dlrm profile, modulus 524288, no capacity
    # set, so every column's capacity is the modulus (no reserved indices).
    caps = {float(x["value"][1]) for x in query("piperec_vocab_capacity")["data"]["result"]}
    if caps != {524288.0}:
        fail("piperec_vocab_capacity on the default spec: %s, want {524288}" % caps)
    for n in ("process_resident_memory_bytes", "process_cpu_seconds_total", "process_open_fds",
              "process_start_time_seconds", "piperec_vocab_capacity"):
        if n not in names:
            fail("%s is not exported" % n)
except Exception as e:  # noqa: BLE001 - report, then clean up below
    fail("%s: %s" % (type(e).__name__, e))
finally:
    for p, sig, name in ((prom, signal.SIGTERM, "prometheus"), (demo, signal.SIGINT, "piperec demo")):
        if p and p.poll() is None:
            p.send_signal(sig)
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                print("%s did not stop in 20 s: killed" % name)
                p.kill()
                p.wait()
    demo_log.seek(0)
    tail = demo_log.read().splitlines()[-4:]
    print("piperec demo (exit %s): %s" % (demo.returncode if demo else "-", " | ".join(tail)))

if errors:
    print("logs: %s, %s" % (demo_log.name, prom_log.name))
    print("test_prometheus: %d failed" % len(errors))
    sys.exit(1)
print("test_prometheus: ok")
