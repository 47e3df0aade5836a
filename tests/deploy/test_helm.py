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
  - the rendered config.yaml passes `piperec run --check`.
"""
import json
import os
import shutil
import subprocess
import sys

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
                   (["--set", "tls.enabled=yes-please"], "enabled")):
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
