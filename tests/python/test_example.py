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


def test_dlrm_example_32_partitions_loses_no_rows():
    # Issue 22: with many partitions the local stream must stay within the
    # test broker's ~5 MB per partition (else piperec stops with "offset out
    # of range", which the example turns into exit 1). Small and short.
    piperec = os.environ.get("PIPEREC")
    if not piperec:
        pytest.skip("PIPEREC not set: run through ctest")
    p = subprocess.run([sys.executable, os.path.join(SRC, "examples", "train_dlrm.py"), "--spawn",
                        "--piperec", piperec, "--partitions", "32", "--train-rows", "30000",
                        "--heldout-rows", "8000", "--batch", "1024", "--max-seconds", "40"],
                       capture_output=True, text=True, timeout=150)
    print(p.stdout, p.stderr[-3000:])
    assert p.returncode == 0, p.stderr[-3000:]
    assert "piperec package" in p.stderr  # says which copy of the package it imported
    m = re.search(r"heldout_auc=([0-9.]+) heldout_rows=(\d+)", p.stdout)
    assert m and int(m.group(2)) >= 8000, p.stdout


def test_dlrm_example_lookahead_fits_retention():
    # The producer's lead over the trainer, per partition, stays far below
    # the test broker's ~5 MB at any partition count and batch size.
    sys.path.insert(0, os.path.join(SRC, "examples"))
    import train_dlrm as ex
    for parts in (1, 2, 3, 4, 8, 32, 64, 128, 256, 1024):
        for batch in (256, 2048, 8192, 65536):
            rows = ex.lookahead_rows(parts, batch)
            per_part = (rows + rows // 8) * ex.ROW_BYTES / parts  # lookahead + one chunk
            assert per_part < 4_000_000, (parts, batch, per_part)
            assert rows >= min(2 * batch, ex.LOOKAHEAD_BYTES // ex.ROW_BYTES)


def test_dlrm_example_rows_per_s_counts_training_only(monkeypatch):
    # rows_per_s (and train_seconds, gpu_busy) measure the training steps:
    # the held-out scoring after them must not count (it did: the clock ran
    # to the end of scoring, so the old-vs-fused ratio was diluted). A
    # hand-stepped clock: 1 s per training batch, 100 s per scored batch.
    import argparse
    import torch
    sys.path.insert(0, os.path.join(SRC, "examples"))
    import train_dlrm as ex
    clock = [0.0]
    monkeypatch.setattr(ex, "_now", lambda: clock[0])
    rows, keys = 64, 26

    class B:
        def __init__(self, i):
            g = torch.Generator().manual_seed(i)
            self.rows, self.keys, self.vocab_sizes = rows, ["C%d" % k for k in range(keys)], [50] * keys
            self.dense = torch.rand(rows, 13, generator=g)
            self.labels = (torch.rand(rows, generator=g) < 0.3).float()
            self.sparse_features = (torch.randint(0, 50, (keys * rows,), generator=g),
                                    torch.ones(keys * rows, dtype=torch.int32))

    def batches():
        for i in range(14):
            yield B(i)
            clock[0] += 1.0 if i < 10 else 100.0  # the loop body ran: train or score
    args = argparse.Namespace(embedding="fused", layout="raw", dim=4, lr=0.003, emb_lr=0.03,
                              train_rows=10 * rows, heldout_rows=4 * rows, max_seconds=1e9,
                              min_auc=None)
    import io
    import contextlib
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert ex.train(batches(), args, 0.0, torch.device("cpu")) == 0
    kv = dict(re.findall(r"(\w+)=([0-9.]+)", out.getvalue()))
    assert int(kv["train_rows"]) == 10 * rows and int(kv["heldout_rows"]) == 4 * rows, out.getvalue()
    assert float(kv["train_seconds"]) == 10.0, out.getvalue()
    assert float(kv["rows_per_s"]) == rows, out.getvalue()
    # steady_rows_per_s: after the first WARMUP_BATCHES (here 4: the clock
    # moves when the next batch is asked for, so 3 s for each of the first
    # three and none for the fourth), then 1 s a batch: 6 batches in 6 s
    monkeypatch.setattr(ex, "WARMUP_BATCHES", 4)
    clock[0] = 0.0

    def slow_start():
        for i in range(14):
            yield B(i)
            clock[0] += 3.0 if i < 3 else 0.0 if i == 3 else 1.0 if i < 10 else 100.0
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert ex.train(slow_start(), args, 0.0, torch.device("cpu")) == 0
    kv = dict(re.findall(r"(\w+)=([0-9.]+)", out.getvalue()))
    assert float(kv["train_seconds"]) == 15.0, out.getvalue()
    assert float(kv["warmup_seconds"]) == 9.0, out.getvalue()
    assert float(kv["steady_rows_per_s"]) == rows, out.getvalue()


def test_dlrm_example_producer_spreads_partitions():
    # The example's local stream produces Criteo TSV with `piperec produce`,
    # unkeyed: under librdkafka's sticky partitioner whole bursts went to one
    # partition (a 32-partition run put all 138K rows on partition 0, past
    # the test broker's ~5 MB: "offset out of range", rows lost). With the
    # example's producer options every partition gets its share.
    piperec = os.environ.get("PIPEREC")
    if not piperec:
        pytest.skip("PIPEREC not set: run through ctest")
    ck = pytest.importorskip("confluent_kafka")
    sys.path.insert(0, os.path.join(SRC, "examples"))
    import train_dlrm as ex
    parts = 8
    br = subprocess.Popen([piperec, "broker", "--partitions", str(parts), "--topics", "events"],
                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        bootstrap = br.stdout.readline().strip().split("=", 1)[1]
        rows = subprocess.run([piperec, "gen", "--rows", "40000", "--output", "-"], capture_output=True,
                              check=True, timeout=60).stdout
        p = subprocess.run([piperec, "produce", "--bootstrap", bootstrap, "--topic", "events", "--input",
                            "-", "--lines-per-message", "16", "--rate", "1000000"] + ex.PRODUCE_SPREAD,
                           input=rows, capture_output=True, timeout=60)
        assert p.returncode == 0, p.stderr
        c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "spread"})
        counts = [c.get_watermark_offsets(ck.TopicPartition("events", i), timeout=10)[1] for i in range(parts)]
        c.close()
    finally:
        br.kill()
        br.wait()
    mean = sum(counts) / parts
    assert sum(counts) == 2500 and min(counts) > 0.5 * mean and max(counts) < 1.5 * mean, counts


def test_dlrm_example_sees_lost_rows():
    # piperec run's message when the broker dropped rows it had not read
    # (ingest/'s wording, and librdkafka's error name): the example must exit
    # 1 on it (it looked for a wording piperec no longer prints).
    sys.path.insert(0, os.path.join(SRC, "examples"))
    import train_dlrm as ex
    s = ex.LocalStream.__new__(ex.LocalStream)
    s.run_err = os.path.join(os.environ.get("PR_TMP", "/tmp"), "dlrm-lost-%d.err" % os.getpid())
    try:
        for text, lost in [
                ("piperec: error: pipeline dlrm: consumer: consumer: events [0]: offset 3084 is out of "
                 "range (available offsets 7452..8636): the records were deleted (retention)\n", True),
                ("rdkafka: Broker: Offset out of range (OFFSET_OUT_OF_RANGE)\n", True),
                ("piperec: info: pipeline dlrm: 32 partition(s) revoked\n", False)]:
            with open(s.run_err, "w") as f:
                f.write(text)
            assert s.lost_rows() is lost, text
    finally:
        os.unlink(s.run_err)
