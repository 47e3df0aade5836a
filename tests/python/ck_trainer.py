#!/usr/bin/python3
"""ck_trainer.py — a trainer process for the checkpoint-delivery kill tests
(test_checkpoint_dataset.py, issue 22): StreamDataset(delivery="checkpoint")
read by the main process (one data-parallel rank) or through a
StreamDataLoader with 2 worker processes. Every --every batches it saves a
durable checkpoint (state_dict + the row ids this process trained,
fsync + rename) and only then commits it, printing "ckpt N" when the commit
returned. The test kills it (SIGKILL to its process group, workers too)
somewhere in that loop, then starts it again with --restore to load the
last checkpoints (several ranks: merge_state_dicts of all of them) and
train to the end of the stream; it then writes the ids it trained to --out.
Row ids ride in dense columns I1, I2 (id = I1 * 1000 + I2).
"""

import argparse
import json
import math
import os
import sys
import time


def _ids(b):
    d = b.dense.numpy()
    return [round(math.expm1(float(d[r, 0]))) * 1000 + round(math.expm1(float(d[r, 1])))
            for r in range(b.rows)]


def _save(path, obj):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f)
        f.flush()
        os.fsync(f.fileno())
    os.rename(tmp, path)


def _barrier(d, name, peers, timeout_s=60):
    """Without it, a rank that imports torch faster can train on the whole
    (small) stream before its sibling subscribes, and the sibling never
    reaches a checkpoint."""
    open(os.path.join(d, name + ".ready"), "w").close()
    deadline = time.monotonic() + timeout_s
    while sum(f.endswith(".ready") for f in os.listdir(d)) < peers:
        if time.monotonic() > deadline:
            raise SystemExit("ck_trainer: %d of %d peers ready after %d s" % (
                sum(f.endswith(".ready") for f in os.listdir(d)), peers, timeout_s))
        time.sleep(0.005)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("endpoint")
    ap.add_argument("--client-id", required=True)
    ap.add_argument("--workers", type=int, default=0)
    ap.add_argument("--ckpt", required=True, help="this trainer's checkpoint file")
    ap.add_argument("--restore", nargs="*", default=[], help="checkpoint files to resume from (merged)")
    ap.add_argument("--every", type=int, default=3)
    ap.add_argument("--step-s", type=float, default=0.02, help="time a training step takes")
    ap.add_argument("--idle-timeout", type=float, default=15)
    ap.add_argument("--out", help="write the ids trained (after a restore) here at the end")
    ap.add_argument("--barrier", help="a directory: mark this process ready there, then wait until "
                    "--peers processes are, so data-parallel ranks start reading together")
    ap.add_argument("--peers", type=int, default=1)
    args = ap.parse_args()
    from piperec.torch import StreamDataLoader, StreamDataset, merge_state_dicts

    ds = StreamDataset(args.endpoint, "p", credits=4, delivery="checkpoint", connect_timeout=20,
                       idle_timeout=args.idle_timeout, sparse_format="triple", client_id=args.client_id)
    loader = StreamDataLoader(ds, num_workers=args.workers, prefetch_factor=2,
                              processes=True) if args.workers else ds
    if args.restore:
        saved = [json.load(open(p)) for p in args.restore]
        loader.load_state_dict(merge_state_dicts([s["data"] for s in saved]))
    if args.barrier:
        _barrier(args.barrier, args.client_id, args.peers)
    mine = []  # ids this process trained on
    n = 0
    for b in loader:
        time.sleep(args.step_s)  # the training step
        mine.extend(_ids(b))
        n += 1
        if n % args.every == 0:
            state = loader.state_dict()
            _save(args.ckpt, {"data": state, "ids": mine})
            ds.commit_checkpoint(state)
            print("ckpt %d" % n, flush=True)
    if args.out:
        _save(args.out, {"ids": mine})
    print("done %d" % n, flush=True)


if __name__ == "__main__":
    sys.exit(main())
