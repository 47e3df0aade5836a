"""StreamDataset(delivery="checkpoint") against a real `piperec run` in
checkpoint delivery mode (sinks.trainer.delivery: checkpoint) fed by
`piperec broker`: train N batches, checkpoint (state_dict, fsync'd file,
commit_checkpoint), train a few more, crash (drop the dataset), restore into
a new dataset: the rows before the checkpoint plus the rows after the
restore are every produced row exactly once. Row ids ride in dense columns
I1, I2 (id = I1 * 1000 + I2; see tests/service/test_checkpoint_delivery.py).
"""

import json
import math
import os
import socket
import subprocess
import time

import pytest

torch = pytest.importorskip("torch")

TOTAL = 600


def _free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def _ids(b):
    d = b.dense.numpy()
    return [round(math.expm1(float(d[r, 0]))) * 1000 + round(math.expm1(float(d[r, 1])))
            for r in range(b.rows)]


@pytest.fixture
def checkpoint_service(tmp_path):
    piperec = os.environ.get("PIPEREC")
    if not piperec or not os.path.exists(piperec):
        pytest.skip("PIPEREC not set: run through ctest")
    procs = []
    try:
        br = subprocess.Popen([piperec, "broker", "--partitions", "2", "--topics", "ck"],
                              stdout=subprocess.PIPE, stderr=open(tmp_path / "broker.err", "w"),
                              text=True)
        procs.append(br)
        first = br.stdout.readline().strip()
        assert first.startswith("bootstrap="), first
        bootstrap = first[len("bootstrap="):]
        rows = tmp_path / "rows.tsv"
        with open(rows, "w") as f:
            for i in range(TOTAL):
                dense = [str(i // 1000), str(i % 1000)] + ["1"] * 11
                sparse = ["%08x" % (i * 7919 % 1000003)] * 26
                f.write("\t".join([str(i % 2)] + dense + sparse) + "\n")
        r = subprocess.run([piperec, "produce", "--bootstrap", bootstrap, "--topic", "ck",
                            "--input", str(rows)], capture_output=True, text=True, timeout=30)
        assert r.returncode == 0, r.stderr
        port = _free_port()
        cfg = tmp_path / "ck.yaml"
        cfg.write_text("""pipelines:
  - name: p
    source:
      kafka:
        topics: [ck]
        group.id: ck
        properties: { bootstrap.servers: "%s", auto.offset.reset: earliest,
                      session.timeout.ms: "3000", heartbeat.interval.ms: "500",
                      auto.commit.interval.ms: "200" }
    batch: { size: 16, max_delay_ms: 20 }
    sinks:
      trainer: { listen: "127.0.0.1:%d", max_unacked_batches: 4, delivery: checkpoint }
    state: { dir: "%s/state" }
http: { listen: "127.0.0.1:0" }
log: { level: info }
""" % (bootstrap, port, tmp_path))
        procs.append(subprocess.Popen([piperec, "run", "--config", str(cfg)],
                                      stderr=open(tmp_path / "run.err", "w")))
        yield "127.0.0.1:%d" % port
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


@pytest.mark.parametrize("commit", [True, False], ids=["committed", "commit-lost"])
def test_checkpoint_restore_exactly_once(checkpoint_service, tmp_path, commit):
    # commit-lost: the checkpoint is durable but the trainer crashed before
    # commit_checkpoint(); only Subscribe.resume (load_state_dict) keeps its
    # rows from being sent again.
    from piperec.torch import StreamDataset

    addr = checkpoint_service
    ckpt = tmp_path / "model.ckpt.json"

    ds = StreamDataset(addr, "p", credits=4, delivery="checkpoint", connect_timeout=20,
                       idle_timeout=15, sparse_format="triple")
    it = iter(ds)
    before, after_ckpt = [], []
    for _ in range(8):
        b = next(it)
        # Provenance: no group_instance_id in this config, so $POD_NAME or the host name.
        assert b.replica == (os.environ.get("POD_NAME") or socket.gethostname())
        assert b.offsets and all(r["topic"] == "ck" for r in b.offsets)
        before.extend(_ids(b))
    state = ds.state_dict()
    assert state["delivery"] == "checkpoint" and state["position"]
    covered = sum(b - a + 1 for iv in state["position"].values() for a, b in iv)
    assert covered == len(before)  # the position is exactly the rows trained on
    tmp = str(ckpt) + ".tmp"
    with open(tmp, "w") as f:
        json.dump({"data": state, "ids": before}, f)
        f.flush()
        os.fsync(f.fileno())
    os.rename(tmp, ckpt)
    if commit:
        assert ds.commit_checkpoint(state) == 1
    for _ in range(3):  # trained on after the checkpoint, then lost with the crash
        after_ckpt.extend(_ids(next(it)))
    assert set(after_ckpt).isdisjoint(before)
    it.close()  # "crash": the connection goes, the dataset with it
    del it, ds

    with open(ckpt) as f:
        saved = json.load(f)
    ds2 = StreamDataset(addr, "p", credits=4, delivery="checkpoint", connect_timeout=20,
                        idle_timeout=3, sparse_format="triple")
    ds2.load_state_dict(saved["data"])
    restored = saved["ids"]
    deadline = time.monotonic() + 30
    for b in ds2:
        restored.extend(_ids(b))
        if len(restored) >= TOTAL or time.monotonic() > deadline:
            break
    assert sorted(restored) == list(range(TOTAL)), (
        "%d rows, %d distinct, %d missing" % (len(restored), len(set(restored)),
                                              TOTAL - len(set(restored) & set(range(TOTAL)))))
    # The rows trained after the checkpoint came back (the restored model lacks them).
    assert set(after_ckpt) <= set(restored)
    end = ds2.state_dict()["position"]
    assert sum(b - a + 1 for iv in end.values() for a, b in iv) == TOTAL


def test_checkpoint_state_validation():
    from piperec.torch import StreamDataset
    ds = StreamDataset("127.0.0.1:1", "p", delivery="checkpoint")
    with pytest.raises(ValueError):
        StreamDataset("127.0.0.1:1", "p", delivery="bogus")
    with pytest.raises(ValueError):
        ds.load_state_dict({"version": 1, "pipeline": "p", "endpoints": {}})  # an ack-mode state
    with pytest.raises(RuntimeError):
        StreamDataset("127.0.0.1:1", "p").commit_checkpoint({"delivery": "checkpoint"})
    st = {"version": 1, "pipeline": "p", "delivery": "checkpoint",
          "position": {"t/0": [[0, 9], [20, 29]], "t/1": [[5, 5]]}}
    ds.load_state_dict(st)
    assert ds.state_dict() == st
