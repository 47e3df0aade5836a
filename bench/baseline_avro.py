#!/usr/bin/python3
"""baseline_avro.py — the Python side of bench/bench_avro.sh (issue 23): a
consumer doing Avro decode + extract with Debian's python3-avro, over the file
`piperec gen --format avro --schema-id plain` writes (each record a varint
length, then a plain Avro body of examples/clickstream.avsc): each record
decoded with avro.io.DatumReader, then the paths examples/clickstream.yaml
reads collected into per-path columns (None where absent), as the C reader
does. Prints one line: MB/s and records/s of process CPU time (one core).

usage: baseline_avro.py FILE SCHEMA.avsc [MAX_RECORDS]
"""
import io
import sys
import time

import avro.io
import avro.schema

PATHS = ["ts", "label.click", "label.purchase", "label.dwell_s", "item.price", "user.age_days",
         "user.id", "item.id", "item.category", "item.tags", "history", "context.device"]


def records(buf, limit):
    pos, n = 0, 0
    while pos < len(buf) and n < limit:
        length, shift = 0, 0
        while True:
            b = buf[pos]
            pos += 1
            length |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                break
        yield buf[pos:pos + length]
        pos += length
        n += 1


def get(rec, path):
    for seg in path.split("."):
        if not isinstance(rec, dict) or seg not in rec:
            return None
        rec = rec[seg]
    return rec


def main():
    data = open(sys.argv[1], "rb").read()
    schema = avro.schema.parse(open(sys.argv[2]).read())
    limit = int(sys.argv[3]) if len(sys.argv) > 3 else 1 << 62
    reader = avro.io.DatumReader(schema)
    cols = {p: [] for p in PATHS}
    t0 = time.process_time()
    n = size = 0
    for body in records(data, limit):
        rec = reader.read(avro.io.BinaryDecoder(io.BytesIO(body)))
        for p in PATHS:
            cols[p].append(get(rec, p))
        n += 1
        size += len(body)
    t = time.process_time() - t0
    print("%-44s %8.2f MB/s %9.0f records/s per core (%d records, %.1f MB, %.3f s)"
          % ("python3-avro DatumReader + extract", size / t / 1e6, n / t, n, size / 1e6, t))


if __name__ == "__main__":
    main()
