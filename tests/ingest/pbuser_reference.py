#!/usr/bin/python3
"""pbuser_reference.py — random t3.All messages (tests/data/pbuser_types.proto)
written by Python's protobuf (the official encoder), and what piperec's reader
must extract from each, for test_pbuser.c's cross-check.

    pbuser_reference.py DESC N SEED OUT_MESSAGES OUT_EXPECTED

OUT_MESSAGES: the messages, varint-length-delimited. OUT_EXPECTED: one line
per message, one tab-separated field per path of PATHS (the order of
test_pbuser.c's all_paths): `A` (absent), or the values separated by spaces,
each `i:<int64>`, `d:<float.hex()>`, `b:<0|1>` or `s:<hex bytes>`. The rules
are the ones docs/formats.md states: proto3 implicit presence (defaults when
the holding message is there), optional / oneof / messages explicit, enums by
name, uint64 as its int64 bits, repeated empty = absent; a Timestamp read whole
as protobuf's own JSON mapping writes it (Timestamp.ToJsonString: the RFC 3339
text), a Duration as seconds + nanos / 1e9.
"""
import random
import struct
import sys

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

PATHS = ["i32", "i64", "u32", "u64", "s32", "s64", "f32", "f64", "sf32", "sf64", "fl", "db",
         "b", "str", "by", "color", "opt", "inner.n", "inner.c", "packed", "unpacked", "names",
         "attrs.k1", "objs.a.s", "scores.-3", "one_s", "one_n", "colors", "inner.s", "ts",
         "dwell_d", "times", "tmap.a"]
COLORS = {0: "COLOR_NONE", 1: "RED", 2: "GREEN"}


def classes(desc):
    fds = descriptor_pb2.FileDescriptorSet()
    with open(desc, "rb") as f:
        fds.ParseFromString(f.read())
    pool = descriptor_pool.DescriptorPool()
    for fd in fds.file:
        pool.Add(fd)
    d = pool.FindMessageTypeByName("t3.All")
    try:
        return message_factory.GetMessageClass(d)
    except AttributeError:
        return message_factory.MessageFactory(pool).GetPrototype(d)


def rint(r, bits, signed=True):
    edge = [0, 1, -1, 2 ** (bits - 1) - 1, -(2 ** (bits - 1))] if signed else [0, 1, 2 ** bits - 1]
    if r.random() < 0.3:
        v = r.choice(edge)
        return v if signed or v >= 0 else 0
    lo, hi = (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1) if signed else (0, 2 ** bits - 1)
    return r.randint(lo, hi) if r.random() < 0.5 else r.randint(max(lo, -300), min(hi, 300))


def rstr(r):
    alphabet = "ab\u00e9\u4e2d\U0001F600 \t\"\\"
    return "".join(r.choice(alphabet) for _ in range(r.randint(0, 6)))


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def fill(r, m):
    """Random fields; about half left unset."""
    maybe = lambda: r.random() < 0.6
    ints = [("i32", 32, True), ("i64", 64, True), ("u32", 32, False), ("u64", 64, False),
            ("s32", 32, True), ("s64", 64, True), ("f32", 32, False), ("f64", 64, False),
            ("sf32", 32, True), ("sf64", 64, True)]
    for name, bits, signed in ints:
        if maybe():
            setattr(m, name, rint(r, bits, signed))
    if maybe():
        m.fl = f32(r.uniform(-1e6, 1e6))
    if maybe():
        m.db = r.choice([0.0, -0.0, 1e308, -2.5, r.uniform(-1e9, 1e9)])
    if maybe():
        m.b = r.random() < 0.5
    if maybe():
        m.str = rstr(r)
    if maybe():
        m.by = bytes(r.randrange(256) for _ in range(r.randint(0, 5)))
    if maybe():
        m.color = r.choice([0, 1, 2])
    if maybe():
        m.opt = rint(r, 64)
    if maybe():
        m.inner.SetInParent()
        if maybe():
            m.inner.n = rint(r, 64)
        if maybe():
            m.inner.s = rstr(r)
        if maybe():
            m.inner.c = r.choice([0, 1, 2])
    for _ in range(r.randint(0, 4) if maybe() else 0):
        m.packed.append(rint(r, 64))
    for _ in range(r.randint(0, 3) if maybe() else 0):
        m.unpacked.append(rint(r, 64))
    for _ in range(r.randint(0, 3) if maybe() else 0):
        m.names.append(rstr(r))
    for _ in range(r.randint(0, 3) if maybe() else 0):
        m.colors.append(r.choice([0, 1, 2]))
    for _ in range(r.randint(0, 2) if maybe() else 0):
        m.items.add(n=rint(r, 64), s=rstr(r))
    for k in r.sample(["k0", "k1", "k2"], r.randint(0, 3)):
        m.attrs[k] = rstr(r)
    for k in r.sample(["a", "b"], r.randint(0, 2)):
        m.objs[k].SetInParent()
        if maybe():
            m.objs[k].s = rstr(r)
    for k in r.sample([-3, 4, 0], r.randint(0, 3)):
        m.scores[k] = r.uniform(-10, 10)
    pick = r.random()
    if pick < 0.3:
        m.one_s = rstr(r)
    elif pick < 0.6:
        m.one_n = rint(r, 64)
    fill_wkt(r, m, maybe)


