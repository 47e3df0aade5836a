#!/usr/bin/env python3
"""make_corpus.py — (re)build the seed corpora of tests/fuzz/corpus/ from real inputs.

    tests/fuzz/make_corpus.py BUILD_DIR

BUILD_DIR is a normal build (it needs BUILD_DIR/piperec and
BUILD_DIR/tests/batcher/bt_serve). Seeds, per target (first byte = the
target's flags byte where it has one, see each fuzz_*.c):
  criteo_tsv    lines of tests/data/criteo_sample_100.tsv, alone and in runs
  proto         EventBatch messages of `piperec gen --format binary` and the
                single Events inside them
  trainer_wire  a real session with a trainer sink (bt_serve): the frames the
                server sent (SubscribeOk, batches) and the ones this script
                sent as client (Subscribe, Credit, Ping, Ack)
  config        the embedded default config, the YAML examples of
                docs/configuration.md and README.md, with overrides
  http          requests for every route, methods, HTTP/1.0, pipelining
  json          clickstream events of BUILD_DIR/bench/bench_json --emit, under
                each path set, and small documents for escapes, numbers,
                lists, nesting and duplicate keys
  infer         runs of clickstream events (`piperec gen --format json`)
                under each option bit, and small event sets for every rule
Crash regressions (files named crash-*/regress-*) are kept as they are.
"""
import os
import re
import socket
import struct
import subprocess
import sys

SRC = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CORPUS = os.path.join(SRC, "tests", "fuzz", "corpus")


def write(target, name, data):
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def clean(target):
    d = os.path.join(CORPUS, target)
    if os.path.isdir(d):
        for n in os.listdir(d):
            if not n.startswith(("crash-", "regress-")):
                os.remove(os.path.join(d, n))


def varint(v):
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def read_varint(buf, pos):
    shift = v = 0
    while True:
        b = buf[pos]
        pos += 1
        v |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return v, pos


def field(num, wt, payload):
    key = varint(num << 3 | wt)
    if wt == 0:
        return key + varint(payload)
    return key + varint(len(payload)) + payload


def s(x):
    return x.encode() if isinstance(x, str) else x


# ------------------------------------------------------------------ criteo_tsv
def criteo():
    clean("criteo_tsv")
    lines = open(os.path.join(SRC, "tests", "data", "criteo_sample_100.tsv"), "rb").read().split(b"\n")
    lines = [l for l in lines if l]
    for i in range(0, len(lines), 10):
        write("criteo_tsv", "line%02d" % i, b"\x00" + lines[i] + b"\n")
        write("criteo_tsv", "line%02d_hex" % i, b"\x01" + lines[i])
    write("criteo_tsv", "run10_crlf", b"\x00" + b"\r\n".join(lines[:10]) + b"\r\n")
    write("criteo_tsv", "run70_small_blocks", b"\x09" + b"\n".join(lines[:70]) + b"\n")
    write("criteo_tsv", "small_shape", b"\x02" + b"1\t2\t3\ta\tb\tc\n0\t\t-1\t\t\t\n")
    write("criteo_tsv", "no_label", b"\x06" + b"2\t3.5\ta\tb\tc\n")


# ------------------------------------------------------------------ proto
def proto(build):
    clean("proto")
    out = "/tmp/make_corpus_gen.bin"
    subprocess.check_call([os.path.join(build, "piperec"), "gen", "--rows", "24", "--output", out,
                           "--format", "binary", "--batch-events", "4", "--seed", "11"])
    buf = open(out, "rb").read()
    os.remove(out)
    pos = k = 0
    while pos < len(buf):
        n, pos = read_varint(buf, pos)
        msg = buf[pos:pos + n]
        pos += n
        write("proto", "batch%d" % k, bytes([0x01 | (k % 2) << 1]) + msg)      # ids, parse_hex
        write("proto", "batch%d_small" % k, bytes([0x11 | (k % 3) << 2]) + msg)  # 64-row blocks
        # The events of the batch (field 1, length-delimited).
        p = e = 0
        while p < len(msg):
            key, p = read_varint(msg, p)
            ln, p = read_varint(msg, p)
            if key == 0x0A and e < 2:
                write("proto", "event%d_%d" % (k, e), bytes([(e % 2) << 1]) + msg[p:p + ln])
                e += 1
            p += ln
        k += 1
    # Hand-made events: sparse as hex strings, event time, missing values.
    ev = field(1, 0, 1) + field(2, 0, 1700000000000)
    ev += field(3, 2, b"".join(struct.pack("<d", float(i)) for i in range(13)))
    ev += field(4, 2, varint(3))
    for i in range(26):
        ev += field(5, 2, b"%x" % (0xabc0 + i) if i != 5 else b"")
    write("proto", "event_hex", b"\x00" + ev)
    write("proto", "event_hex_parse", b"\x02" + ev)
    write("proto", "batch_hex", b"\x01" + field(1, 2, ev) * 3)
    small = field(1, 0, 0) + field(3, 2, struct.pack("<dd", 1.0, -2.0)) + field(6, 2, varint(1) + varint(2) + varint(3)) + field(7, 2, varint(1))
    write("proto", "small_shape_event", b"\x20" + small)
    write("proto", "small_shape_batch", b"\x21" + field(1, 2, small) * 2)


