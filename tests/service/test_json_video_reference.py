#!/usr/bin/python3
"""test_json_video_reference.py — issue 20's acceptance run as a new user would do it,
pinned as a test: events that are NOT the example clickstream, checked against an
independent reference written from the docs alone.

The events are video plays (nested 3 levels deep, optional fields, int64 and string
ids, unicode with escapes written both escaped and raw, three lists of different
lengths incl. empty and absent, three labels with defaults, an RFC 3339 timestamp with
offsets and fraction digits past the microsecond, one in microseconds, fields in a
random order, unknown extra fields, nulls). The config declares every kind and every
operator (fill, clip, neg2zero, log1p, standardize, bucketize, hash, modulus,
hex2int, cross, hour_of_day, day_of_week, vocab with min_count / capacity / eviction
lru and lfu). Then, as docs/configuration.md ("Feature schema") says:

  1. `piperec process --fit` gives the standardize statistics; checked against
     Welford over the float32 values here;
  2. `piperec process` writes the offline layout; every file is recomputed here from
     the documented semantics (XXH64 with the documented seed and bytes, the bucketize
     rule, hour/day in UTC, lists keep first/last, defaults, missing, vocabulary order
     of first appearance with min_count, lru and lfu eviction and recycled.npy);
  3. `piperec broker` / `produce --format json` / `run` (one partition, trainer sink)
     and `piperec consume --output`: the streamed layout equals the offline one;
  4. one bad record per "Bad input" case of issue 20 spread through the events: each
     in rejects.tsv with its reason (offline), counted by reason in
     piperec_rejected_records_total, in the dead-letter topic with its reason header,
     and the partition's committed offset reaches the end (streaming).

usage: test_json_video_reference.py   ($PIPEREC, $PR_TMP; ROWS=N to change the size)
"""
import calendar
import json
import math
import os
import random
import re
import signal
import subprocess
import sys
import time
import urllib.request

import numpy as np
import xxhash

PIPEREC = os.environ.get("PIPEREC", "build/piperec")
TMP = os.environ.get("PR_TMP", "/tmp/pr_video_ref")
ROWS = int(os.environ.get("ROWS", "4000"))
SEED = 0x7069706572656300  # docs/configuration.md, "Hash bytes"
M64 = (1 << 64) - 1

# ---------------------------------------------------------------- the events

GENRES = ["drama", "comedy", "docu", "Ästhetik", "анимация", "映画", "kids\u00a0tv"]
COUNTRIES = ["DE", "US", "BR", "JP", "IN", "FR"]
TAGS = ["4k", "hdr", "dolby", "live", "\"quoted\"", "back\\slash", "tab\there", "new\nline",
        "émoji🎬", "a/b", ""]


