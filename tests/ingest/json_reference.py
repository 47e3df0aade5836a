#!/usr/bin/python3
"""json_reference.py — random JSON documents and what pr_json_extract must make of them,
computed independently with Python's json module (the cross-check of
tests/ingest/test_json_extract.c).

    json_reference.py OUT N SEED

Writes N lines "HEXDOC<TAB>EXPECTED". The paths, types and limits are fixed
here and mirrored by the C test (REF_PATHS there):

    a INT64 scalar | b DOUBLE scalar | s STRING scalar | k KEY scalar_or_list |
    t BOOL scalar | l INT64 list (max 5) | o.x STRING scalar_or_list |
    o.y.z DOUBLE list (max 4) | o.k KEY scalar           max_depth 6

EXPECTED is "R:<reason>" for a rejected document, where <reason> is
"syntax" when Python's json refuses the bytes (then any rejection is right:
the C extractor may meet a semantic problem first), else the exact reason;
or, for an accepted document, per path "<presence>:<count>:<values>|" with
values comma-separated: int64 in decimal, doubles as the 16 hex digits of
their IEEE bits, bools 0/1, strings as hex of their UTF-8 bytes.
"""
import json
import random
import struct
import sys

PATHS = [("a", "int"), ("b", "double"), ("s", "string"), ("k", "key"), ("t", "bool"),
         ("l", "int"), ("o.x", "string"), ("o.y.z", "double"), ("o.k", "key")]
SHAPE = {"a": "s", "b": "s", "s": "s", "k": "e", "t": "s", "l": "l", "o.x": "e", "o.y.z": "l",
         "o.k": "s"}
MAX_LIST = {"l": 5, "o.y.z": 4}
MAX_DEPTH = 6
I64 = (-(1 << 63), (1 << 63) - 1)


class Reject(Exception):
    pass


class Num(str):
    """A number literal as written (parse_int/parse_float hooks)."""


def is_float_lit(s):
    return any(c in s for c in ".eE")


def check_str(s):
    # A lone surrogate escape survives json.loads; piperec refuses it.
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        raise Reject("bad_escape")


def walk_skip(v, depth):
    if isinstance(v, Pairs):
        if depth > MAX_DEPTH:
            raise Reject("too_deep")
        for k, e in v:
            check_str(k)
            walk_skip(e, depth + 1)
    elif isinstance(v, list):
        if depth > MAX_DEPTH:
            raise Reject("too_deep")
        for e in v:
            walk_skip(e, depth + 1)
    elif isinstance(v, str) and not isinstance(v, Num):
        check_str(v)


class Pairs(list):
    pass


def scalar(path, v):
    typ = dict(PATHS)[path]
    if isinstance(v, Num):
        if typ == "double":
            x = float(v) if is_float_lit(v) or not (I64[0] <= int(v) <= I64[1]) else float(int(v))
            if x in (float("inf"), float("-inf")):
                raise Reject("number_out_of_range")
            return struct.pack("<d", x)[::-1].hex()
        if typ in ("int", "key"):
            if is_float_lit(v):
                if float(v) in (float("inf"), float("-inf")):
                    raise Reject("number_out_of_range")
                raise Reject("wrong_type")
            i = int(v)
            if not I64[0] <= i <= I64[1]:
                raise Reject("number_out_of_range")
            return str(i) if typ == "int" else str(i).encode().hex()
        raise Reject("wrong_type")
    if isinstance(v, bool):
        if typ != "bool":
            raise Reject("wrong_type")
        return "1" if v else "0"
    if isinstance(v, str):
        if typ not in ("string", "key"):
            raise Reject("wrong_type")
        check_str(v)
        return v.encode("utf-8").hex()
    raise Reject("wrong_type")  # null, list, object


def leaf(path, v, depth, out):
    if v is None:
        out[path] = (1, [])
        return
    if isinstance(v, Pairs):
        raise Reject("wrong_type")
    if isinstance(v, list) and not isinstance(v, Num):
        if SHAPE[path] == "s":
            raise Reject("wrong_type")
        if depth > MAX_DEPTH:
            raise Reject("too_deep")
        vals = []
        for i, e in enumerate(v):
            if i >= MAX_LIST.get(path, 1024):
                raise Reject("list_too_long")
            vals.append(scalar(path, e))
        out[path] = (2, vals)
        return
    if SHAPE[path] == "l":
        raise Reject("wrong_type")
    out[path] = (2, [scalar(path, v)])


def walk(obj, prefix, depth, out):
    names = [p for p, _ in PATHS]
    for k, v in obj:
        check_str(k)
        full = prefix + k
        if full in names:
            for p in names:  # a repeated key: the last one wins
                if p == full:
                    out.pop(p, None)
            leaf(full, v, depth + 1, out)
        elif any(p.startswith(full + ".") for p in names):
            for p in names:
                if p.startswith(full + "."):
                    out.pop(p, None)
            if v is None:
                continue
            if not isinstance(v, Pairs):
                raise Reject("wrong_type")
            if depth + 1 > MAX_DEPTH:
                raise Reject("too_deep")
            walk(v, full + ".", depth + 1, out)
        else:
            walk_skip(v, depth + 1)


