#!/usr/bin/python3
"""test_helm.py — the Helm chart rendered by a real helm 3.

helm comes from tools/install-deps.sh (unpacked from an npm package into
/opt/piperec-tools/bin/helm; PR_HELM overrides). Checks:
  - `helm lint --strict` passes with the default values and with every
    optional feature on (PrometheusRule, dashboard, ServiceMonitor, TLS/token
    mounts);
  - values.schema.json rejects wrong types and unknown keys (lint and template);
  - `helm template` renders the expected objects: non-root, read-only root
    filesystem, no capabilities, probes on /healthz and /readyz, resources, a
    PodDisruptionBudget, the NetworkPolicy rules (on by default, can be
    turned off), the secret mounts read-only;
  - trainer TLS + token on by default: the Secrets mounted and the rendered
    config's sinks.trainer.tls / .auth pointing at them (off, clientAuth);
  - the PrometheusRule is deploy/prometheus/piperec-rules.yaml and the
    dashboard ConfigMap is deploy/grafana/piperec-dashboard.json, unchanged;
  - the checksum/config annotation changes with the config (pods roll) and
    not with anything else;
  - the rendered config.yaml passes `piperec run --check`;
  - `piperec serve` (serve.enabled, off by default: no serve object then):
    its Deployment's args in both vocabulary modes (fromLog, vocabDir with a
    volume or an image path), port, probes, the StatefulSet's ConfigMap and
    image, its Service, ServiceMonitor and NetworkPolicy, HTTPS, selectors
    that keep serve pods and pipeline pods apart; the render refused for
    fromLog without vocab_log; and the rendered args, run by the piperec
    under test on the rendered config, answer /healthz and /v1/transform.
"""
import json
import os
import random
import re
import select
import shutil
import signal
import subprocess
import sys
import urllib.request

import yaml