# ------------------------------------------------------------------ trainer_wire
def frame(body):
    return struct.pack("<I", len(body)) + body


def recv_frame(sock, acc):
    while True:
        if len(acc) >= 4:
            n = struct.unpack("<I", acc[:4])[0]
            if len(acc) >= 4 + n:
                return acc[:4 + n], acc[4 + n:]
        d = sock.recv(65536)
        if not d:
            return None, acc
        acc += d


def trainer_client():
    """Run by bt_serve as its CMD: a client that records the session."""
    port = int(os.environ["BT_PORT"])
    outdir = os.environ["CAPTURE_DIR"]
    sock = socket.create_connection(("127.0.0.1", port))
    sent = []
    sub = field(1, 0, 1) + field(2, 2, b"bt") + field(3, 0, 4) + field(4, 2, b"make_corpus")
    sent.append(frame(field(1, 2, sub)))
    sent.append(frame(field(5, 2, field(1, 0, 2))))          # Credit
    sent.append(frame(field(6, 2, field(1, 0, 42) + field(2, 0, 1700000000123))))  # Ping
    for f in sent:
        sock.sendall(f)
    got = []
    acc = b""
    batches = 0
    while batches < 3:
        f, acc = recv_frame(sock, acc)
        if f is None:
            break
        got.append(f)
        body = f[4:]
        if body[:1] == b"\x1a":                                # a batch frame
            batches += 1
            # sequence (TrainingBatch field 2) of the batch
            _, p = read_varint(body, 1)
            seq, q = 0, p
            while q < len(body):
                key, q = read_varint(body, q)
                if key == 0x10:
                    seq, q = read_varint(body, q)
                    break
                wt = key & 7
                if wt == 0:
                    _, q = read_varint(body, q)
                elif wt == 2:
                    ln, q = read_varint(body, q)
                    q += ln
                else:
                    break
            ack = frame(field(4, 2, field(1, 2, varint(seq))))
            sent.append(ack)
            sock.sendall(ack)
    sock.close()
    for i, f in enumerate(got):
        open(os.path.join(outdir, "server%d" % i), "wb").write(f)
    for i, f in enumerate(sent):
        open(os.path.join(outdir, "client%d" % i), "wb").write(f)


def trainer(build):
    clean("trainer_wire")
    cap = "/tmp/make_corpus_trainer"
    os.makedirs(cap, exist_ok=True)
    env = dict(os.environ, CAPTURE_DIR=cap)
    subprocess.check_call([os.path.join(build, "tests", "batcher", "bt_serve"), "trainer", "3",
                           sys.executable, os.path.abspath(__file__), "--trainer-client"], env=env)
    server = [open(os.path.join(cap, n), "rb").read() for n in sorted(os.listdir(cap)) if n.startswith("server")]
    client = [open(os.path.join(cap, n), "rb").read() for n in sorted(os.listdir(cap)) if n.startswith("client")]
    for n in os.listdir(cap):
        os.remove(os.path.join(cap, n))
    os.rmdir(cap)
    for i, f in enumerate(server):
        write("trainer_wire", "server_frame%d" % i, b"\x01" + f)
    write("trainer_wire", "server_session", b"\x01" + b"".join(server))
    for i, f in enumerate(client):
        write("trainer_wire", "client_frame%d" % i, b"\x00" + f)
    write("trainer_wire", "client_session", b"\x00" + b"".join(client))
    err = field(1, 0, 4) + field(2, 2, b"first message must be Subscribe")
    write("trainer_wire", "server_error", b"\x01" + frame(field(8, 2, err)))
    write("trainer_wire", "client_error", b"\x00" + frame(field(8, 2, err)))


