#!/usr/bin/python3
"""make_avro_corpus.py — seeds for fuzz_avro (tests/fuzz/corpus/avro/): records
of fuzz_avro.c's writer schema written by python3-avro (an independent
encoder), each as <flags byte><message>; flags bit 1 = registry framing
(magic byte 0 + a 4-byte id before the body). Run from the repository root.
"""
import decimal
import io
import os
import re
import struct

import avro.io
import avro.schema

src = open("tests/fuzz/fuzz_avro.c").read()
text = "".join(re.findall(r'"((?:[^"\\]|\\.)*)"', src[src.index("static const char avsc[]"):src.index(";", src.index("static const char avsc[]"))]))
schema = avro.schema.parse(text.encode().decode("unicode_escape"))
recs = [
    {"ts": 1732600000123, "y": 1.0, "skip": [{"a": "x", "b": None, "c": 1.5}], "u": {"id": "u1", "b": True},
     "kind": "b", "h": [1, 2, 3, 4, 5, 6], "m": {"z": 3, "tag": "red", "q": None}, "dec": decimal.Decimal("12.34"),
     "f": 0.25, "fx": b"abc", "raw": b"\x00\xff", "strs": ["p", "q", "r", "s"],
     "tree": {"v": 1, "next": {"v": 2, "next": None}}, "wm": {"a": 0.5, "b": None, "c": 2.0}},
    {"ts": None, "y": 0.0, "skip": [], "u": None, "kind": "a", "h": [], "m": {}, "dec": decimal.Decimal("0.00"),
     "f": -1.0, "fx": b"\x00\x00\x00", "raw": None, "strs": None, "tree": None, "wm": {}},
    {"ts": -5, "y": -2.5, "skip": [{}], "u": {"id": 42, "b": False}, "kind": "c", "h": [9],
     "m": {"tag": "", "z": None}, "dec": decimal.Decimal("-2.00"), "f": 1e30, "fx": b"zzz", "raw": b"",
     "strs": [], "tree": {"v": -1, "next": None},
     "wm": {"k%d" % i: float(i) for i in range(25)}},
]
out = "tests/fuzz/corpus/avro"
os.makedirs(out, exist_ok=True)
for i, r in enumerate(recs):
    buf = io.BytesIO()
    avro.io.DatumWriter(schema).write(r, avro.io.BinaryEncoder(buf))
    body = buf.getvalue()
    for flags, framed in ((0, b""), (1, b""), (2, b"\x00" + struct.pack(">I", 7)), (3, b"\x00\x00\x00\x00\x01")):
        with open(os.path.join(out, "seed_%d_%d" % (i, flags)), "wb") as f:
            f.write(bytes([flags]) + framed + body)
print("wrote", len(recs) * 4, "seeds to", out)