def no_constant(name):
    raise ValueError(name)


def expected(doc):
    try:
        text = doc.decode("utf-8")
        v = json.loads(text, object_pairs_hook=Pairs, parse_int=Num, parse_float=Num,
                       parse_constant=no_constant)
    except (ValueError, RecursionError):
        return "R:syntax"
    if not isinstance(v, Pairs):
        return "R:not_object"
    out = {}
    try:
        walk(v, "", 1, out)
    except Reject as e:
        return "R:" + str(e)
    s = ""
    for p, _ in PATHS:
        pres, vals = out.get(p, (0, []))
        s += "%d:%d:%s|" % (pres, len(vals), ",".join(vals))
    return s


KEYS = ["a", "b", "s", "k", "t", "l", "o", "x", "y", "z", "u", "\\u0061", "o\\u0000"]
STRS = ["", "abc", "caf\u00e9", "\\u00e9", "\\ud83d\\ude00", "\\ud800", "\\udc00x", "tab\\t",
        "q\\\"", "\u20ac\U0001F600", "\\/", "\\u0000"]
NUMS = ["0", "-0", "1", "-1", "42", "9223372036854775807", "-9223372036854775808",
        "9223372036854775808", "-9223372036854775809", "1.5", "-0.0", "1e308", "1e309",
        "-1e309", "2.5e-3", "1E2", "123456789012345678901234567890", "0.1", "1e-400",
        "4.9e-324", "17976931348623157e292"]


def gen(r, depth):
    c = r.random()
    if depth > 8 or c < 0.45:
        c2 = r.random()
        if c2 < 0.35:
            return r.choice(NUMS)
        if c2 < 0.7:
            return '"' + r.choice(STRS) + '"'
        return r.choice(["true", "false", "null"])
    if c < 0.7:
        n = r.randint(0, 6)
        return "[" + ",".join(gen(r, depth + 1) for _ in range(n)) + "]"
    return gen_obj(r, depth)


GOOD_STRS = ["", "abc", "caf\u00e9", "\\u00e9", "\\ud83d\\ude00", "tab\\t", "\u20ac"]
INTS = ["0", "-0", "7", "-12", "9223372036854775807", "-9223372036854775808"]


def typed(r, k, depth):
    """A value that usually fits key k's path (so that many documents pass)."""
    if k in ("a", "l"):
        v = [r.choice(INTS) for _ in range(r.randint(0, 6))] if k == "l" else r.choice(INTS)
    elif k in ("b", "z"):
        v = [r.choice(NUMS[:16]) for _ in range(r.randint(0, 5))] if k == "z" else r.choice(NUMS)
    elif k in ("s", "x"):
        v = '"%s"' % r.choice(GOOD_STRS)
    elif k == "k":
        v = r.choice(['"%s"' % r.choice(GOOD_STRS), r.choice(INTS), "[%s]" % r.choice(INTS)])
    elif k == "t":
        v = r.choice(["true", "false", "null"])
    else:  # o, y: an object of those keys
        keys = ["x", "y", "k", "z", "u"]
        return "{" + ",".join('"%s":%s' % (kk, typed(r, kk, depth + 1))
                              for kk in r.sample(keys, r.randint(0, 3))) + "}"
    return "[%s]" % ",".join(v) if isinstance(v, list) else v


def gen_obj(r, depth):
    n = r.randint(0, 6)
    ws = r.choice(["", " ", "\n "])
    parts = []
    for _ in range(n):
        k = r.choice(KEYS)
        good = depth < 4 and r.random() < 0.7 and k in "abstlokxyz"
        parts.append('"%s"%s:%s%s' % (k, ws, ws, typed(r, k, depth) if good else gen(r, depth + 1)))
    return "{" + ws + ("," + ws).join(parts) + ws + "}"


def mutate(r, b):
    c = r.random()
    if c < 0.3:
        return b[: r.randint(0, max(0, len(b) - 1))]
    i = r.randint(0, max(0, len(b) - 1))
    if c < 0.6:
        return b[:i] + bytes([r.randint(0, 255)]) + b[i + 1:]
    bad = r.choice([b"\xc0\x80", b"\xe0\x80\x80", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\x80",
                    b"\xe2\x82", b"\xff", b"\xc3\xa9", b"\xf0\x9f\x98\x80"])
    return b[:i] + bad + b[i:]


def main():
    out, n, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    r = random.Random(seed)
    with open(out, "w") as f:
        for _ in range(n):
            doc = gen_obj(r, 1).encode("utf-8")
            if r.random() < 0.3:
                doc = mutate(r, doc)
            f.write("%s\t%s\n" % (doc.hex(), expected(doc)))


if __name__ == "__main__":
    main()