# ------------------------------------------------------------------ config
def config():
    clean("config")
    write("config", "default", b"\x00")
    write("config", "default_sets", b"\x00engine.backend=hls-sim\npipelines[0].batch.size=1024\n"
          b"pipelines[*].source.kafka.properties.bootstrap.servers=127.0.0.1:39092\n"
          b"pipelines[criteo].sinks.trainer.listen=127.0.0.1:0\n"
          b"pipelines[0].transform.sparse=[hex2int, vocab]\n")
    k = 0
    for doc in ("docs/configuration.md", "README.md"):
        text = open(os.path.join(SRC, doc)).read()
        for block in re.findall(r"```yaml\n(.*?)```", text, re.S):
            write("config", "doc%d" % k, block.encode())
            k += 1
    # The full example of the config unit test.
    t = open(os.path.join(SRC, "tests", "config", "test_config.c")).read()
    m = re.search(r"static const char full_yaml\[\] =\s*((?:\s*\"(?:[^\"\\]|\\.)*\")+);", t)
    if m:
        parts = re.findall(r"\"((?:[^\"\\]|\\.)*)\"", m.group(1))
        yaml = "".join(parts).encode().decode("unicode_escape").encode()
        write("config", "test_full", yaml)
        write("config", "test_full_sets", yaml + b"\x00http.listen=0.0.0.0:9999\nlimits.max_inflight_bytes=1GiB\n")


