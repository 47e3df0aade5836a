#!/usr/bin/python3
"""baseline_protobuf.py — the Python consumer piperec's Protobuf reader is
measured against (issue 23): Debian's python3-protobuf, the message class made
by message_factory from the same descriptor set, each message parsed and the
12 fields examples/clickstream.yaml reads taken out (presence checked where the
field is optional or a message, lists copied), as a consumer would before its
own feature code.

    baseline_protobuf.py DESC FILE [ROUNDS]

FILE holds length-delimited shop.Click messages (bench_protobuf --write).
Prints one JSON line: MB/s and events/s per core (process CPU time, best of
ROUNDS passes; the file is read into memory first and split outside the timing).
"""
import json
import sys
import time

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.internal import api_implementation


def message_class(desc_file, name):
    fds = descriptor_pb2.FileDescriptorSet()
    with open(desc_file, "rb") as f:
        fds.ParseFromString(f.read())
    pool = descriptor_pool.DescriptorPool()
    for fd in fds.file:
        pool.Add(fd)
    d = pool.FindMessageTypeByName(name)
    try:
        return message_factory.GetMessageClass(d)
    except AttributeError:
        return message_factory.MessageFactory(pool).GetPrototype(d)


def split(data):
    out, i = [], 0
    while i < len(data):
        n = shift = 0
        while True:
            b = data[i]
            i += 1
            n |= (b & 0x7F) << shift
            shift += 7
            if b < 0x80:
                break
        out.append(data[i:i + n])
        i += n
    return out


def extract(cls, msgs):
    rows = []
    for b in msgs:
        m = cls.FromString(b)
        u, it, lb = m.user, m.item, m.label
        rows.append((
            m.ts,
            lb.click,
            lb.purchase if lb.HasField("purchase") else None,
            lb.dwell_s,
            it.price if m.HasField("item") else None,
            u.age_days if u.HasField("age_days") else None,
            u.id if m.HasField("user") else None,
            it.id,
            it.category,
            list(it.tags),
            list(m.history),
            m.context.device if m.HasField("context") else None,
        ))
    return rows


def main():
    desc, path = sys.argv[1], sys.argv[2]
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    cls = message_class(desc, "shop.Click")
    with open(path, "rb") as f:
        msgs = split(f.read())
    nbytes = sum(len(m) for m in msgs)
    best = None
    for _ in range(rounds):
        t0 = time.process_time()
        rows = extract(cls, msgs)
        t = time.process_time() - t0
        best = t if best is None or t < best else best
    assert len(rows) == len(msgs)
    print(json.dumps({"bench": "python_protobuf_extract", "events": len(msgs), "bytes": nbytes,
                      "cpu_s": round(best, 4), "mb_per_s": round(nbytes / best / 1e6, 1),
                      "events_per_s": round(len(msgs) / best),
                      "implementation": api_implementation.Type()}))


if __name__ == "__main__":
    main()