SRC = os.environ.get("PR_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
TMP = os.environ.get("PR_TMP", "/tmp/piperec-test-helm")
PIPEREC = os.environ.get("PIPEREC")
CHART = os.path.join(SRC, "deploy", "helm", "piperec")
errors = []


def fail(msg):
    errors.append(msg)
    print("FAIL:", msg)


def find_helm():
    for h in (os.environ.get("PR_HELM"), "/opt/piperec-tools/bin/helm", shutil.which("helm")):
        if h and os.access(h, os.X_OK):
            return h
    print("FAIL: no helm: run tools/install-deps.sh (installs /opt/piperec-tools/bin/helm)")
    sys.exit(1)


HELM = find_helm()
os.makedirs(TMP, exist_ok=True)
ENV = dict(os.environ, HELM_CACHE_HOME=os.path.join(TMP, "cache"),
           HELM_CONFIG_HOME=os.path.join(TMP, "config"), HELM_DATA_HOME=os.path.join(TMP, "data"))


def helm(*args):
    r = subprocess.run([HELM, *args], capture_output=True, text=True, env=ENV)
    # helm notes the files/ symlinks on stderr; not an error.
    r.stderr = "\n".join(l for l in r.stderr.splitlines() if "found symbolic link" not in l)
    return r


ALL_ON = {
    "prometheusRule": {"enabled": True, "labels": {"release": "kube-prometheus-stack"}},
    "grafanaDashboard": {"enabled": True},
    "networkPolicy": {"enabled": True},
    "serviceMonitor": {"enabled": True},
    "tls": {"enabled": True, "secretName": "piperec-tls"},
    "auth": {"token": {"enabled": True, "secretName": "piperec-token"}},
    "serve": {"enabled": True},
}
all_on = os.path.join(TMP, "all-on.yaml")
with open(all_on, "w") as f:
    yaml.safe_dump(ALL_ON, f)

print(helm("version", "--short").stdout.strip())

# ---- lint
for name, extra in (("default", []), ("all features on", ["-f", all_on])):
    r = helm("lint", "--strict", CHART, *extra)
    if r.returncode != 0:
        fail("helm lint --strict (%s): %s%s" % (name, r.stdout, r.stderr))
    else:
        print("helm lint --strict (%s): ok" % name)

# ---- schema violations are rejected by lint and by template
for args, what in ((["--set", "replicaCount=two"], "replicaCount"),
                   (["--set-string", "service.trainerPort=abc"], "trainerPort"),
                   (["--set", "probes.liveness.periodSeconds=-1"], "periodSeconds"),
                   (["--set", "replicaCout=1"], "replicaCout"),
                   (["--set", "tls.enabled=yes-please"], "enabled"),
                   (["--set", "serve.vocabulary=state"], "vocabulary"),
                   (["--set", "serve.replica=2"], "replica"),
                   (["--set-string", "serve.port=http"], "port"),
                   (["--set", "serve.unseen=-1"], "unseen")):
    r = helm("lint", "--strict", CHART, *args)
    out = r.stdout + r.stderr
    if r.returncode == 0 or "schema" not in out or what not in out:
        fail("helm lint accepted %s (rc %d): %s" % (" ".join(args), r.returncode, out[-400:]))
    r = helm("template", "rec", CHART, *args)
    if r.returncode == 0:
        fail("helm template accepted %s" % " ".join(args))
print("schema: wrong types and unknown keys rejected")


def render(*args):
    r = helm("template", "rec", CHART, "--namespace", "ml", *args)
    if r.returncode != 0:
        fail("helm template %s: %s" % (" ".join(args), r.stderr))
        return {}
    objs = {}
    for d in yaml.safe_load_all(r.stdout):
        if d:
            for k in ("apiVersion", "kind", "metadata"):
                if k not in d:
                    fail("rendered object without %s: %s" % (k, str(d)[:200]))
            objs[(d["kind"], d["metadata"]["name"])] = d
    return objs


default = render()
full = render("-f", all_on)
kinds_default = sorted(k for k, _ in default)
kinds_full = sorted(k for k, _ in full)
print("default objects:", kinds_default)
print("all-on objects: ", kinds_full)
if kinds_default != ["ConfigMap", "NetworkPolicy", "PodDisruptionBudget", "Service", "Service",
                     "StatefulSet"]:
    fail("default render: unexpected objects %s" % kinds_default)
if any(n.endswith("-serve") for _, n in default):
    fail("default render: serve objects without serve.enabled: %s" % sorted(default))
# The NetworkPolicy is on by default (values.yaml: HTTP TLS may stay off
# because the policy limits who reaches the port) and can be turned off.
no_np = render("--set", "networkPolicy.enabled=false")
if any(k == "NetworkPolicy" for k, _ in no_np):
    fail("networkPolicy.enabled=false still renders a NetworkPolicy")
for k in ("NetworkPolicy", "PrometheusRule", "ServiceMonitor"):
    if k not in kinds_full:
        fail("all-on render: no %s" % k)


def one(objs, kind, suffix=""):
    for (k, n), d in objs.items():
        if k == kind and n.endswith(suffix):
            return d
    fail("no %s%s rendered" % (kind, suffix and " *" + suffix))
    return {}


def check_config(text, name):
    """`piperec run --check` of a rendered config.yaml, written to TMP/name."""
    p = os.path.join(TMP, name)
    with open(p, "w") as f:
        f.write(text)
    return subprocess.run([PIPEREC, "run", "--config", p, "--check"], capture_output=True,
                          text=True)


# ---- StatefulSet
sts = one(default, "StatefulSet")
pod = sts.get("spec", {}).get("template", {}).get("spec", {})
c = (pod.get("containers") or [{}])[0]
if sts.get("spec", {}).get("replicas") != 1:
    fail("replicas must default to 1")
psc, csc = pod.get("securityContext", {}), c.get("securityContext", {})
if not psc.get("runAsNonRoot") or psc.get("runAsUser", 0) == 0:
    fail("pod securityContext must run as non-root: %s" % psc)
if not csc.get("readOnlyRootFilesystem") or csc.get("allowPrivilegeEscalation") is not False \
        or csc.get("capabilities", {}).get("drop") != ["ALL"]:
    fail("container securityContext: read-only root, no escalation, drop ALL: %s" % csc)
probes = {p: c.get(p, {}).get("httpGet", {}).get("path") for p in
          ("startupProbe", "livenessProbe", "readinessProbe")}
if probes != {"startupProbe": "/healthz", "livenessProbe": "/healthz", "readinessProbe": "/readyz"}:
    fail("probes: %s" % probes)
if not c.get("resources", {}).get("requests") or not c.get("resources", {}).get("limits"):
    fail("container resources need requests and limits")
mounts = {m["name"]: m for m in c.get("volumeMounts", [])}
if "tmp" not in mounts or "state" not in mounts:
    fail("need the state and /tmp mounts (read-only root filesystem): %s" % list(mounts))
# Trainer TLS + token are on by default: Secrets mounted read-only under the
# derived names, and the rendered config points every trainer sink at them.
for n, secret in (("tls", "rec-piperec-trainer-tls"), ("token", "rec-piperec-trainer-token")):
    vol = {v["name"]: v for v in pod.get("volumes", [])}.get(n, {})
    if not mounts.get(n, {}).get("readOnly") or vol.get("secret", {}).get("secretName") != secret:
        fail("default: %s must be a read-only mount of Secret %s" % (n, secret))


def trainer_cfg(docs):
    cfg = yaml.safe_load(one(docs, "ConfigMap").get("data", {}).get("config.yaml", "") or "{}")
    return cfg["pipelines"][0]["sinks"]["trainer"]


tr = trainer_cfg(default)
if tr.get("tls") != {"cert_file": "/etc/piperec-tls/tls.crt", "key_file": "/etc/piperec-tls/tls.key"}:
    fail("default config: sinks.trainer.tls = %s" % tr.get("tls"))
if tr.get("auth") != {"token_file": "/etc/piperec-token/token"}:
    fail("default config: sinks.trainer.auth = %s" % tr.get("auth"))
if tr.get("listen") != "0.0.0.0:7070":
    fail("default config: the chart's own trainer keys must stay: %s" % tr)
plain = render("--set", "tls.enabled=false", "--set", "auth.token.enabled=false")
pmounts = {m["name"] for m in one(plain, "StatefulSet")["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]}
if "tls" in pmounts or "token" in pmounts or "tls" in trainer_cfg(plain) or "auth" in trainer_cfg(plain):
    fail("tls/auth.token disabled: no mounts and no tls/auth keys expected")
mt = trainer_cfg(render("--set", "tls.clientAuth=true"))
if mt.get("tls", {}).get("ca_file") != "/etc/piperec-tls/ca.crt":
    fail("tls.clientAuth: sinks.trainer.tls.ca_file expected: %s" % mt.get("tls"))
fpod = one(full, "StatefulSet").get("spec", {}).get("template", {}).get("spec", {})
fmounts = {m["name"]: m for m in (fpod.get("containers") or [{}])[0].get("volumeMounts", [])}
fvols = {v["name"]: v for v in fpod.get("volumes", [])}
for n, secret in (("tls", "piperec-tls"), ("token", "piperec-token")):
    if not fmounts.get(n, {}).get("readOnly") or fvols.get(n, {}).get("secret", {}).get("secretName") != secret:
        fail("all-on: %s must be a read-only mount of Secret %s" % (n, secret))

# HTTPS on the HTTP port (httpTls): off by default; on, the config gets
# http.tls, the Secret is mounted, probes use HTTPS and scrapes https.
if "tls" in (yaml.safe_load(one(default, "ConfigMap")["data"]["config.yaml"]).get("http") or {}):
    fail("default config: http.tls must be off")
if any(c.get(p, {}).get("httpGet", {}).get("scheme") for p in ("startupProbe", "livenessProbe", "readinessProbe")):
    fail("default probes must stay plain HTTP")
hs = render("--set", "httpTls.enabled=true", "--set", "serviceMonitor.enabled=true")
hcfg = yaml.safe_load(one(hs, "ConfigMap")["data"]["config.yaml"])
if hcfg.get("http", {}).get("tls") != {"cert_file": "/etc/piperec-http-tls/tls.crt",
                                       "key_file": "/etc/piperec-http-tls/tls.key"}:
    fail("httpTls: http.tls = %s" % hcfg.get("http"))
htpl = one(hs, "StatefulSet")["spec"]["template"]
hc = htpl["spec"]["containers"][0]
if [hc[p]["httpGet"].get("scheme") for p in ("startupProbe", "livenessProbe", "readinessProbe")] != ["HTTPS"] * 3:
    fail("httpTls: probes must use scheme HTTPS")
hvol = {v["name"]: v for v in htpl["spec"]["volumes"]}.get("http-tls", {})
if hvol.get("secret", {}).get("secretName") != "rec-piperec-http-tls" or \
        not {m["name"]: m for m in hc["volumeMounts"]}.get("http-tls", {}).get("readOnly"):
    fail("httpTls: Secret rec-piperec-http-tls must be mounted read-only")
if htpl["metadata"].get("annotations", {}).get("prometheus.io/scheme") != "https":
    fail("httpTls: pod annotation prometheus.io/scheme: https expected")
ep = one(hs, "ServiceMonitor")["spec"]["endpoints"][0]
if ep.get("scheme") != "https" or "tlsConfig" not in ep:
    fail("httpTls: ServiceMonitor endpoint needs scheme https and a tlsConfig: %s" % ep)

# ---- Scale-out: replicaCount > 1 with a shared vocabulary (docs/vocab-log.md)
cfg0 = yaml.safe_load(one(default, "ConfigMap").get("data", {}).get("config.yaml", "") or "{}")
if not cfg0["pipelines"][0].get("vocab_log", {}).get("topic"):
    fail("default config: pipelines[0].vocab_log.topic expected (replicas share the vocabulary)")
three = render("--set", "replicaCount=3")
if one(three, "StatefulSet").get("spec", {}).get("replicas") != 3:
    fail("replicaCount=3 not rendered")
hl = one(three, "Service", "-headless").get("spec", {})
if hl.get("clusterIP") != "None" or one(three, "StatefulSet")["spec"].get("serviceName") != "rec-piperec-headless":
    fail("replicas need the headless Service as the StatefulSet's serviceName: %s" % hl)
nolog = os.path.join(TMP, "nolog.yaml")
cfg_nolog = dict(cfg0)
cfg_nolog["pipelines"] = [dict(cfg0["pipelines"][0])]
del cfg_nolog["pipelines"][0]["vocab_log"]
for k in ("tls", "auth"):
    cfg_nolog["pipelines"][0]["sinks"]["trainer"].pop(k, None)
with open(nolog, "w") as f:
    yaml.safe_dump({"config": cfg_nolog}, f)
r = helm("template", "rec", CHART, "-f", nolog, "--set", "replicaCount=2")
if r.returncode == 0 or "has no vocab_log" not in r.stderr:
    fail("replicaCount 2 without vocab_log must fail to render: %s" % r.stderr[-300:])
if helm("template", "rec", CHART, "-f", nolog).returncode != 0:
    fail("one replica without vocab_log must render")
print("scale-out: 3 replicas render with the headless Service; no vocab_log refused")

# ---- PodDisruptionBudget
pdb = one(default, "PodDisruptionBudget")
if pdb.get("spec", {}).get("maxUnavailable") != 1 or not pdb.get("spec", {}).get("selector"):
    fail("PDB: %s" % pdb.get("spec"))

# ---- NetworkPolicy (the default render's)
np_ = one(default, "NetworkPolicy").get("spec", {})
ing = {tuple(p["port"] for p in rule["ports"]): rule["from"] for rule in np_.get("ingress", [])}
if ing.get(("trainer",)) != [{"podSelector": {"matchLabels": {"piperec.io/trainer": "true"}}}]:
    fail("NetworkPolicy trainer rule: %s" % ing.get(("trainer",)))
if ing.get(("metrics",)) != [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}]:
    fail("NetworkPolicy metrics rule: %s" % ing.get(("metrics",)))
if np_.get("policyTypes") != ["Ingress"]:
    fail("NetworkPolicy must restrict ingress only")

# ---- one source: rules and dashboard
with open(os.path.join(SRC, "deploy", "prometheus", "piperec-rules.yaml")) as f:
    rules = yaml.safe_load(f)
pr = one(full, "PrometheusRule")
if pr.get("spec") != rules:
    fail("PrometheusRule spec differs from deploy/prometheus/piperec-rules.yaml")
if pr.get("metadata", {}).get("labels", {}).get("release") != "kube-prometheus-stack":
    fail("prometheusRule.labels not applied")
with open(os.path.join(SRC, "deploy", "grafana", "piperec-dashboard.json")) as f:
    dash = json.load(f)
cm = one(full, "ConfigMap", "-dashboard")
if cm.get("metadata", {}).get("labels", {}).get("grafana_dashboard") != "1":
    fail("dashboard ConfigMap must carry grafana_dashboard: \"1\"")
try:
    if json.loads(cm.get("data", {}).get("piperec-dashboard.json", "")) != dash:
        fail("dashboard ConfigMap differs from deploy/grafana/piperec-dashboard.json")
except ValueError as e:
    fail("dashboard ConfigMap is not JSON: %s" % e)

# ---- config checksum: changes with the config, only with it
def checksum(*args):
    s = one(render(*args), "StatefulSet")
    return s.get("spec", {}).get("template", {}).get("metadata", {}).get("annotations", {}).get("checksum/config")


base = checksum()
if not base:
    fail("no checksum/config annotation")
if checksum("--set", "config.log.level=debug") == base:
    fail("checksum/config did not change with the config")
if checksum("--set", "podAnnotations.x=y", "--set", "resources.limits.memory=3Gi") != base:
    fail("checksum/config changed without a config change")

# ---- the documented install line (deploy/README.md) renders, and the ports
# and the broker follow the values: a changed service port moves the listen
# addresses, probes, container ports and the scrape annotation together
ported = render("--set", "kafka.bootstrapServers=kafka.ml:9092", "--set", "service.metricsPort=9500",
                "--set", "service.trainerPort=7171")
pcfg = yaml.safe_load(one(ported, "ConfigMap")["data"]["config.yaml"])
if pcfg["http"]["listen"] != "0.0.0.0:9500":
    fail("http.listen does not follow service.metricsPort: %s" % pcfg["http"])
for pl in pcfg["pipelines"]:
    if pl["sinks"]["trainer"]["listen"] != "0.0.0.0:7171":
        fail("trainer listen does not follow service.trainerPort: %s" % pl["sinks"]["trainer"])
    if pl["source"]["kafka"]["properties"]["bootstrap.servers"] != "kafka.ml:9092":
        fail("kafka.bootstrapServers not applied: %s" % pl["source"]["kafka"])
pss = one(ported, "StatefulSet")["spec"]["template"]
if pss["metadata"]["annotations"].get("prometheus.io/port") != "9500":
    fail("prometheus.io/port does not follow service.metricsPort: %s" % pss["metadata"]["annotations"])
ports = {p["name"]: p["containerPort"] for c in pss["spec"]["containers"] for p in c.get("ports", [])}
if ports.get("metrics") != 9500 or 7171 not in ports.values():
    fail("container ports: %s" % ports)
# two trainer pipelines keep their own ports (one port for both would not start)
two = os.path.join(TMP, "two-trainers.yaml")
with open(two, "w") as f:
    f.write("""config:
  pipelines:
    - name: a
      source: { kafka: { topics: [a], properties: { bootstrap.servers: "k:9092" } } }
      sinks: { trainer: { listen: "0.0.0.0:7070" } }
      state: { dir: /var/lib/piperec/a }
    - name: b
      source: { kafka: { topics: [b], properties: { bootstrap.servers: "k:9092" } } }
      sinks: { trainer: { listen: "0.0.0.0:7071" } }
      state: { dir: /var/lib/piperec/b }
  http: { listen: "0.0.0.0:9464" }
""")
r2 = render("-f", two)
c2 = yaml.safe_load(one(r2, "ConfigMap")["data"]["config.yaml"])
if [p["sinks"]["trainer"]["listen"] for p in c2["pipelines"]] != ["0.0.0.0:7070", "0.0.0.0:7071"]:
    fail("two trainer pipelines: %s" % [p["sinks"]["trainer"] for p in c2["pipelines"]])
if PIPEREC:
    r = check_config(one(r2, "ConfigMap")["data"]["config.yaml"], "two-trainers-config.yaml")
    if r.returncode != 0:
        fail("two trainer pipelines rendered a config --check refuses: %s" % (r.stderr or r.stdout))
readme = open(os.path.join(SRC, "deploy", "README.md")).read()
if "--set kafka.bootstrapServers=" not in readme:
    fail("deploy/README.md's install line does not use kafka.bootstrapServers")

# ---- a secured Kafka cluster: kafka.properties reach every pipeline's source
# (a key the pipeline sets wins), kafka.secretName is mounted read-only, and a
# ${file:...} value naming a file of the Secret passes run --check where the
# file exists and fails naming the key where it does not
secdir = os.path.join(TMP, "kafka-secret")
os.makedirs(secdir, exist_ok=True)
with open(os.path.join(secdir, "password"), "w") as f:
    f.write("s3cr3t\n")
secured_values = os.path.join(TMP, "secured.yaml")
with open(secured_values, "w") as f:
    f.write("""kafka:
  bootstrapServers: "kafka.prod:9093"
  secretName: piperec-kafka
  secretMountPath: %s
  properties:
    security.protocol: SASL_PLAINTEXT
    sasl.mechanisms: SCRAM-SHA-512
    sasl.username: piperec
    sasl.password: "${file:%s/password}"
    auto.offset.reset: latest
""" % (secdir, secdir))
sec = render("-f", secured_values)
scfg_text = one(sec, "ConfigMap").get("data", {}).get("config.yaml", "")
scfg = yaml.safe_load(scfg_text) if scfg_text else {"pipelines": []}
dcfg = yaml.safe_load(one(default, "ConfigMap").get("data", {}).get("config.yaml", "") or "pipelines: []")
for pl, dpl in zip(scfg["pipelines"], dcfg["pipelines"]):
    props = pl["source"]["kafka"]["properties"]
    own = dpl["source"]["kafka"].get("properties", {})
    if props.get("security.protocol") != "SASL_PLAINTEXT" or props.get("sasl.username") != "piperec":
        fail("kafka.properties not added to pipeline %s: %s" % (pl["name"], props))
    if props.get("bootstrap.servers") != "kafka.prod:9093":
        fail("kafka.bootstrapServers not applied with kafka.properties: %s" % props)
    if own.get("auto.offset.reset") != "earliest" or props.get("auto.offset.reset") != "earliest":
        fail("kafka.properties overrode the pipeline's own auto.offset.reset: %s" % props)
sts = one(sec, "StatefulSet")["spec"]["template"]["spec"]
mounts = {m["name"]: m for c in sts["containers"] for m in c.get("volumeMounts", [])}
vols = {v["name"]: v for v in sts.get("volumes", [])}
if mounts.get("kafka-secret", {}).get("mountPath") != secdir or not mounts["kafka-secret"].get("readOnly"):
    fail("kafka.secretName not mounted read-only at kafka.secretMountPath: %s" % mounts.get("kafka-secret"))
if vols.get("kafka-secret", {}).get("secret", {}).get("secretName") != "piperec-kafka":
    fail("kafka.secretName volume: %s" % vols.get("kafka-secret"))
if "kafka-secret" in {v["name"] for v in one(default, "StatefulSet")["spec"]["template"]["spec"].get("volumes", [])}:
    fail("a Kafka Secret is mounted without kafka.secretName")
if PIPEREC and scfg_text:
    r = check_config(scfg_text, "secured-config.yaml")
    if r.returncode != 0:
        fail("secured config rejected by run --check: %s" % (r.stderr or r.stdout))
    os.unlink(os.path.join(secdir, "password"))
    r = check_config(scfg_text, "secured-config.yaml")
    if r.returncode != 2 or "source.kafka.properties.sasl.password: cannot read the value's file" not in r.stderr:
        fail("run --check with the Secret's file missing: rc %d, %s" % (r.returncode, r.stderr))

# ---- piperec serve (serve.enabled): a Deployment beside the StatefulSet
SERVE_ARGS = ["serve", "--config", "/etc/piperec/config.yaml", "--listen", "0.0.0.0:9470"]


def serve_parts(objs):
    d = one(objs, "Deployment", "-serve")
    pod = d.get("spec", {}).get("template", {})
    c = (pod.get("spec", {}).get("containers") or [{}])[0]
    return d, pod, c


def serve_volumes(pod):
    return {v["name"]: v for v in pod.get("spec", {}).get("volumes", [])}


def serve_mounts(c):
    return {m["name"]: m for m in c.get("volumeMounts", [])}


sv = render("--set", "serve.enabled=true")
sdep, spod, sc = serve_parts(sv)
ssts = one(sv, "StatefulSet")
stpl = ssts.get("spec", {}).get("template", {})
if sc.get("args") != SERVE_ARGS + ["--from-log", "--threads", "2"]:
    fail("serve (fromLog, the default): args %s" % sc.get("args"))
if sdep.get("metadata", {}).get("name") != "rec-piperec-serve" or sdep["spec"].get("replicas") != 1:
    fail("serve Deployment: name rec-piperec-serve, 1 replica: %s" % sdep.get("metadata"))
if sc.get("image") != stpl["spec"]["containers"][0]["image"]:
    fail("serve must run the StatefulSet's image: %s" % sc.get("image"))
if sc.get("ports") != [{"name": "http-serve", "containerPort": 9470, "protocol": "TCP"}]:
    fail("serve container ports: %s" % sc.get("ports"))
for p in ("startupProbe", "livenessProbe", "readinessProbe"):
    g = sc.get(p, {}).get("httpGet", {})
    if g != {"path": "/healthz", "port": "http-serve"}:
        fail("serve %s: %s" % (p, g))
    if not sc.get(p, {}).get("periodSeconds"):
        fail("serve %s: no timing from serve.probes" % p)
# the StatefulSet's ConfigMap, mounted where --config reads it
cfgvol = serve_volumes(spod).get("config", {}).get("configMap", {}).get("name")
stsvol = {v["name"]: v for v in stpl["spec"]["volumes"]}["config"]["configMap"]["name"]
if cfgvol != stsvol or cfgvol != one(sv, "ConfigMap")["metadata"]["name"]:
    fail("serve must mount the StatefulSet's ConfigMap %s: %s" % (stsvol, cfgvol))
cm_ = serve_mounts(sc).get("config", {})
if cm_.get("mountPath") != "/etc/piperec" or not cm_.get("readOnly"):
    fail("serve: the config mount must be /etc/piperec, read-only: %s" % cm_)
if "tmp" not in serve_mounts(sc) or not sc.get("securityContext", {}).get("readOnlyRootFilesystem"):
    fail("serve: read-only root filesystem with a /tmp mount expected")
if sc.get("securityContext") != stpl["spec"]["containers"][0].get("securityContext") or \
        spod["spec"].get("securityContext") != stpl["spec"].get("securityContext"):
    fail("serve: the StatefulSet's security contexts expected")
sann = spod.get("metadata", {}).get("annotations", {})
if sann.get("checksum/config") != stpl["metadata"]["annotations"]["checksum/config"]:
    fail("serve: checksum/config must follow the ConfigMap (a config change rolls serve too)")
if sann.get("prometheus.io/port") != "9470" or sann.get("prometheus.io/scrape") != "true":
    fail("serve pod annotations: %s" % sann)
if not sc.get("resources", {}).get("requests") or not sc.get("resources", {}).get("limits"):
    fail("serve: resources need requests and limits")
# its Service; selectors keep serve pods and pipeline pods apart
ssvc = one(sv, "Service", "-serve").get("spec", {})
if ssvc.get("type") != "ClusterIP" or ssvc.get("ports") != [
        {"name": "http-serve", "port": 9470, "targetPort": "http-serve", "protocol": "TCP"}]:
    fail("serve Service: %s" % ssvc)
slabels = spod.get("metadata", {}).get("labels", {})
if ssvc.get("selector") != sdep["spec"]["selector"]["matchLabels"] or \
        not set(ssvc.get("selector", {}).items()) <= set(slabels.items()):
    fail("serve Service selector %s must select the serve pods %s" % (ssvc.get("selector"), slabels))
plabels = stpl["metadata"]["labels"]
for (k, n), d in sv.items():
    sel = (d.get("spec", {}).get("selector") or {})
    sel = sel.get("matchLabels", sel) if k != "Service" else sel
    if k == "NetworkPolicy":
        sel = d["spec"]["podSelector"]["matchLabels"]
    if not sel or k == "ConfigMap":
        continue
    if n.endswith("-serve") and set(sel.items()) <= set(plabels.items()):
        fail("%s %s selects the pipeline's pods" % (k, n))
    if not n.endswith("-serve") and set(sel.items()) <= set(slabels.items()):
        fail("%s %s selects the serve pods" % (k, n))
# NetworkPolicy: the serve port from labelled clients and the monitoring namespace
snp = one(sv, "NetworkPolicy", "-serve").get("spec", {})
if snp.get("podSelector", {}).get("matchLabels") != sdep["spec"]["selector"]["matchLabels"]:
    fail("serve NetworkPolicy must select the serve pods: %s" % snp.get("podSelector"))
srules = [(tuple(p["port"] for p in r["ports"]), r["from"]) for r in snp.get("ingress", [])]
if srules != [(("http-serve",), [{"podSelector": {"matchLabels": {"piperec.io/serve-client": "true"}}}]),
              (("http-serve",), [{"namespaceSelector": {"matchLabels": {
                  "kubernetes.io/metadata.name": "monitoring"}}}])]:
    fail("serve NetworkPolicy rules: %s" % srules)
if any(n.endswith("-serve") for k, n in render("--set", "serve.enabled=true", "--set",
                                                "networkPolicy.enabled=false") if k == "NetworkPolicy"):
    fail("networkPolicy.enabled=false still renders the serve NetworkPolicy")
print("serve (fromLog): Deployment, Service, NetworkPolicy ok")

# vocabDir on a volume (a PVC), with --pipeline, --reload-s, --unseen 0, a port,
# threads null (no --threads: serve's default)
vd_values = os.path.join(TMP, "serve-vocabdir.yaml")
with open(vd_values, "w") as f:
    yaml.safe_dump({"serve": {
        "enabled": True, "vocabulary": "vocabDir", "pipeline": "criteo", "unseen": 0,
        "reloadSeconds": 30, "port": 9500, "replicas": 2, "threads": None,
        "vocabDir": {"path": "/var/lib/piperec-vocab/criteo", "mountPath": "/var/lib/piperec-vocab",
                     "volume": {"persistentVolumeClaim": {"claimName": "criteo-vocab",
                                                          "readOnly": True}}}}}, f)
vd = render("-f", vd_values)
vdep, vpod, vc = serve_parts(vd)
want = ["serve", "--config", "/etc/piperec/config.yaml", "--listen", "0.0.0.0:9500",
        "--pipeline", "criteo", "--vocab", "/var/lib/piperec-vocab/criteo", "--reload-s", "30",
        "--unseen", "0"]
if vc.get("args") != want:
    fail("serve (vocabDir): args %s, want %s" % (vc.get("args"), want))
if vdep.get("spec", {}).get("replicas") != 2:
    fail("serve.replicas not applied")
vm = serve_mounts(vc).get("vocab", {})
if vm.get("mountPath") != "/var/lib/piperec-vocab" or not vm.get("readOnly"):
    fail("serve (vocabDir): the volume must be mounted read-only at vocabDir.mountPath: %s" % vm)
if serve_volumes(vpod).get("vocab") != {"name": "vocab", "persistentVolumeClaim": {
        "claimName": "criteo-vocab", "readOnly": True}}:
    fail("serve (vocabDir): volume %s" % serve_volumes(vpod).get("vocab"))
if [p["containerPort"] for p in vc.get("ports", [])] != [9500] or \
        vc["livenessProbe"]["httpGet"]["port"] != "http-serve" or \
        vpod["metadata"]["annotations"].get("prometheus.io/port") != "9500" or \
        [p["port"] for p in one(vd, "Service", "-serve")["spec"]["ports"]] != [9500]:
    fail("serve.port must move the container port, the annotation and the Service together")
# vocabDir in the image: no volume
img = render("--set", "serve.enabled=true", "--set", "serve.vocabulary=vocabDir")
_, ipod, ic = serve_parts(img)
if ic.get("args") != SERVE_ARGS + ["--vocab", "/var/lib/piperec-vocab", "--reload-s", "60",
                               "--threads", "2"] or \
        "vocab" in serve_volumes(ipod) or "vocab" in serve_mounts(ic):
    fail("serve (vocabDir, no volume): args %s, volumes %s" % (ic.get("args"), list(serve_volumes(ipod))))
# refused: fromLog without vocab_log, a path outside the volume, an unknown pipeline
r = helm("template", "rec", CHART, "-f", nolog, "--set", "serve.enabled=true")
if r.returncode == 0 or "serve.vocabulary is fromLog" not in r.stderr or \
        "pipeline criteo has no vocab_log section" not in r.stderr:
    fail("serve fromLog without vocab_log must fail to render: %s" % r.stderr[-400:])
if helm("template", "rec", CHART, "-f", nolog, "--set", "serve.enabled=true", "--set",
        "serve.vocabulary=vocabDir").returncode != 0:
    fail("serve vocabDir without vocab_log must render")
r = helm("template", "rec", CHART, "-f", vd_values, "--set", "serve.vocabDir.path=/data/vocab")
if r.returncode == 0 or "serve.vocabDir.path /data/vocab is not under" not in r.stderr:
    fail("serve.vocabDir.path outside the volume must fail to render: %s" % r.stderr[-300:])
r = helm("template", "rec", CHART, "--set", "serve.enabled=true", "--set", "serve.pipeline=nope")
if r.returncode == 0 or "serve.pipeline is nope" not in r.stderr:
    fail("an unknown serve.pipeline must fail to render: %s" % r.stderr[-300:])
for name, extra in (("serve vocabDir", ["-f", vd_values]),):
    r = helm("lint", "--strict", CHART, *extra)
    if r.returncode != 0:
        fail("helm lint --strict (%s): %s%s" % (name, r.stdout, r.stderr))
print("serve (vocabDir): volume and image path ok; refusals ok")

# HTTPS and scrapes: httpTls reused, the ServiceMonitor scrapes serve's /metrics
hsv = render("--set", "serve.enabled=true", "--set", "httpTls.enabled=true", "--set",
             "serviceMonitor.enabled=true", "--set", "kafka.secretName=piperec-kafka")
_, hpod, hcs = serve_parts(hsv)
if [hcs[p]["httpGet"].get("scheme") for p in ("startupProbe", "livenessProbe", "readinessProbe")] != ["HTTPS"] * 3:
    fail("serve with httpTls: probes must use HTTPS")
if not serve_mounts(hcs).get("http-tls", {}).get("readOnly") or \
        serve_volumes(hpod).get("http-tls", {}).get("secret", {}).get("secretName") != "rec-piperec-http-tls":
    fail("serve with httpTls: the http-tls Secret must be mounted read-only")
if serve_mounts(hcs).get("http-tls", {}).get("mountPath") != "/etc/piperec-http-tls":
    fail("serve with httpTls: mounted where the config's http.tls points")
if hpod["metadata"]["annotations"].get("prometheus.io/scheme") != "https":
    fail("serve with httpTls: prometheus.io/scheme: https expected")
if serve_volumes(hpod).get("kafka-secret", {}).get("secret", {}).get("secretName") != "piperec-kafka" or \
        not serve_mounts(hcs).get("kafka-secret", {}).get("readOnly"):
    fail("serve: kafka.secretName must be mounted (--from-log reads the log with those credentials)")
smon = one(hsv, "ServiceMonitor", "-serve").get("spec", {})
ssvc_labels = set(one(hsv, "Service", "-serve")["metadata"]["labels"].items())
if not smon.get("selector", {}).get("matchLabels") or \
        not set(smon["selector"]["matchLabels"].items()) <= ssvc_labels:
    fail("serve ServiceMonitor must select the serve Service: %s" % smon.get("selector"))
sep = (smon.get("endpoints") or [{}])[0]
if sep.get("port") != "http-serve" or sep.get("path") != "/metrics" or sep.get("scheme") != "https" \
        or "tlsConfig" not in sep:
    fail("serve ServiceMonitor endpoint: %s" % sep)
mon = one(hsv, "ServiceMonitor", "rec-piperec")
if set(mon["spec"]["selector"]["matchLabels"].items()) <= ssvc_labels:
    fail("the pipeline's ServiceMonitor must not select the serve Service")
print("serve: HTTPS, ServiceMonitor, Kafka Secret ok")

# The rendered args, run: the vocabDir Deployment's command line on the
# rendered config (paths moved to TMP) answers /healthz and /v1/transform.
if PIPEREC:
    random.seed(7)
    events = os.path.join(TMP, "serve-events.tsv")
    with open(events, "w") as f:
        for i in range(20):
            f.write("\t".join([str(i % 2)] + [str(random.randint(0, 9)) for _ in range(13)] +
                              ["%08x" % random.randint(0, 9) for _ in range(26)]) + "\n")
    cfg_path = os.path.join(TMP, "serve-config.yaml")
    with open(cfg_path, "w") as f:
        f.write(one(vd, "ConfigMap")["data"]["config.yaml"])
    out = os.path.join(TMP, "serve-vocab")
    shutil.rmtree(out, ignore_errors=True)
    r = subprocess.run([PIPEREC, "process", "--config", cfg_path, "--input", events, "--output", out,
                        "--no-progress"], capture_output=True, text=True)
    if r.returncode != 0:
        fail("piperec process for serve's vocabulary: %s" % r.stderr[-300:])
    sub = {"/etc/piperec/config.yaml": cfg_path, "/var/lib/piperec-vocab/criteo": out,
           "0.0.0.0:9500": "127.0.0.1:0"}
    argv = [PIPEREC] + [sub.get(a, a) for a in vc.get("args", [])]
    p = subprocess.Popen(argv, stderr=subprocess.PIPE, text=True)
    port, err = None, ""
    while port is None and select.select([p.stderr], [], [], 30)[0]:
        line = p.stderr.readline()
        if not line:
            break
        err += line
        m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
        port = m and m.group(1)
    try:
        if not port:
            fail("serve with the rendered args did not start: %s %s" % (argv, err[-400:]))
        else:
            base = "http://127.0.0.1:%s" % port
            if urllib.request.urlopen(base + "/healthz", timeout=10).read().strip() != b"ok":
                fail("serve /healthz did not answer ok")
            with open(events, "rb") as f:
                body = f.read()
            rows = urllib.request.urlopen(urllib.request.Request(base + "/v1/transform", data=body),
                                          timeout=10).read().decode().splitlines()
            if len(rows) != 20 or "sparse" not in json.loads(rows[0]):
                fail("serve /v1/transform: %d rows: %s" % (len(rows), rows[:1]))
    finally:
        p.send_signal(signal.SIGTERM)
        try:
            rc = p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
            rc = p.wait()
        err += p.stderr.read()
    if port and rc != 0:
        fail("serve exit %d after SIGTERM: %s" % (rc, err[-300:]))
    # every flag the fromLog Deployment passes is one serve knows
    known = set(re.findall(r"--[a-z][a-z0-9-]*", subprocess.run(
        [PIPEREC, "serve", "--help"], capture_output=True, text=True).stdout))
    for a in sc.get("args", []) + vc.get("args", []):
        if a.startswith("--") and a not in known:
            fail("serve args: %s is not in piperec serve --help" % a)
    print("serve: the rendered vocabDir args answer /healthz and /v1/transform")

# ---- the rendered config is a valid piperec config
cfg_text = one(default, "ConfigMap").get("data", {}).get("config.yaml", "")
if PIPEREC and cfg_text:
    r = check_config(cfg_text, "rendered-config.yaml")
    if r.returncode != 0:
        fail("rendered config.yaml rejected: %s" % (r.stderr or r.stdout))

if errors:
    print("%d failed" % len(errors))
    sys.exit(1)
print("helm: ok (lint, schema, %d + %d rendered objects)" % (len(default), len(full)))