# ------------------------------------------------------------------ http
def http():
    clean("http")
    for route in ("/metrics", "/healthz", "/readyz", "/v1/status", "/nope"):
        name = route.strip("/").replace("/", "_") or "root"
        write("http", "get_" + name, b"GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n" % route.encode())
    write("http", "head_metrics", b"HEAD /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
    write("http", "http10", b"GET /healthz HTTP/1.0\r\n\r\n")
    write("http", "post_body", b"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello")
    write("http", "post_chunked", b"POST /v1/status HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n")
    write("http", "pipelined", b"GET /readyz HTTP/1.1\r\nHost: x\r\n\r\nGET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    write("http", "query", b"GET /metrics?name[]=a&x=%00 HTTP/1.1\r\nHost: x\r\nAccept: */*\r\n\r\n")


# ------------------------------------------------------------------ json
def json_docs(build):
    clean("json")
    events = subprocess.run([os.path.join(build, "bench", "bench_json"), "--emit", "8"],
                            check=True, capture_output=True).stdout.split(b"\n")
    for i, ev in enumerate(e for e in events if e):
        write("json", "event%d" % i, bytes([0]) + ev)
        if i < 2:
            write("json", "event%d_depth4_full" % i, bytes([4 | 8]) + ev)
    small = [
        b'{"a":[1,-0,9223372036854775807],"b":[1.5e308,-0.0,2.5E-3],"c":[true,false],"d":null}',
        b'{"d":["caf\\u00e9","\\ud83d\\ude00","\xc3\xa9\xe2\x82\xac","\\"\\\\\\/\\b\\f\\n\\r\\t"],"e":-9223372036854775808}',
        b'{"f":{"a":1,"f":{"a":["x","y"]}},"f":{"a":2},"\\u0061":3}',
        b' {"x":{"y":[{"z":[]},null,"s",1e-400]},"e":["k",42],"a":1} \r\n',
        b'{"a":1e309}',
        b'{"b":123456789012345678901234567890}',
    ]
    for i, d in enumerate(small):
        write("json", "small%d" % i, bytes([1]) + d)
    write("json", "deep", bytes([2]) + b'{"a":{"b":{"c":{"d":{"e":[1,2,3]}},"x":[0.5]},"y":["q"]},"z":[true]}')
    write("json", "key", bytes([3]) + b'{"k":["u1",7,"\\u00e9"]}')
    # lists of objects: paths that map over the elements of an array of objects
    write("json", "objlist", bytes([2]) + b'{"a":[{"b":{"c":{"d":{"e":7}},"x":0.5}},null,{"y":"q"},'
          b'{"b":{"x":1,"x":2}},{}],"z":[true]}')
    write("json", "objlist_scalar", bytes([1]) + b'{"f":[{"a":1,"f":{"a":"x"}}]}')
    write("json", "objlist_nested", bytes([2]) + b'{"a":[{"b":[{"x":1}]}]}')
    write("json_decode", "objlist", bytes([0]) + b'{"ts":1732615200123,"l":{"y":1},"u":{"id":"u1"},'
          b'"imp":[{"ad":"a1","p":1},{"p":2},{"ad":"a7","p":null},null,{"ad":3,"p":4}]}')
    write("json_decode", "objlist_bad", bytes([1]) + b'{"l":{"y":0},"imp":[{"ad":["a"]},5]}')
    # maps read by their keys (list: { from: keys }), weighted by their values
    write("json", "map", bytes([1]) + b'{"g":{"a":1,"b":null,"a":2.5,"\\u0063":"x"},"a":[1]}')
    write("json", "map_keys", bytes([3]) + b'{"m":{"n":{"x":[1,{}],"y":{}}},"k":1}')
    write("json", "map_big", bytes([3]) + b'{"m":{"n":{' +
          b','.join(b'"k%d":%d' % (i % 25, i) for i in range(45)) + b'}},"k":1}')
    write("json_decode", "map", bytes([0]) + b'{"l":{"y":1},"u":{"id":"u1","m":{"s":0.7,"n":null,'
          b'"s":2,"f":1}},"tg":{"a":true,"b":{}}}')
    write("json_decode", "map_bad", bytes([1]) + b'{"l":{"y":0},"u":{"m":{"s":"x"}},"tg":[1]}')
    # a map's values as the ids (list: { from: values }): strings, integers, null, a repeat
    write("json_decode", "map_values", bytes([0]) + b'{"l":{"y":1},"u":{"id":"u1"},'
          b'"sl":{"top":"u1","side":7,"x":null,"top":"adB","b":true}}')
    write("json_decode", "map_values_bad", bytes([1]) + b'{"l":{"y":0},"sl":{"a":1.5,"b":[1]}}')
    # age: a time in ms and an rfc3339 one before the event time
    write("json_decode", "age_times", bytes([0]) + b'{"ts":1700000000000,"i":{"pt":1699999000000,'
          b'"pr":"2023-11-14T22:12:20Z","p":3},"u":{"id":1},"l":{"y":1}}')


# ------------------------------------------------------------------ infer
def infer_docs(build):
    clean("infer")
    ev = subprocess.run([os.path.join(build, "piperec"), "gen", "--format", "json", "--rows", "12",
                         "--seed", "4", "--output", "-"], check=True,
                        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL).stdout
    for flags in range(8):
        write("infer", "clicks%d" % flags, bytes([flags]) + ev)
    sets = {
        "kinds": b'{"id":"e1","ts":1700000000000,"u":{"id":"a"},"p":1.5,"y":{"c":1},"l":[1,2]}\n'
                 b'{"id":"e2","ts":1700000001000,"u":{"id":"b"},"p":250.0,"y":{"c":0},"l":[]}\n'
                 b'{"id":"e3","ts":1700000002000,"u":{"id":"a"},"p":null,"y":{"c":1}}',
        "objlist": b'{"imp":[{"ad":"a1","pos":1},{"ad":"a2"}],"click":1}\n'
                   b'{"imp":[],"click":0}\n{"imp":[{"ad":"a3","pos":[1]}],"click":0}',
        "shapes": b'{"a":1,"b":"x","c":[1.5],"d":{"e":true}}\n{"a":"one","b":2,"c":3,"d":[1]}\n'
                  b'{"a":null,"weird key":1,"t":"2026-01-02T03:04:05Z"}',
        "bad": b'not json\n[1]\n{"a":1\n\n{"k\\u0000":1,"x":"\\ud800"}',
        "numbers": b'{"x":1e300,"y":-0.0,"z":9007199254740993,"c":1}\n{"x":2,"y":3,"z":1,"c":0}',
        # maps: many keys, few per event (weighted by their values, or keys only)
        "maps": b"\n".join(b'{"c":%d,"m":{"k%d":0.%d,"k%d":null},"t":{"t%d":true}}'
                           % (i % 2, i, i % 9, i + 40, i % 20) for i in range(40)),
        # times besides the event time: ages (ms, rfc3339, a Timestamp's seconds/nanos)
        "times": b'{"ts":1700000000000,"created_at":1699000000000,"joined":{"seconds":1690000000,'
                 b'"nanos":5},"seen_at":"2023-11-01T00:00:00Z","c":1}\n'
                 b'{"ts":1700000360000,"created_at":1699000000500,"joined":{"seconds":1690000100,'
                 b'"nanos":7},"seen_at":"2023-11-02T00:00:00Z","c":0}',
    }
    for name, body in sets.items():
        write("infer", name, bytes([0]) + body)
        write("infer", name + "_opts", bytes([7]) + body)
    # labels by value (flag bit 3) on an event type string, a number, a list
    for name, body in infer_by_value.items():
        write("infer", name, bytes([8]) + body)


infer_by_value = {
    "byvalue_str": b'{"type":"click","u":"a","p":1.5}\n{"type":"view","u":"b","p":2}\n'
                   b'{"u":"c","p":3}\n{"type":null,"u":"a","p":4}\n{"type":"a:b #c","u":"b","p":5}',
    "byvalue_int": b'{"s":1,"u":"a"}\n{"s":404,"u":"b"}\n{"s":1.0,"u":"c"}',
    "byvalue_list": b'{"t":["click","x"],"u":"a"}\n{"t":[],"u":"b"}\n{"t":["1"],"u":"c"}',
    "byvalue_obj": b'{"o":{"k":"click"},"u":"a"}\n{"o":{"k":"x"},"u":"b"}',
}


if __name__ == "__main__":
    if sys.argv[1:] == ["--trainer-client"]:
        trainer_client()
        sys.exit(0)
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    build = sys.argv[1]
    criteo()
    proto(build)
    trainer(build)
    config()
    http()
    json_docs(build)
    infer_docs(build)
