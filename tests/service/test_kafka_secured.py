#!/usr/bin/python3
"""test_kafka_secured.py — a secured Kafka cluster's settings reach every
client of a pipeline, with the secrets outside the config file.

`piperec run` with SASL settings in source.kafka.properties (the user name
from ${env:...}, the password from ${file:...}) and a Kafka sink on the same
cluster, against the test broker, which speaks no SASL: that each client
tried SASL is what shows the settings reached it. /readyz must say why the
pipeline is not ready (the authentication error), the consumer's error
counter must count it, and the Kafka sink's producer must have tried SASL
too (it took only bootstrap.servers from the source before). Then the same
config with the password file gone: `run --check` and `run` refuse it with
exit 2, naming the key, while `explain` (no Kafka client) needs no secret;
with the variable unset the same. Env
(pr_script_test): PIPEREC, PR_TMP.
"""
import os
import subprocess
import sys
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from svc_run import broker, fail, metric, start  # noqa: E402

PIPEREC = os.environ["PIPEREC"]
T = os.environ["PR_TMP"]
procs = []


def readyz(hp):
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d/readyz" % hp, timeout=5) as r:
            return r.read().decode()
    except urllib.error.HTTPError as e:
        return e.read().decode()
    except OSError:
        return ""


try:
    bs = broker(PIPEREC, 2, "events,out", procs)
    pw = os.path.join(T, "kafka-password")
    with open(pw, "w") as f:
        f.write("s3cr3t\n")
    cfg = os.path.join(T, "secured.yaml")
    with open(cfg, "w") as f:
        f.write("""pipelines:
  - name: p
    source:
      kafka:
        topics: [events]
        properties:
          bootstrap.servers: "%s"
          security.protocol: SASL_PLAINTEXT
          sasl.mechanisms: PLAIN
          sasl.username: "${env:PR_TEST_KAFKA_USER}"
          sasl.password: "${file:%s}"
    sinks:
      kafka: { topic: out }
http: { listen: "127.0.0.1:0" }
log: { level: debug }
""" % (bs, pw))
    env = dict(os.environ, PR_TEST_KAFKA_USER="piperec")
    r = subprocess.run([PIPEREC, "run", "--config", cfg, "--check"], env=env, capture_output=True,
                       text=True)
    if r.returncode != 0:
        fail("run --check refused the secured config: %s" % r.stderr)
    run, hp = start(PIPEREC, cfg, "run", procs, env=env)
    deadline, why = time.monotonic() + 30, ""
    while time.monotonic() < deadline:
        why = readyz(hp)
        if "_AUTHENTICATION" in why and metric(hp, "piperec_consumer_errors_total") > 0:
            break
        time.sleep(0.2)
    else:
        fail("/readyz does not name the authentication error: %r" % why)
    if "not ready" not in why or "SASL" not in why:
        fail("/readyz: %r" % why)
    log = ""
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        log = open(os.path.join(T, "run.err"), errors="replace").read()
        if any("SASL" in line and "kafka sink" in line for line in log.splitlines()):
            break
        time.sleep(0.2)
    else:
        fail("the Kafka sink's producer did not try SASL (the source's settings did not reach "
             "it):\n" + "\n".join(line for line in log.splitlines() if "sink" in line)[-2000:])
    if "s3cr3t" in log:
        fail("the password is in the log")
    run.terminate()
    run.wait(timeout=30)

    os.unlink(pw)
    for cmd in (["run", "--config", cfg, "--check"], ["run", "--config", cfg]):
        r = subprocess.run([PIPEREC] + cmd, env=env, capture_output=True, text=True, timeout=30)
        if r.returncode != 2 or "pipelines[0].source.kafka.properties.sasl.password: cannot " \
                "read the value's file" not in r.stderr:
            fail("%s without the password file: rc %d, %s" % (cmd, r.returncode, r.stderr))
    # a command that builds no Kafka client needs no secret
    r = subprocess.run([PIPEREC, "explain", "--config", cfg], env=env, capture_output=True,
                       text=True, timeout=30)
    if r.returncode != 0:
        fail("explain without the password file: rc %d, %s" % (r.returncode, r.stderr))
    with open(pw, "w") as f:
        f.write("s3cr3t\n")
    r = subprocess.run([PIPEREC, "run", "--config", cfg, "--check"], capture_output=True,
                       text=True, env={k: v for k, v in env.items() if k != "PR_TEST_KAFKA_USER"})
    if r.returncode != 2 or "sasl.username: environment variable PR_TEST_KAFKA_USER is not set" \
            not in r.stderr:
        fail("run --check without the variable: rc %d, %s" % (r.returncode, r.stderr))
finally:
    for p in procs:
        p.kill()
        p.wait()
print("kafka secured: ok")
