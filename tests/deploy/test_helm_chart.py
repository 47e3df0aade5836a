#!/usr/bin/python3
"""test_helm_chart.py — checks the Helm chart in deploy/helm/piperec without helm.

The rendering itself (helm lint --strict, helm template with every option,
the values schema) is tests/deploy/test_helm.py, with the real helm that
tools/install-deps.sh installs. What this one checks, with no helm at all:
  - Chart.yaml and values.yaml are well-formed YAML with the required fields;
  - values.config (the piperec configuration the chart mounts) is accepted by
    `piperec run --config FILE --check` (the service's own validation);
  - the ports and paths the chart wires together agree (http.listen with
    service.metricsPort, sinks.trainer.listen with service.trainerPort,
    state.dir under persistence.mountPath);
  - every template has balanced {{ }} actions, every `include "x"` names a
    defined template, every `.Values.a.b` path exists in values.yaml, and the
    probes point at /healthz and /readyz;
  - `piperec serve`'s Deployment probes /healthz (it has no /readyz) and is
    off by default;
  - the optional templates exist and the chart's files/ (rules, dashboard)
    resolve to deploy/prometheus and deploy/grafana.
"""
import os
import re
import subprocess
import sys
import tempfile

import yaml

src = os.environ.get("PR_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
piperec = os.environ.get("PIPEREC")
chart = os.path.join(src, "deploy", "helm", "piperec")
errors = []


def fail(msg):
    errors.append(msg)


with open(os.path.join(chart, "Chart.yaml")) as f:
    c = yaml.safe_load(f)
for k in ("apiVersion", "name", "version", "appVersion", "description"):
    if k not in c:
        fail("Chart.yaml: missing %s" % k)
if c.get("apiVersion") != "v2":
    fail("Chart.yaml: apiVersion must be v2")
if not re.fullmatch(r"\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?", str(c.get("version", ""))):
    fail("Chart.yaml: version is not SemVer: %r" % c.get("version"))

with open(os.path.join(chart, "values.yaml")) as f:
    values = yaml.safe_load(f)
cfg = values.get("config")
if not isinstance(cfg, dict):
    fail("values.yaml: config must be a mapping (the piperec YAML)")
    cfg = {}


def port_of(listen):
    return int(str(listen).rsplit(":", 1)[1])


if port_of(cfg["http"]["listen"]) != values["service"]["metricsPort"]:
    fail("config.http.listen port != service.metricsPort")
mount = values["persistence"]["mountPath"].rstrip("/") + "/"
for p in cfg.get("pipelines", []):
    tr = p.get("sinks", {}).get("trainer")
    if tr and port_of(tr["listen"]) != values["service"]["trainerPort"]:
        fail("pipeline %s: sinks.trainer.listen port != service.trainerPort" % p.get("name"))
    st = p.get("state")
    if st and not (st["dir"].rstrip("/") + "/").startswith(mount):
        fail("pipeline %s: state.dir %s is not under persistence.mountPath" % (p.get("name"), st["dir"]))
    if not st:
        fail("pipeline %s: no state.dir: vocabulary indices would not survive restarts" % p.get("name"))

if piperec:
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as t:
        yaml.safe_dump(cfg, t)
        path = t.name
    r = subprocess.run([piperec, "run", "--config", path, "--check"], capture_output=True, text=True)
    os.unlink(path)
    if r.returncode != 0:
        fail("values.config rejected by piperec run --check: %s" % (r.stderr.strip() or r.stdout.strip()))
    else:
        print(r.stdout.strip())
else:
    print("PIPEREC not set: skipping the piperec --check of values.config")

tdir = os.path.join(chart, "templates")
defined = set()
texts = {}
for name in sorted(os.listdir(tdir)):
    with open(os.path.join(tdir, name)) as f:
        texts[name] = f.read()
    defined.update(re.findall(r'{{-?\s*define\s+"([^"]+)"', texts[name]))


def has_path(d, parts):
    for p in parts:
        if not isinstance(d, dict) or p not in d:
            return False
        d = d[p]
    return True


for name, t in texts.items():
    if t.count("{{") != t.count("}}"):
        fail("%s: unbalanced {{ }}" % name)
    for inc in re.findall(r'include\s+"([^"]+)"', t):
        if inc not in defined:
            fail("%s: include of undefined template %s" % (name, inc))
    for ref in re.findall(r"\.Values((?:\.[A-Za-z_][A-Za-z0-9_]*)+)", t):
        parts = ref.strip(".").split(".")
        if not has_path(values, parts):
            fail("%s: .Values.%s is not in values.yaml" % (name, ".".join(parts)))
    # Opening/closing control blocks must pair up.
    opens = len(re.findall(r"{{-?\s*(?:if|with|range|define)\b", t))
    ends = len(re.findall(r"{{-?\s*end\s*-?}}", t))
    if opens != ends:
        fail("%s: %d block openings but %d {{ end }}" % (name, opens, ends))

sts = texts.get("statefulset.yaml", "")
if "path: /healthz" not in sts or "path: /readyz" not in sts:
    fail("statefulset.yaml: liveness/readiness probes must use /healthz and /readyz")
if "volumeClaimTemplates" not in sts:
    fail("statefulset.yaml: no PVC for the state dir")
for needed in ("configmap.yaml", "service.yaml", "statefulset.yaml", "servicemonitor.yaml",
               "networkpolicy.yaml", "poddisruptionbudget.yaml", "prometheusrule.yaml",
               "grafana-dashboard.yaml", "serve-deployment.yaml", "serve-service.yaml"):
    if needed not in texts:
        fail("templates/%s missing" % needed)
if "startupProbe" not in sts or "checksum/config" not in sts:
    fail("statefulset.yaml: needs a startupProbe and the checksum/config annotation")
# `piperec serve` has /healthz only (no /readyz): every probe asks it.
srv = texts.get("serve-deployment.yaml", "")
if srv.count("path: /healthz") != 3 or "/readyz" in srv or "checksum/config" not in srv:
    fail("serve-deployment.yaml: startup, liveness and readiness on /healthz, and checksum/config")
if values.get("serve", {}).get("enabled") is not False:
    fail("values.yaml: serve.enabled must default to false")
for f, target in (("piperec-rules.yaml", "deploy/prometheus/piperec-rules.yaml"),
                  ("piperec-dashboard.json", "deploy/grafana/piperec-dashboard.json")):
    path = os.path.join(chart, "files", f)
    if not os.path.exists(path) or os.path.realpath(path) != os.path.realpath(os.path.join(src, target)):
        fail("files/%s must resolve to %s (one source for chart and plain files)" % (f, target))

if errors:
    for e in errors:
        print("FAIL:", e)
    sys.exit(1)
print("helm chart: ok (%d templates checked; rendering: test_helm)" % len(texts))
