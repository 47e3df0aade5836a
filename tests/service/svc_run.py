"""svc_run.py — helpers shared by the service script tests that run `piperec
run` over the test broker and compare what the files sink wrote
(test_decode_threads.py, test_poll_threads.py, test_poll_formats.py): the
failure report with the newest logs, a /metrics counter, the batch rolls in
order. Imported from the scripts' own directory (sys.path[0])."""

import glob
import os
import re
import sys
import urllib.request


def fail(msg):
    """Print why, the last lines of the newest piperec logs under PR_TMP, exit 1."""
    print("FAIL:", msg)
    for p in sorted(glob.glob(os.path.join(os.environ["PR_TMP"], "*.err")))[-4:]:
        print("---", os.path.basename(p))
        print("".join(open(p, errors="replace").readlines()[-15:]))
    sys.exit(1)


def metric(hp, name):
    """The sum of counter `name` of pipeline "p" on /metrics at port hp; -1
    while the endpoint does not answer."""
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % hp, timeout=10) as r:
            page = r.read().decode()
    except OSError:
        return -1
    return sum(float(v) for v in re.findall(r'^%s\{pipeline="p"[^}]*\} (\S+)$' % name, page, re.M))


def rolls(d):
    """The files sink's batch rolls under d, in (epoch, first sequence) order."""
    out = []
    for r in glob.glob(os.path.join(d, "batches-*")):
        epoch, first = (int(x) for x in os.path.basename(r).split("-")[1:3])
        out.append(((epoch, first), r))
    return [r for _, r in sorted(out)]