TS_MIN, TS_MAX = -62135596800, 253402300799  # 0001-01-01, 9999-12-31T23:59:59


def rnanos(r):
    """Nanos of every precision the JSON mapping writes (0, 3, 6, 9 digits)."""
    return r.choice([0, r.randrange(1000) * 10 ** 6, r.randrange(10 ** 6) * 1000,
                     r.randrange(10 ** 9), 999999999, 1])


def rtime(r, t):
    """A valid Timestamp: the range's ends, around the epoch, or anywhere."""
    t.seconds = r.choice([TS_MIN, TS_MAX, 0, -1, r.randint(-10 ** 6, 10 ** 6),
                          r.randint(1600000000, 1900000000), r.randint(TS_MIN, TS_MAX)])
    t.nanos = rnanos(r)


def fill_wkt(r, m, maybe):
    """The well-known types: valid values only (an invalid one rejects the message)."""
    if maybe():
        rtime(r, m.ts)
    if maybe():
        sec = r.choice([0, 1, -1, 315576000000, -315576000000, r.randint(-10 ** 7, 10 ** 7)])
        nanos = 0 if abs(sec) == 315576000000 else rnanos(r)
        m.dwell_d.seconds, m.dwell_d.nanos = sec, -nanos if sec < 0 else nanos
        if sec == 0 and r.random() < 0.5:
            m.dwell_d.nanos = -nanos
    for _ in range(r.randint(0, 3) if maybe() else 0):
        rtime(r, m.times.add())
    if maybe():
        rtime(r, m.tmap["a"])


def val(kind, v):
    if kind == "i":
        return "i:%d" % (v - 2 ** 64 if v >= 2 ** 63 else v)
    if kind == "d":
        return "d:" + float(v).hex()
    if kind == "b":
        return "b:%d" % int(v)
    if isinstance(v, str):
        v = v.encode("utf-8")
    return "s:" + v.hex()


def enum(v):
    return val("s", COLORS[v]) if v in COLORS else val("i", v)


def expected(m):
    out = []
    for name in ["i32", "i64", "u32", "u64", "s32", "s64", "f32", "f64", "sf32", "sf64"]:
        out.append([val("i", getattr(m, name))])
    out.append([val("d", m.fl)])
    out.append([val("d", m.db)])
    out.append([val("b", m.b)])
    out.append([val("s", m.str)])
    out.append([val("s", m.by)])
    out.append([enum(m.color)])
    out.append([val("i", m.opt)] if m.HasField("opt") else None)
    inner = m.HasField("inner")
    out.append([val("i", m.inner.n)] if inner else None)
    out.append([enum(m.inner.c)] if inner else None)
    out.append([val("i", v) for v in m.packed] or None)
    out.append([val("i", v) for v in m.unpacked] or None)
    out.append([val("s", v) for v in m.names] or None)
    out.append([val("s", m.attrs["k1"])] if "k1" in m.attrs else None)
    out.append([val("s", m.objs["a"].s)] if "a" in m.objs else None)
    out.append([val("d", m.scores[-3])] if -3 in m.scores else None)
    which = m.WhichOneof("choice")
    out.append([val("s", m.one_s)] if which == "one_s" else None)
    out.append([val("i", m.one_n)] if which == "one_n" else None)
    out.append([enum(c) for c in m.colors] or None)
    out.append([val("s", m.inner.s)] if inner else None)
    out.append([val("s", m.ts.ToJsonString())] if m.HasField("ts") else None)
    dur = m.dwell_d
    out.append([val("d", float(dur.seconds) + dur.nanos / 1e9)] if m.HasField("dwell_d") else None)
    out.append([val("s", t.ToJsonString()) for t in m.times] or None)
    out.append([val("s", m.tmap["a"].ToJsonString())] if "a" in m.tmap else None)
    assert len(out) == len(PATHS)
    return "\t".join("A" if o is None else " ".join(o) for o in out)


def varint(n):
    b = bytearray()
    while n >= 0x80:
        b.append(n & 0x7F | 0x80)
        n >>= 7
    b.append(n)
    return bytes(b)


def main():
    desc, n, seed, out_msgs, out_exp = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), \
        sys.argv[4], sys.argv[5]
    cls = classes(desc)
    r = random.Random(seed)
    with open(out_msgs, "wb") as fm, open(out_exp, "w") as fe:
        for _ in range(n):
            m = cls()
            fill(r, m)
            b = m.SerializeToString()
            fm.write(varint(len(b)) + b)
            fe.write(expected(cls.FromString(b)) + "\n")  # what the bytes say


if __name__ == "__main__":
    main()