def rfc3339(us, rnd):
    """A time string for epoch microseconds `us`, with a random offset and fraction."""
    off_min = rnd.choice([0, 0, 120, -330, 345, -600])
    t = us + off_min * 60 * 1000000
    secs, frac = divmod(t, 1000000)
    tm = time.gmtime(secs)
    s = time.strftime("%Y-%m-%dT%H:%M:%S", tm)
    style = rnd.randrange(4)
    if style == 1:
        s += ".%03d" % (frac // 1000)
    elif style == 2:
        s += ".%06d" % frac
    elif style == 3:
        s += ".%06d%03d" % (frac, rnd.randrange(1000))  # past the microsecond: truncated
    if off_min == 0:
        s += rnd.choice(["Z", "z", "+00:00"])
    else:
        sign = "+" if off_min > 0 else "-"
        s += "%s%02d:%02d" % (sign, abs(off_min) // 60, abs(off_min) % 60)
    if rnd.random() < 0.1:
        s = s.replace("T", rnd.choice(["t", " "]))
    return s


def shuffled(d, rnd):
    items = list(d.items())
    rnd.shuffle(items)
    return dict(items)


def make_event(i, rnd, viewers, videos):
    base = 1732000000 * 1000000
    us = base + i * 37 * 1000000 + rnd.randrange(1000000)
    if i % 997 == 5:
        us = -rnd.randrange(1, 10 ** 12)  # before 1970
    ev = {"ts": rfc3339(us, rnd), "ts_us": us + rnd.randrange(-10 ** 9, 10 ** 9),
          "kind": rnd.choice(["play", "resume"])}
    prof = {"country": rnd.choice(COUNTRIES), "lang": "xx"}
    r = rnd.random()
    if r < 0.8:
        prof["age"] = rnd.choice([rnd.randrange(10, 90), rnd.uniform(10, 90), -3, 18, 25.0, 65])
    elif r < 0.9:
        prof["age"] = None
    if rnd.random() < 0.1:
        del prof["country"]
    viewer = {"id": rnd.choice(viewers), "profile": shuffled(prof, rnd)}
    meta = {"creator": {"id": rnd.choice([rnd.randrange(1, 5000), 2 ** 63 - 1, -7, 10 ** 15]),
                        "name": "c\u00e9"}}
    if rnd.random() < 0.85:
        meta["duration_s"] = rnd.choice([rnd.uniform(1, 9000), rnd.randrange(0, 9000), -1.5,
                                         -0.0, 0, 2.0])
    if rnd.random() < 0.8:
        meta["genre"] = rnd.choice(GENRES)
    video = {"id": rnd.choice(videos), "meta": shuffled(meta, rnd)}
    if rnd.random() < 0.9:
        video["tags"] = [rnd.choice(TAGS) for _ in range(rnd.randrange(0, 7))]
    e = {"event": shuffled(ev, rnd), "viewer": shuffled(viewer, rnd),
         "video": shuffled(video, rnd)}
    r = rnd.random()
    if r < 0.7:
        h = "%x" % rnd.randrange(1 << rnd.choice([8, 32, 64]))
        e["device"] = {"hw": "".join(c.upper() if rnd.random() < 0.5 else c for c in h)}
    elif r < 0.8:
        e["device"] = {"hw": ""}
    if rnd.random() < 0.9:
        e["playback"] = {"bitrate_kbps": rnd.choice([rnd.randrange(300, 8000),
                                                     rnd.uniform(300, 8000)])}
    r = rnd.random()
    if r < 0.75:
        e["watched"] = [rnd.choice(videos) for _ in range(rnd.randrange(1, 9))]
    elif r < 0.85:
        e["watched"] = []
    r = rnd.random()
    if r < 0.6:
        e["ads"] = [rnd.choice([rnd.randrange(0, 10 ** 6), -5, 2 ** 63 - 1, -(2 ** 63)])
                    for _ in range(rnd.randrange(0, 5))]
    lab = {"completed": rnd.choice([0, 1, True, False])}
    if rnd.random() < 0.7:
        lab["liked"] = rnd.choice([0, 1])
    if rnd.random() < 0.7:
        lab["watch_s"] = round(rnd.uniform(0, 3000), 3)
    if rnd.random() < 0.1:
        del lab["completed"]
    e["labels"] = shuffled(lab, rnd)
    e["x_debug"] = {"trace": [1, {"a": [2.5, None, True]}], "s": "\u2028"}
    return shuffled(e, rnd)


def make_events(n, seed=20):
    rnd = random.Random(seed)
    viewers = [rnd.randrange(1, 2 ** 63) for _ in range(600)] + [0, -1, 2 ** 53 + 1]
    videos = ["v%d" % k for k in range(300)] + ["vidé_%d" % k for k in range(100)] + \
             ["🎬%d\"x" % k for k in range(50)] + ["42", "0", ""]
    lines = []
    for i in range(n):
        e = make_event(i, rnd, viewers, videos)
        lines.append(json.dumps(e, ensure_ascii=rnd.random() < 0.5, separators=(
            (",", ":") if rnd.random() < 0.5 else (", ", ": "))))
    return lines


# Issue 20's "Bad input", one record per case, with the reason each must get.
BAD = [
    (b'{"viewer": {"id": 1} "video": 2}', "not_json"),
    (b'{"a": 1} trailing', "not_json"),
    (b'[{"viewer": {"id": 1}}]', "not_object"),
    (b'"a string"', "not_object"),
    (b'{"viewer": {"id": 1}, "video": {"id": "v', "truncated"),
    (b'{"labels": {"completed": "yes"}}', "wrong_type"),
    (b'{"viewer": {"id": 4.5}}', "wrong_type"),
    (b'{"watched": "v1"}', "wrong_type"),
    (b'{"watched": ["v1", null]}', "wrong_type"),
    (b'{"video": {"meta": {"duration_s": "long"}}}', "wrong_type"),
    (b'{"watched": [' + b",".join(b'"v%d"' % i for i in range(4097)) + b']}', "list_too_long"),
    (b'{"video": {"id": "\xff\xfe"}}', "bad_utf8"),
    (b'{"video": {"id": "a\\qb"}}', "bad_escape"),
    (b'{"video": {"id": "\\ud800"}}', "bad_escape"),
    (b'{"x": ' + b"[" * 300 + b"]" * 300 + b"}", "too_deep"),
    (b'{"video": {"meta": {"duration_s": 1e400}}}', "number_out_of_range"),
    (b'{"viewer": {"id": 9223372036854775808}}', "number_out_of_range"),
    (b'{"watched": ["a", -9223372036854775809]}', "number_out_of_range"),
    (b'{"event": {"ts": "2024-02-30T00:00:00Z"}}', "bad_time"),
    (b'{"event": {"ts": "2024-01-01T00:00:00Z", "ts_us": 1e300}}', "bad_time"),
    (b'{"device": {"hw": "12345678901234567"}}', "bad_hex"),
]


def interleave(lines, every=97):
    """The good lines with BAD spread through them; returns (bytes, line -> reason)."""
    out, reasons, k = [], {}, 0
    for i, line in enumerate(lines):
        out.append(line.encode())
        if i % every == every - 1 and k < len(BAD):
            out.append(BAD[k][0])
            reasons[len(out)] = BAD[k][1]
            k += 1
    while k < len(BAD):
        out.append(BAD[k][0])
        reasons[len(out)] = BAD[k][1]
        k += 1
    return b"\n".join(out) + b"\n", reasons


# ---------------------------------------------------------------- the config

CONFIG = """pipelines:
  - name: plays
    source:
      kafka:
        topics: [plays]
        properties: {{ bootstrap.servers: "{bootstrap}", auto.offset.reset: earliest }}
      format: json
      dead_letter_topic: plays-dlq
    schema:
      event_time: {{ path: event.ts, unit: rfc3339 }}
      labels:
        - {{ name: completed, path: labels.completed }}
        - {{ name: liked, path: labels.liked, default: 0 }}
        - {{ name: watch_s, path: labels.watch_s, default: -1 }}
      dense:
        - {{ name: duration, path: video.meta.duration_s, ops: [ {{ fill: 0 }}, {{ clip: [0, 7200] }}, log1p ] }}
        - {{ name: age, path: viewer.profile.age, ops: [ neg2zero, log1p ] }}
        - {{ name: bitrate_z, path: playback.bitrate_kbps, default: 3000, ops: [ {{ standardize: {{ mean: {m1}, std: {s1} }} }} ] }}
        - {{ name: lbitrate_z, path: playback.bitrate_kbps, ops: [ log1p, {{ standardize: {{ mean: {m2}, std: {s2} }} }} ] }}
      sparse:
        - {{ name: viewer, path: viewer.id, ops: [vocab] }}
        - {{ name: video, path: video.id, ops: [vocab] }}
        - {{ name: genre, path: video.meta.genre, default: unknown, ops: [vocab] }}
        - {{ name: creator, path: video.meta.creator.id, ops: [ {{ modulus: 1000 }}, vocab ] }}
        - {{ name: device, path: device.hw, ops: [ hex2int, {{ modulus: 65536 }} ] }}
        - {{ name: watched, path: watched, list: {{ max_len: 5, keep: last }}, ops: [vocab] }}
        - {{ name: tags, path: video.tags, list: {{ max_len: 4 }}, ops: [ {{ hash: 1024 }} ] }}
        - {{ name: ads, path: ads, list: {{ max_len: 3, keep: first }}, ops: [ {{ modulus: 97 }} ] }}
        - {{ name: age_bucket, path: viewer.profile.age, ops: [ {{ bucketize: [18, 25, 35, 50, 65] }} ] }}
        - {{ name: hour_us, path: event.ts_us, ops: [ {{ hour_of_day: us }} ] }}
        - {{ name: hour, path: event.ts, ops: [ hour_of_day, vocab ] }}
        - {{ name: dow, path: event.ts, ops: [ day_of_week ] }}
        - {{ name: genre_x_country, cross: [video.meta.genre, viewer.profile.country], ops: [ {{ hash: 4096 }} ] }}
        - {{ name: creator_x_genre, cross: [video.meta.creator.id, video.meta.genre], ops: [ {{ modulus: 100000 }}, vocab ] }}
        - {{ name: dur_hash, path: video.meta.duration_s, ops: [ {{ hash: 777 }} ] }}
        - {{ name: dur_x_age, cross: [video.meta.duration_s, viewer.profile.age, event.kind], ops: [ {{ hash: 1000 }} ] }}
    transform:
      vocab: {{ profile: default }}
      columns:
        viewer: {{ capacity: 300, eviction: lru }}
        video: {{ min_count: 2 }}
        watched: {{ capacity: 200, eviction: lfu }}
    batch: {{ size: 256, max_delay_ms: 20 }}
    sinks:
      trainer: {{ listen: "127.0.0.1:0" }}
http: {{ listen: "127.0.0.1:0" }}
engine: {{ backend: cpu, threads: 2 }}
"""

# ---------------------------------------------------------------- the reference


def xxh(b):
    return xxhash.xxh64_intdigest(b, seed=SEED)


def int_bytes(v):
    return (v & M64).to_bytes(8, "little")


def num_bytes(x):
    if x == 0:
        x = 0.0
    if math.isnan(x):
        return (0x7ff8000000000000).to_bytes(8, "little")
    return np.float64(x).tobytes()


def is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def get(ev, path):
    """The value at a dotted path, None when absent (or null)."""
    v = ev
    for seg in path.split("."):
        if not isinstance(v, dict) or seg not in v:
            return None
        v = v[seg]
    return v


TIME_RE = re.compile(r"^(\d{4})-(\d\d)-(\d\d)[Tt ](\d\d):(\d\d):(\d\d)(\.\d+)?([Zz]|[+-]\d\d:\d\d)$")


def time_us(v, unit):
    if unit == "us":
        return v
    m = TIME_RE.match(v)
    assert m, v
    y, mo, d, hh, mi, ss = (int(m.group(k)) for k in range(1, 7))
    frac = (m.group(7) or ".")[1:]
    us = int((frac + "000000")[:6])
    secs = calendar.timegm((y, mo, d, hh, mi, ss, 0, 0, 0))
    tz = m.group(8)
    if tz not in ("Z", "z"):
        off = int(tz[1:3]) * 3600 + int(tz[4:6]) * 60
        secs -= off if tz[0] == "+" else -off
    return secs * 1000000 + us


def hour_of_day(us):
    return (us // 3600000000) % 24 + 1


def day_of_week(us):
    days = us // 86400000000
    return (days + 3) % 7 + 1  # 1970-01-01 was a Thursday (ISO 4)


class Vocab:
    """Profile default: 0 missing, 1 OOV, first appearances from 2; streaming min_count;
    capacity (reserved indices included) with eviction none, lru or lfu (ties: least
    recent), the evicted index recycled for the new value."""

    def __init__(self, min_count=1, capacity=0, eviction="none"):
        self.min_count, self.capacity, self.eviction = min_count, capacity or (2 ** 31 - 1), eviction
        self.idx, self.seen, self.last, self.uses = {}, {}, {}, {}
        self.next, self.clock = 2, 0
        self.recycled = []  # (row, index)

    def lookup(self, key, row):
        if key is None:
            return 0
        self.clock += 1
        if key in self.idx:
            self.last[key] = self.clock
            self.uses[key] += 1
            return self.idx[key]
        self.seen[key] = self.seen.get(key, 0) + 1
        if self.seen[key] < self.min_count:
            return 1
        if self.next < self.capacity:
            i = self.next
            self.next += 1
        elif self.eviction == "none":
            return 1
        else:
            if self.eviction == "lru":
                victim = min(self.idx, key=lambda k: self.last[k])
            else:
                victim = min(self.idx, key=lambda k: (self.uses[k], self.last[k]))
            i = self.idx.pop(victim)
            del self.last[victim], self.uses[victim]
            self.seen.pop(victim, None)
            self.recycled.append((row, i))
        del self.seen[key]
        self.idx[key], self.last[key], self.uses[key] = i, self.clock, 1
        return i


def id_key(v):
    if v is None:
        return None
    if isinstance(v, str):
        return ("s", xxh(v.encode("utf-8")))
    assert is_int(v), v
    return ("i", v & M64)


def hash_value(v):
    if isinstance(v, str):
        return xxh(v.encode("utf-8"))
    if is_int(v):
        return xxh(int_bytes(v))
    return xxh(num_bytes(v))


def cross_value(vals):
    if any(v is None for v in vals):
        return None
    b = b""
    for v in vals:
        if isinstance(v, str):
            e = v.encode("utf-8")
            b += b"\x03" + len(e).to_bytes(4, "little") + e
        elif is_int(v):
            b += b"\x02" + int_bytes(v)
        else:
            b += b"\x01" + num_bytes(float(v))
    return xxh(b)


def f32(x):
    return np.float32(x)


def welford(xs):
    n, mean, m2 = 0, 0.0, 0.0
    for x in xs:
        n += 1
        d = x - mean
        mean += d / n
        m2 += d * (x - mean)
    return mean, math.sqrt(m2 / n)


def fit_reference(events):
    a = [float(f32(v if v is not None else 3000)) for v in
         (get(e, "playback.bitrate_kbps") for e in events)]
    b = [float(f32(math.log1p(v))) for v in
         (get(e, "playback.bitrate_kbps") for e in events) if v is not None]
    return welford(a), welford(b)


SPARSE = ["viewer", "video", "genre", "creator", "device", "watched", "tags", "ads",
          "age_bucket", "hour_us", "hour", "dow", "genre_x_country", "creator_x_genre",
          "dur_hash", "dur_x_age"]


def reference(events, stats):
    (m1, s1), (m2, s2) = stats
    n = len(events)
    labels = np.zeros((n, 3), np.float32)
    dense = np.zeros((n, 4), np.float32)
    vals = {f: [] for f in SPARSE}
    lens = {f: np.zeros(n, np.int32) for f in SPARSE}
    vocabs = {f: Vocab() for f in ["genre", "creator", "hour", "creator_x_genre"]}
    vocabs["viewer"] = Vocab(capacity=300, eviction="lru")
    vocabs["video"] = Vocab(min_count=2)
    vocabs["watched"] = Vocab(capacity=200, eviction="lfu")

    def put(f, row, xs):
        vals[f].extend(xs)
        lens[f][row] = len(xs)

    for r, e in enumerate(events):
        for j, (p, dflt) in enumerate([("labels.completed", None), ("labels.liked", 0),
                                       ("labels.watch_s", -1)]):
            v = get(e, p)
            v = dflt if v is None else v
            labels[r, j] = f32(float(v)) if v is not None else 0
        d = get(e, "video.meta.duration_s")
        d = 0 if d is None else d
        dense[r, 0] = f32(math.log1p(min(max(d, 0), 7200)))
        a = get(e, "viewer.profile.age")
        dense[r, 1] = 0 if a is None else f32(math.log1p(max(a, 0)))
        br = get(e, "playback.bitrate_kbps")
        dense[r, 2] = f32(((3000 if br is None else br) - m1) / s1)
        dense[r, 3] = 0 if br is None else f32((math.log1p(br) - m2) / s2)

        put("viewer", r, [vocabs["viewer"].lookup(id_key(get(e, "viewer.id")), r)])
        put("video", r, [vocabs["video"].lookup(id_key(get(e, "video.id")), r)])
        g = get(e, "video.meta.genre")
        put("genre", r, [vocabs["genre"].lookup(id_key("unknown" if g is None else g), r)])
        c = get(e, "video.meta.creator.id")
        put("creator", r, [vocabs["creator"].lookup(("i", (c & M64) % 1000), r)])
        h = get(e, "device.hw")
        put("device", r, [0 if not h else int(h, 16) % 65536])
        w = get(e, "watched") or []
        put("watched", r, [vocabs["watched"].lookup(id_key(x), r) for x in w[-5:]])
        t = get(e, "video.tags") or []
        put("tags", r, [hash_value(x) % 1024 for x in t[:4]])
        ads = get(e, "ads") or []
        put("ads", r, [(x & M64) % 97 for x in ads[:3]])
        put("age_bucket", r, [0 if a is None else
                              1 + sum(1 for b in [18, 25, 35, 50, 65] if b <= a)])
        put("hour_us", r, [hour_of_day(get(e, "event.ts_us"))])
        tus = time_us(get(e, "event.ts"), "rfc3339")
        put("hour", r, [vocabs["hour"].lookup(("i", hour_of_day(tus)), r)])
        put("dow", r, [day_of_week(tus)])
        x = cross_value([g, get(e, "viewer.profile.country")])
        put("genre_x_country", r, [0 if x is None else hash_value(x) % 4096])
        x = cross_value([c, g])
        put("creator_x_genre", r, [vocabs["creator_x_genre"].lookup(
            None if x is None else ("i", x % 100000), r)])
        dur = get(e, "video.meta.duration_s")
        put("dur_hash", r, [0 if dur is None else hash_value(dur) % 777])
        x = cross_value([dur, a, get(e, "event.kind")])
        put("dur_x_age", r, [0 if x is None else hash_value(x) % 1000])
    recycled = []
    for k, f in enumerate(SPARSE):
        if f in vocabs:
            recycled += [(k, row, i) for row, i in vocabs[f].recycled]
    recycled.sort(key=lambda t: (t[1], t[0]))
    sparse = {f: (np.array(vals[f], dtype=np.uint64).astype(np.int64), lens[f]) for f in SPARSE}
    return labels, dense, sparse, recycled


# ---------------------------------------------------------------- checks

def fail(msg):
    print("FAIL: " + msg, file=sys.stderr)
    sys.exit(1)


def load_layout(d):
    out = {"labels": np.load(os.path.join(d, "labels.npy")),
           "dense": np.load(os.path.join(d, "dense.npy"))}
    for f in SPARSE:
        out[f] = (np.load(os.path.join(d, "sparse", f + ".values.npy")),
                  np.load(os.path.join(d, "sparse", f + ".lengths.npy")))
    return out


def compare_ref(got, ref):
    labels, dense, sparse, _ = ref
    if got["labels"].dtype != np.float32 or got["labels"].shape != labels.shape:
        fail("labels.npy %s %s, expected float32 %s" % (got["labels"].dtype,
                                                        got["labels"].shape, labels.shape))
    bad = np.argwhere(got["labels"] != labels)
    if len(bad):
        fail("labels differ at %s: got %s want %s" % (bad[0], got["labels"][tuple(bad[0])],
                                                     labels[tuple(bad[0])]))
    names = ["duration", "age", "bitrate_z", "lbitrate_z"]
    for j, name in enumerate(names):
        g, w = got["dense"][:, j], dense[:, j]
        bad = np.nonzero(g != w)[0]
        if len(bad):
            r = bad[0]
            fail("dense %s row %d: got %r want %r" % (name, r, g[r], w[r]))
    for f in SPARSE:
        gv, gl = got[f]
        wv, wl = sparse[f]
        if gv.dtype != np.int64 or gl.dtype != np.int32:
            fail("%s: dtypes %s %s" % (f, gv.dtype, gl.dtype))
        if not np.array_equal(gl, wl):
            r = np.nonzero(gl != wl)[0][0]
            fail("%s lengths row %d: got %d want %d" % (f, r, gl[r], wl[r]))
        if not np.array_equal(gv, wv):
            k = np.nonzero(gv != wv)[0][0]
            row = np.searchsorted(np.cumsum(wl), k, side="right")
            fail("%s values[%d] (row %d): got %d want %d" % (f, k, row, gv[k], wv[k]))


def run(cmd, **kw):
    p = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if p.returncode != 0:
        fail("%s: exit %d\n%s%s" % (" ".join(cmd), p.returncode, p.stdout, p.stderr))
    return p


def check_rejects(path, reasons):
    got = {}
    with open(path, "rb") as f:
        for line in f:
            fields = line.split(b"\t", 3)
            got[int(fields[0])] = fields[1].decode()
    if got != reasons:
        diff = sorted(set(got.items()) ^ set(reasons.items()))
        fail("rejects.tsv: got/expected differ at (line, reason) %s" % diff[:6])


def fit_and_process(events_path, events, reasons):
    cfg0 = os.path.join(TMP, "fit.yaml")
    with open(cfg0, "w") as f:
        f.write(CONFIG.format(bootstrap="127.0.0.1:9", m1=0, s1=1, m2=0, s2=1))
    p = run([PIPEREC, "process", "--config", cfg0, "--input", events_path, "--fit"])
    fit = {}
    for line in p.stdout.splitlines():
        m = re.match(r"\s*(\w+): \{ standardize: \{ mean: (\S+), std: (\S+) \} \}", line)
        if m:
            fit[m.group(1)] = (float(m.group(2)), float(m.group(3)))
    if set(fit) != {"bitrate_z", "lbitrate_z"}:
        fail("--fit printed %r" % p.stdout)
    want = fit_reference(events)
    for name, w in zip(["bitrate_z", "lbitrate_z"], want):
        for got, exp in zip(fit[name], w):
            if abs(got - exp) > 1e-9 * max(1.0, abs(exp)):
                fail("--fit %s: got %r want %r" % (name, fit[name], w))
    stats = (fit["bitrate_z"], fit["lbitrate_z"])
    out = os.path.join(TMP, "offline")
    cfg = os.path.join(TMP, "plays.yaml")
    with open(cfg, "w") as f:
        f.write(CONFIG.format(bootstrap="{bootstrap}", m1=repr(stats[0][0]), s1=repr(stats[0][1]),
                              m2=repr(stats[1][0]), s2=repr(stats[1][1])))
    run([PIPEREC, "process", "--config", cfg, "--input", events_path, "--output", out])
    check_rejects(os.path.join(out, "rejects.tsv"), reasons)
    # a file saved with a UTF-8 byte order mark: refused, saying so (not "Criteo TSV")
    bom = os.path.join(TMP, "bom.jsonl")
    with open(bom, "wb") as f:
        f.write(b"\xef\xbb\xbf" + open(events_path, "rb").readline())
    p = subprocess.run([PIPEREC, "process", "--config", cfg, "--input", bom, "--output",
                        os.path.join(TMP, "bom")], capture_output=True, text=True)
    if p.returncode != 2 or "byte order mark" not in p.stderr:
        fail("a BOM file: exit %d, %s" % (p.returncode, p.stderr.strip()))
    # eviction by event time offline needs schema.event_time: refused up front
    nt = os.path.join(TMP, "no-time.yaml")
    with open(cfg) as f:
        text = f.read()
    with open(nt, "w") as f:
        f.write(text.replace("      event_time: { path: event.ts, unit: rfc3339 }\n", "")
                .replace("[ hour_of_day, vocab ]", "[ { hour_of_day: rfc3339 }, vocab ]")
                .replace("[ day_of_week ]", "[ { day_of_week: rfc3339 } ]")
                .replace("{ capacity: 300, eviction: lru }",
                         "{ capacity: 300, eviction: ttl, ttl_s: 60 }"))
    p = subprocess.run([PIPEREC, "process", "--config", nt, "--input", events_path, "--output",
                        os.path.join(TMP, "no-time")], capture_output=True, text=True)
    if p.returncode != 2 or "declare schema.event_time" not in p.stderr:
        fail("ttl_s without schema.event_time: exit %d, %s" % (p.returncode, p.stderr.strip()))
    ref = reference(events, stats)
    got = load_layout(out)
    compare_ref(got, ref)
    rec = np.load(os.path.join(out, "recycled.npy"))
    want = np.array([(c, r, i, k + 1) for k, (c, r, i) in enumerate(ref[3])], np.int64)
    if not ref[3]:
        fail("the reference evicted nothing: the test lost its eviction coverage")
    if rec.shape != want.shape or not np.array_equal(rec, want):
        fail("recycled.npy: got %s... want %s..." % (rec[:3].tolist(), want[:3].tolist()))
    print("offline: %d rows, every file equals the reference (%d notices)" % (
        len(events), len(want)))
    return cfg, out


def http_get(port, path):
    with urllib.request.urlopen("http://127.0.0.1:%d%s" % (port, path), timeout=5) as r:
        return r.read().decode()


def metric(page, name, labels=""):
    m = re.search(r"^%s\{[^}]*%s[^}]*\} (\d+)" % (name, re.escape(labels)), page, re.M)
    return int(m.group(1)) if m else -1


def stream(cfg_template, events_path, offline, n, reasons):
    procs = []
    try:
        br = subprocess.Popen([PIPEREC, "broker", "--partitions", "1", "--topics",
                               "plays,plays-dlq"], stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, text=True)
        procs.append(br)
        boot = None
        for line in br.stdout:
            m = re.search(r"bootstrap=(\S+)", line)
            if m:
                boot = m.group(1)
                break
        if not boot:
            fail("broker printed no bootstrap")
        cfg = os.path.join(TMP, "plays-run.yaml")
        with open(cfg_template) as f:
            text = f.read().replace("{bootstrap}", boot)
        with open(cfg, "w") as f:
            f.write(text)
        err = open(os.path.join(TMP, "run.err"), "w")
        rp = subprocess.Popen([PIPEREC, "run", "--config", cfg], stderr=err,
                              stdout=subprocess.DEVNULL)
        procs.append(rp)
        http = trainer = None
        deadline = time.time() + 30
        while time.time() < deadline and not (http and trainer):
            with open(os.path.join(TMP, "run.err")) as f:
                log = f.read()
            m = re.search(r"http on port (\d+)", log)
            http = http or (m and int(m.group(1)))
            m = re.search(r"trainers connect to port (\d+)", log)
            trainer = trainer or (m and int(m.group(1)))
            time.sleep(0.1)
        if not (http and trainer):
            fail("no ports in the run log:\n" + log)
        sdir = os.path.join(TMP, "stream")
        cons = subprocess.Popen([PIPEREC, "consume", "--connect", "127.0.0.1:%d" % trainer,
                                 "--pipeline", "plays", "--output", sdir],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        procs.append(cons)
        deadline = time.time() + 30
        while "partition(s) assigned" not in open(os.path.join(TMP, "run.err")).read():
            if time.time() > deadline:
                fail("no partition assigned")
            time.sleep(0.1)
        # produce while piperec consumes: the test broker keeps only ~5 MB per partition
        run([PIPEREC, "produce", "--bootstrap", boot, "--topic", "plays", "--format", "json",
             "--input", events_path, "--rate", "5000"])
        total = n + len(reasons)
        deadline = time.time() + 60
        while time.time() < deadline:
            page = http_get(http, "/metrics")
            if (metric(page, "piperec_records_out_total") >= n and
                    metric(page, "piperec_unacked_batches") == 0 and
                    metric(page, "piperec_consumer_committed_offset") == total):
                break
            time.sleep(0.1)
        else:
            fail("timed out: %d rows out of %d, committed %d of %d" % (
                metric(page, "piperec_records_out_total"), n,
                metric(page, "piperec_consumer_committed_offset"), total))
        # every bad record: its reason counted, dead-lettered, its offset passed
        for reason in sorted(set(reasons.values())):
            want = sum(1 for r in reasons.values() if r == reason)
            got = metric(page, "piperec_rejected_records_total", 'reason="%s"' % reason)
            if got != want:
                fail("piperec_rejected_records_total{reason=%s} %d, expected %d" % (reason, got, want))
        if metric(page, "piperec_dead_letters_total", 'result="sent"') != len(reasons):
            fail("dead letters sent: %d, expected %d" % (
                metric(page, "piperec_dead_letters_total", 'result="sent"'), len(reasons)))
        dlq = subprocess.run(["kcat", "-b", boot, "-C", "-t", "plays-dlq", "-e", "-q",
                              "-f", "%h\\n"], capture_output=True, timeout=30)
        heads = dlq.stdout.decode("utf-8", "replace").splitlines()
        dl_reasons = sorted(re.search(r"piperec-reason=([a-z0-9_]+)", h).group(1) for h in heads)
        if dl_reasons != sorted(reasons.values()):
            fail("dead-letter topic reasons %s, expected %s" % (dl_reasons,
                                                                sorted(reasons.values())))
        rp.send_signal(signal.SIGTERM)
        if rp.wait(30) != 0:
            fail("piperec run exit %d" % rp.returncode)
        cons.send_signal(signal.SIGINT)
        cons.wait(30)
        got, want = load_layout(sdir), load_layout(offline)
        for k in want:
            pairs = [(got[k], want[k])] if k in ("labels", "dense") else list(zip(got[k], want[k]))
            for x, y in pairs:
                if x.dtype != y.dtype or not np.array_equal(x, y):
                    fail("streamed %s differs from offline (%s %s vs %s %s)" % (
                        k, x.dtype, x.shape, y.dtype, y.shape))
        print("streaming: %d rows through broker/produce/run/consume equal offline; "
              "%d bad records counted by reason and dead-lettered" % (n, len(reasons)))
    finally:
        for p in reversed(procs):
            if p.poll() is None:
                p.kill()
                p.wait()


def main():
    os.makedirs(TMP, exist_ok=True)
    lines = make_events(ROWS)
    path = os.path.join(TMP, "plays.jsonl")
    data, reasons = interleave(lines)
    with open(path, "wb") as f:
        f.write(data)
    events = [json.loads(s) for s in lines]
    cfg, offline = fit_and_process(path, events, reasons)
    if os.environ.get("OFFLINE_ONLY"):
        return
    stream(cfg, path, offline, len(events), reasons)
    print("ok")


if __name__ == "__main__":
    main()
