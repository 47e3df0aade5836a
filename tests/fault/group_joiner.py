#!/usr/bin/python3
"""group_joiner.py — a plain Kafka consumer that joins a piperec replica's
consumer group (cooperative-sticky, as piperec uses) to make it revoke
partitions, and records the row id (field 2 of the Criteo line: the fault
suite's row number) of every message it reads, one per line, to --ids.

Runs until --stop-file exists; commits what it read when it closes.
"""
import argparse
import os
import sys

from confluent_kafka import Consumer


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--group", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--ids", required=True)
    ap.add_argument("--stop-file", required=True)
    a = ap.parse_args()
    out = open(a.ids, "w")
    c = Consumer({"bootstrap.servers": a.bootstrap, "group.id": a.group,
                  "partition.assignment.strategy": "cooperative-sticky",
                  "auto.offset.reset": "earliest", "session.timeout.ms": 3000,
                  "heartbeat.interval.ms": 500})
    c.subscribe([a.topic], on_assign=lambda _c, ps: print(
        "joiner: assigned %d partition(s)" % len(ps), file=sys.stderr, flush=True))
    while not os.path.exists(a.stop_file):
        m = c.poll(0.1)
        if m is None or m.error():
            continue
        for line in m.value().decode().splitlines():
            out.write(line.split("\t")[1] + "\n")
        out.flush()
    c.close()
    out.close()


if __name__ == "__main__":
    main()
