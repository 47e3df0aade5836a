"""examples/train_dlrm.py on a short live stream (piperec broker + gen
--signal 1 | produce + piperec run): the held-out AUC reaches 0.70."""

import os
import re
import subprocess
import sys
import time

import pytest

pytest.importorskip("torch")
SRC = os.environ.get("PR_SOURCE_DIR", os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))


def test_dlrm_example_learns():
    piperec = os.environ.get("PIPEREC")
    if not piperec:
        pytest.skip("PIPEREC not set: run through ctest")
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, os.path.join(SRC, "examples", "train_dlrm.py"), "--spawn",
                        "--piperec", piperec, "--train-rows", "120000", "--heldout-rows", "30000",
                        "--max-seconds", "70", "--min-auc", "0.70"],
                       capture_output=True, text=True, timeout=170)
    dt = time.monotonic() - t0
    print(p.stdout, p.stderr[-3000:])
    assert p.returncode == 0, p.stderr[-3000:]
    m = re.search(r"heldout_auc=([0-9.]+) heldout_rows=(\d+)", p.stdout)
    assert m and float(m.group(1)) >= 0.70 and int(m.group(2)) >= 30000, p.stdout
    assert dt < 150, "took %.0f s" % dt
