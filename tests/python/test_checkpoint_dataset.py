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


def _released(tmp_path):
    """Batches the trainer sink has let go of (piperec_sink_batches_acked_total):
    in checkpoint delivery, those a committed checkpoint (or a resume) holds."""
    import urllib.request
    port = (tmp_path / "http.port").read_text()
    text = urllib.request.urlopen("http://127.0.0.1:%s/metrics" % port, timeout=5).read().decode()
    for line in text.splitlines():
        if line.startswith("piperec_sink_batches_acked_total") and 'sink="trainer"' in line:
            return int(float(line.split()[-1]))
    raise AssertionError("no piperec_sink_batches_acked_total{sink=\"trainer\"} in /metrics")


def _ids(b):
    d = b.dense.numpy()
    return [round(math.expm1(float(d[r, 0]))) * 1000 + round(math.expm1(float(d[r, 1])))
            for r in range(b.rows)]


@pytest.fixture
def checkpoint_run(tmp_path, piperec_broker, free_port):
    """(trainer endpoint, the `piperec run` process)."""
    bootstrap = piperec_broker(2, "ck")
    piperec = os.environ["PIPEREC"]
    procs = []
    try:
        rows = tmp_path / "rows.tsv"
        with open(rows, "w") as f:
            for i in range(TOTAL):
                dense = [str(i // 1000), str(i % 1000)] + ["1"] * 11
                sparse = ["%08x" % (i * 7919 % 1000003)] * 26
                f.write("\t".join([str(i % 2)] + dense + sparse) + "\n")
        r = subprocess.run([piperec, "produce", "--bootstrap", bootstrap, "--topic", "ck",
                            "--input", str(rows)], capture_output=True, text=True, timeout=30)
        assert r.returncode == 0, r.stderr
        port, http = free_port(), free_port()
        (tmp_path / "http.port").write_text(str(http))
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
      trainer: { listen: "127.0.0.1:%d", max_unacked_batches: 8, delivery: checkpoint }
    state: { dir: "%s/state" }
http: { listen: "127.0.0.1:%d" }
log: { level: info }
""" % (bootstrap, port, tmp_path, http))
        run = subprocess.Popen([piperec, "run", "--config", str(cfg)],
                               stderr=open(tmp_path / "run.err", "w"))
        procs.append(run)
        yield "127.0.0.1:%d" % port, run
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


@pytest.fixture
def checkpoint_service(checkpoint_run):
    return checkpoint_run[0]


@pytest.mark.parametrize("layout", ["protobuf", "raw", "raw-thread", "workers", "loader", "ranks"])
def test_kill9_during_commit_checkpoint(checkpoint_run, layout):
    """Issue 22: `piperec run` killed (SIGKILL) while the trainer commits
    checkpoints: commit_checkpoint() and the iterator raise ConnectionError
    naming the endpoint (was: a raw BrokenPipeError). "workers": a
    StreamDataLoader with 2 worker processes, whose commits go over short
    connections of the main process; "loader": StreamDataLoader(num_workers=2)
    by default (no worker processes: the dataset in the main process, issue
    22); "ranks": two data-parallel ranks (one
    dataset each, raw layout), each committing the merged state."""
    import threading
    from piperec.torch import StreamDataLoader, StreamDataset, merge_state_dicts

    addr, run = checkpoint_run

    def dataset(lay, cid):
        # "raw": received on the iterating thread (the host path's default);
        # "raw-thread": by a receive thread (the device path's default)
        thread = {"raw-thread": True}.get(lay)
        return StreamDataset(addr, "p", credits=4, delivery="checkpoint", connect_timeout=20,
                             idle_timeout=15, sparse_format="triple", layout=lay.split("-")[0],
                             client_id=cid, recv_thread=thread)
    if layout == "workers":
        dss = [dataset("protobuf", "w")]
        its = [iter(StreamDataLoader(dss[0], num_workers=2, processes=True))]
    elif layout == "loader":
        dss = [dataset("protobuf", "l")]
        loader = StreamDataLoader(dss[0], num_workers=2)
        assert loader.num_workers == 0 and loader._direct
        its = [iter(loader)]
    elif layout == "ranks":
        dss = [dataset("raw", "rank0"), dataset("raw", "rank1")]
        its = [iter(d) for d in dss]
    else:
        dss = [dataset(layout, "solo")]
        its = [iter(dss[0])]
    for it in its:
        next(it)
        next(it)
    state = merge_state_dicts([d.state_dict() for d in dss]) if len(dss) > 1 else dss[0].state_dict()
    for d in dss:
        assert d.commit_checkpoint(state, timeout=5) == 1
    killer = threading.Timer(0.3, run.kill)
    killer.start()
    for d in dss:
        with pytest.raises(ConnectionError) as ei:
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                d.commit_checkpoint(state, timeout=5)
                time.sleep(0.01)
        print("commit_checkpoint:", ei.value)
        assert addr in str(ei.value), str(ei.value)
    killer.join()
    run.wait()
    for it in its:
        with pytest.raises(ConnectionError) as ei:
            for _ in range(10):  # batches received before the kill come first
                next(it)
        assert addr in str(ei.value), str(ei.value)


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


def test_checkpoint_commit_from_dataloader_workers(checkpoint_service, tmp_path):
    """num_workers=2: each worker holds its own connection, so
    commit_checkpoint() in the main process goes over a short connection of
    its own. The server must release exactly the batches the training loop
    received (not the ones workers prefetched), and after a crash (loader
    and dataset dropped) a restore from the state_dict gets exactly the
    rows after the checkpoint."""
    from piperec.torch import StreamDataLoader, StreamDataset

    addr = checkpoint_service
    ckpt = tmp_path / "model.ckpt.json"
    ds = StreamDataset(addr, "p", credits=6, delivery="checkpoint", connect_timeout=20,
                       idle_timeout=15, sparse_format="triple")
    loader = StreamDataLoader(ds, num_workers=2, prefetch_factor=2, processes=True)
    it = iter(loader)
    before, after_ckpt = [], []
    for _ in range(10):
        before.extend(_ids(next(it)))
    state = loader.state_dict()
    covered = sum(b - a + 1 for iv in state["position"].values() for a, b in iv)
    assert covered == len(before)  # what the loop got, not what workers prefetched
    tmp = str(ckpt) + ".tmp"
    with open(tmp, "w") as f:
        json.dump({"data": state, "ids": before}, f)
        f.flush()
        os.fsync(f.fileno())
    os.rename(tmp, ckpt)
    assert ds._live == []  # the main process holds no connection of its own
    assert _released(tmp_path) == 0  # acks from workers release nothing
    assert ds.commit_checkpoint(state) == 1
    assert addr in ds.checkpoint_released  # CheckpointOk came back
    # Exactly the 10 batches the loop received, whichever worker's connection
    # had them (the short connection's resume releases them, the commit
    # confirms), not the ones workers prefetched.
    deadline = time.monotonic() + 5  # the service loop counts them at its next poll
    while _released(tmp_path) < 10 and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.2)
    assert _released(tmp_path) == 10
    for _ in range(3):  # trained on after the checkpoint, then lost with the crash
        after_ckpt.extend(_ids(next(it)))
    assert set(after_ckpt).isdisjoint(before)
    del it, loader, ds  # "crash": workers and their connections go

    with open(ckpt) as f:
        saved = json.load(f)
    ds2 = StreamDataset(addr, "p", credits=6, delivery="checkpoint", connect_timeout=20,
                        idle_timeout=3, sparse_format="triple")
    loader2 = StreamDataLoader(ds2, num_workers=2, prefetch_factor=2, processes=True)
    loader2.load_state_dict(saved["data"])
    restored = list(saved["ids"])
    deadline = time.monotonic() + 40
    for b in loader2:
        restored.extend(_ids(b))
        if len(restored) >= TOTAL or time.monotonic() > deadline:
            break
    assert sorted(restored) == list(range(TOTAL)), (
        "%d rows, %d distinct, %d missing" % (len(restored), len(set(restored)),
                                              TOTAL - len(set(restored) & set(range(TOTAL)))))
    assert set(after_ckpt) <= set(restored)
    # A second checkpoint through the short connection covers the rest.
    st2 = loader2.state_dict()
    assert sum(b - a + 1 for iv in st2["position"].values() for a, b in iv) == TOTAL
    n_batches = _released(tmp_path)
    assert ds2.commit_checkpoint(st2) == 1
    # Everything the restored loop received is released now: no batch is held.
    deadline = time.monotonic() + 5
    while _released(tmp_path) == n_batches and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _released(tmp_path) > n_batches
    del loader2


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


def test_merge_checkpoint_states():
    # Data-parallel ranks in checkpoint delivery: merge_state_dicts() is the
    # union of their offset positions and stays a checkpoint-delivery state
    # that commit_checkpoint() accepts (it used to come back in the ack-mode
    # shape, which commit_checkpoint() refused).
    from piperec.torch import merge_state_dicts
    a = {"version": 1, "pipeline": "p", "delivery": "checkpoint",
         "position": {"ck/0": [[0, 9]], "ck/1": [[5, 7]]}}
    b = {"version": 1, "pipeline": "p", "delivery": "checkpoint",
         "position": {"ck/0": [[10, 19]]}}
    m = merge_state_dicts([a, b])
    assert m["delivery"] == "checkpoint" and m["pipeline"] == "p"
    assert m["position"] == {"ck/0": [[0, 19]], "ck/1": [[5, 7]]}
    with pytest.raises(ValueError):
        merge_state_dicts([a, {"version": 1, "pipeline": "p", "endpoints": {}}])


@pytest.mark.parametrize("shape", ["workers", "ranks"])
def test_trainer_kill9_then_restore_exactly_once(checkpoint_run, tmp_path, shape):
    """Issue 22: the trainer side killed with SIGKILL (its whole process
    group: DataLoader workers too, like a lost node) somewhere in its
    checkpoint loop, then restored from its last durable checkpoint(s):
    "workers": one trainer reading through StreamDataLoader(num_workers=2);
    "ranks": two data-parallel ranks (two processes), each checkpointing its
    own position, restored on both ranks from merge_state_dicts of both.
    The rows in the checkpoints plus the rows trained after the restore are
    every produced row exactly once (the rows trained after a checkpoint
    and lost with the kill come back; none in a checkpoint does)."""
    import signal
    import sys
    import threading
    addr, run = checkpoint_run
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ck_trainer.py")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.join(os.path.dirname(script), "..", "..", "clients", "python")
    names = ["w"] if shape == "workers" else ["rank0", "rank1"]
    extra = ["--workers", "2"] if shape == "workers" else []

    def start(name, *more):
        return subprocess.Popen([sys.executable, script, addr, "--client-id", name] + extra + list(more),
                                stdout=subprocess.PIPE, stderr=open(tmp_path / (name + ".err"), "a"),
                                text=True, env=env, start_new_session=True)
    ckpts = [str(tmp_path / (n + ".ckpt.json")) for n in names]
    barrier = tmp_path / "barrier"  # the ranks start reading together
    barrier.mkdir()
    procs = [start(n, "--ckpt", c, "--barrier", str(barrier), "--peers", str(len(names)))
             for n, c in zip(names, ckpts)]
    try:
        seen = [0] * len(procs)

        def watch(i):  # count "ckpt N" lines (commit returned)
            for line in procs[i].stdout:
                if line.startswith("ckpt "):
                    seen[i] += 1
        ws = [threading.Thread(target=watch, args=(i,), daemon=True) for i in range(len(procs))]
        for w in ws:
            w.start()
        deadline = time.monotonic() + 60
        while min(seen) < 2 and time.monotonic() < deadline and all(p.poll() is None for p in procs):
            time.sleep(0.01)
        assert min(seen) >= 2, ("no two checkpoints before the kill", seen,
                                [open(tmp_path / (n + ".err")).read()[-2000:] for n in names])
        time.sleep(0.05)  # into the next steps: rows trained after the checkpoint, a commit in flight
        for p in procs:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
        for w in ws:
            w.join(5)
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
    assert all(p.returncode == -signal.SIGKILL for p in procs)
    saved = [json.load(open(c)) for c in ckpts]
    before = [i for s in saved for i in s["ids"]]
    assert len(before) == len(set(before)) and before

    outs = [str(tmp_path / (n + ".out.json")) for n in names]
    # After the restore every batch is checkpointed before the next: an
    # iterator that ends (idle_timeout) gives back the batches it trained on
    # after its last commit, and a sibling still reading would train them
    # again (docs/pytorch.md, "Checkpoint delivery with StreamDataset").
    procs = [start(n + "-restored", "--ckpt", c + ".2", "--restore", *ckpts, "--idle-timeout", "4",
                   "--every", "1", "--out", o) for n, c, o in zip(names, ckpts, outs)]
    try:
        for p in procs:
            p.communicate(timeout=120)
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
    errs = [open(tmp_path / (n + "-restored.err")).read()[-2000:] for n in names]
    assert all(p.returncode == 0 for p in procs), errs
    after = [i for o in outs for i in json.load(open(o))["ids"]]
    got = before + after
    per = {n: json.load(open(o))["ids"] for n, o in zip(names, outs)}
    twice = sorted(i for i in set(got) if got.count(i) > 1)
    assert sorted(got) == list(range(TOTAL)), (
        "%d rows (%d in checkpoints), %d distinct, %d missing; twice: %s; checkpoints: %s; "
        "after the restore: %s" % (
            len(got), len(before), len(set(got)), TOTAL - len(set(got) & set(range(TOTAL))), twice,
            [(min(s["ids"]), max(s["ids"]), len(s["ids"])) for s in saved],
            {n: (v[:3], v[-20:], len(v)) for n, v in per.items()}))
    assert run.poll() is None  # piperec run lived through both trainers' deaths
