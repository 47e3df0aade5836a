#!/usr/bin/python3
"""fault_trainer.py — the trainer of the fault-injection suite (tests/fault/).

Stays subscribed to one pipeline across server restarts (reconnects until
--stop-file exists) and records every row it receives, in arrival order, to
--log: per batch a header (epoch, sequence, rows, n_sparse) then the row ids
(dense column 0, which the tests set to the row number; `transform.dense:
[]` keeps it exact) and the sparse indices. Each batch is written and
flushed before it is acked, like a real trainer that acks after its step.

--status FILE is rewritten (atomically) about 5 times a second with
"distinct total batches connects last_epoch": the tests poll it to know when every
produced row arrived. --slow-file FILE: while it exists, sleep --slow-ms
after each batch (the overload test's slow trainer).
"""
import argparse
import json
import os
import struct
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../clients/python"))
from piperec_client import ServerError, TrainerClient  # noqa: E402

HDR = struct.Struct("<QQII")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--connect", required=True)
    ap.add_argument("--pipeline", default="p")
    ap.add_argument("--log", required=True)
    ap.add_argument("--status", required=True)
    ap.add_argument("--stop-file", required=True)
    ap.add_argument("--max-rows", type=int, required=True)
    ap.add_argument("--credits", type=int, default=8)
    ap.add_argument("--slow-file")
    ap.add_argument("--slow-ms", type=float, default=0)
    ap.add_argument("--notices", help="also write each batch's recycled-index notices here: "
                    "one JSON line per batch, in the order of --log")
    a = ap.parse_args()

    seen = np.zeros(a.max_rows, dtype=bool)
    total = batches = connects = last_epoch = 0
    log = open(a.log, "ab")
    notes = open(a.notices, "a") if a.notices else None
    last_status = 0.0

    def write_status(force=False):
        nonlocal last_status
        now = time.monotonic()
        if not force and now - last_status < 0.2:
            return
        last_status = now
        tmp = a.status + ".tmp"
        with open(tmp, "w") as f:
            f.write("%d %d %d %d %d\n" % (int(seen.sum()), total, batches, connects, last_epoch))
        os.replace(tmp, a.status)

    while not os.path.exists(a.stop_file):
        try:
            client = TrainerClient(a.connect, a.pipeline, credits=a.credits,
                                   client_id="fault-trainer", timeout=2.0)
        except (OSError, TimeoutError, EOFError, ServerError):
            write_status()
            time.sleep(0.1)
            continue
        connects += 1
        try:
            while not os.path.exists(a.stop_file):
                b = client.recv(timeout=0.2)
                write_status()
                if b is None:
                    continue
                ids = b.dense[:, 0].astype(np.int64)
                sparse = np.ascontiguousarray(b.sparse, dtype=np.int64)
                log.write(HDR.pack(b.epoch, b.sequence, b.rows, b.n_sparse))
                log.write(ids.tobytes())
                log.write(sparse.tobytes())
                if notes:
                    # written before the batch's log flush: a line per logged batch
                    notes.write(json.dumps({"epoch": b.epoch, "seq": b.sequence,
                                            "recycled": [list(n) for n in b.recycled]}) + "\n")
                    notes.flush()
                log.flush()
                ok = (ids >= 0) & (ids < a.max_rows)
                seen[ids[ok]] = True
                total += b.rows
                batches += 1
                last_epoch = b.epoch
                client.ack(b.sequence)
                if a.slow_file and os.path.exists(a.slow_file):
                    time.sleep(a.slow_ms / 1000.0)
        except (OSError, EOFError, ServerError, ValueError):
            pass
        finally:
            client.close()
    write_status(force=True)
    log.close()


if __name__ == "__main__":
    main()
