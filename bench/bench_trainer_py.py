#!/usr/bin/python3
"""bench_trainer_py.py — Python trainer-side throughput, batches into a loop
that does nothing: the numpy client (piperec_client, zero copy) side by side
with piperec.torch.StreamDataset (main process, and a StreamDataLoader with
2 workers), each over the TrainingBatch (protobuf) layout and over the raw
tensor layout (issue 22: received into a ring of preallocated buffers,
pinned when CUDA is available, zero-copy views; on the host received by the
iterating thread, to a device by a receive thread; the loader runs on the
dataset's receive path instead of worker processes), plus host-to-GPU copies when torch.cuda.is_available()
(skipped, and said so, otherwise).

The server is a replay server in a separate process speaking the trainer
protocol: it sends one pre-encoded batch (--rows rows, 13 dense float32,
26 sparse int32: the Criteo shape; as a TrainingBatch, or in the raw layout
when the client's Subscribe asks for it) again and again with increasing
sequence numbers, honouring credits and acks. It costs little CPU, so the
figures are the client's cost: what a trainer pays per batch in Python.
Prints one JSON line per measurement (bench/run.sh collects them), each
with `vs_numpy_client`: its rows/s over the numpy client's (protobuf layout)
in the same run, `client_cpu_us_per_batch` (this process, all threads) and
`server_cpu_us_per_batch` (the replay server process); `trainer_py_stream_dataset_raw`
is the default raw dataset (compact on the wire, widened on the host;
`..._raw_recv_thread` the same with a receive thread, recv_thread=True) and
`trainer_py_stream_dataset_raw_full_wire` the same with `compact_wire=False` (the full
368-byte raw rows, the default before); the StreamDataLoader cases add `vs_one_process`: their
rows/s over the same dataset iterated in the main process (the case named
by `one_process_case`) in the same run; `trainer_py_dataloader_2w` is the
TrainingBatch loader's default (num_workers=2 runs in the main process),
`trainer_py_dataloader_2w_processes` the same with worker processes
(`processes=True`: zero-copy views on leased ring slots), `trainer_py_dataloader_2w_views` with `views=True` (worker
processes, no copy-out in the main process).

Live (--live PIPEREC, issue 22's "live `piperec run` -> GPU" figure): instead
of the replay server, `piperec broker` (the test broker), `piperec gen` +
`piperec produce` of --live-rows Criteo rows before anything reads, then one
`piperec run` (engine.threads --live-threads, source.consumers
--live-consumers, its own consumer group) per case, read by the numpy client,
by StreamDataset(layout="raw", compact) into host memory and, with CUDA, by
StreamDataset(device="cuda"); rows/s from the first batch received to the
last (the consumer group's join is not counted).

Co-located transport: the replay server also listens on a Unix domain
socket (as piperec does with sinks.trainer.unix_path); the `_unix` cases
repeat the numpy client and StreamDataset cases over "unix:/path" and add
`vs_tcp`: their rows/s over the same case on TCP loopback in the same run.
"""

import argparse
import json
import multiprocessing as mp
import os
import select
import shutil
import socket
import re
import struct
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "clients", "python"))

import numpy as np  # noqa: E402

import piperec_client as pc  # noqa: E402

N_DENSE, N_SPARSE = 13, 26


def encode_body(rows):
    """TrainingBatch fields except the sequence (added per send)."""
    rng = np.random.default_rng(1)
    labels = (rng.random(rows) < 0.25).astype("<i4")
    dense = rng.random((N_DENSE, rows), dtype=np.float32).astype("<f4")
    sparse = rng.integers(0, 100000, (N_SPARSE, rows)).astype("<i4")
    vocab = b"".join(pc._varint(100000) for _ in range(N_SPARSE))
    return (pc._field_bytes(1, b"bench") + pc._field_varint(3, rows) + pc._field_varint(4, N_DENSE)
            + pc._field_varint(5, N_SPARSE) + pc._field_varint(6, 4) + pc._field_bytes(7, labels.tobytes())
            + pc._field_bytes(8, dense.tobytes()) + pc._field_bytes(9, sparse.tobytes())
            + pc._field_bytes(14, vocab))


def _aligned_up(x, a=64):
    return (x + a - 1) // a * a


def encode_raw(rows, compact=False):
    """The same batch in the raw layout (docs/trainer-protocol.md): the
    payload of Frame.raw_batch and its frame preamble (length, tag, varint);
    the sequence is patched into the header per send (bytes 40..48).
    compact (Subscribe.compact): int32 values, no lengths section."""
    rng = np.random.default_rng(1)
    labels = (rng.random(rows) < 0.25).astype("<f4")
    dense = rng.random((rows, N_DENSE), dtype=np.float32).astype("<f4")
    values = rng.integers(0, 100000, (N_SPARSE, rows)).astype("<i4" if compact else "<i8")
    lengths = np.ones(0 if compact else N_SPARSE * rows, "<i4")
    vocab = b"".join(pc._varint(100000) for _ in range(N_SPARSE))
    meta = (pc._field_bytes(1, b"bench") + pc._field_varint(3, rows) + pc._field_varint(4, N_DENSE)
            + pc._field_varint(5, N_SPARSE) + pc._field_varint(6, 4) + pc._field_bytes(14, vocab))
    secs = [dense.tobytes(), labels.tobytes(), lengths.tobytes(), values.tobytes(), b"", b"", meta]
    v = 1
    while True:  # the preamble holds the payload length; the padding depends on the preamble
        pre, at, offs = 5 + v, pc.RAW_HEADER, []
        for sb in secs:
            at = _aligned_up(pre + at) - pre
            offs.append(at)
            at += len(sb)
        if len(pc._varint(at)) == v:
            break
        v = len(pc._varint(at))
    payload = bytearray(at)
    flags = pc.RAW_UNIT | pc.RAW_VALUES32 if compact else 0
    hdr = pc._RAW_HDR.pack(pc.RAW_MAGIC, pc.RAW_VERSION, pc.RAW_HEADER, flags, rows, N_DENSE, 1, N_SPARSE,
                           pre, 0, 0, N_SPARSE * rows, 0, 7)
    payload[:len(hdr)] = hdr
    for i, (o, sb) in enumerate(zip(offs, secs)):
        struct.pack_into("<II", payload, 64 + 8 * i, o, len(sb))
        payload[o:o + len(sb)] = sb
    msg_head = bytes([(pc.F_RAW_BATCH << 3) | 2]) + pc._varint(len(payload))
    return struct.pack("<I", len(msg_head) + len(payload)) + msg_head, bytes(payload)


def read_frame(sock, buf):
    while True:
        if len(buf) >= 4:
            (n,) = struct.unpack_from("<I", buf, 0)
            if len(buf) >= 4 + n:
                frame = bytes(buf[4:4 + n])
                del buf[:4 + n]
                for num, wt, v, a, e in pc._fields(frame):
                    return num, frame[a:e]
                return 0, b""
        chunk = sock.recv(65536)
        if not chunk:
            raise EOFError
        buf += chunk


def serve_conn(sock, body, raw, state, lock, total):
    buf = bytearray()
    kind, sub = read_frame(sock, buf)
    credits, layout, compact = 8, 0, False
    for num, wt, v, a, e in pc._fields(sub):
        if num == 3 and wt == 0 and v:
            credits = min(v, 64)
        elif num == 7 and wt == 0:
            layout = 1 if v == 1 else 0
        elif num == 9 and wt == 0:
            compact = v != 0
    ok = (pc._field_varint(1, 1) + pc._field_bytes(2, b"bench") + pc._field_varint(3, N_DENSE)
          + pc._field_varint(4, N_SPARSE) + pc._field_varint(5, 4) + pc._field_varint(8, credits)
          + pc._field_varint(9, 10000) + pc._field_varint(11, layout))
    raw_pre, raw_payload = raw[compact]
    raw_hdr, raw_rest = bytearray(raw_payload[:pc.RAW_HEADER]), raw_payload[pc.RAW_HEADER:]
    sock.sendall(pc._frame(pc.F_SUBSCRIBE_OK, ok))
    inflight = 0
    try:
        while True:
            with lock:
                seq = state[0] + 1 if state[0] < total and inflight < credits else None
                if seq is not None:
                    state[0] = seq
            if seq is not None and layout == 1:
                struct.pack_into("<Q", raw_hdr, 40, seq)
                sock.sendall(raw_pre + raw_hdr)
                sock.sendall(raw_rest)
                inflight += 1
                if not select.select([sock], [], [], 0)[0] and not buf:
                    continue
            elif seq is not None:
                tb_head = pc._field_varint(2, seq)
                size = len(tb_head) + len(body)
                msg_head = bytes([0x1A]) + pc._varint(size)
                sock.sendall(struct.pack("<I", len(msg_head) + size) + msg_head + tb_head)
                sock.sendall(body)
                inflight += 1
                if not select.select([sock], [], [], 0)[0] and not buf:
                    continue
            elif inflight == 0:
                break  # all served and acked
            kind, msg = read_frame(sock, buf)
            if kind == pc.F_ACK:
                for num, wt, v, a, e in pc._fields(msg):
                    if num == 1 and wt == 2:
                        p = a
                        while p < e:
                            _, p = pc._read_varint(msg, p)
                            inflight -= 1
                    elif num == 1 and wt == 0:
                        inflight -= 1
    except (EOFError, OSError):
        pass
    sock.close()


def server_main(port_q, rows, total, unix_path):
    body, raw = encode_body(rows), {False: encode_raw(rows), True: encode_raw(rows, True)}
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("127.0.0.1", 0))
    ls.listen(16)
    us = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    us.bind(unix_path)
    us.listen(16)
    port_q.put(ls.getsockname()[1])
    state, lock = [0], threading.Lock()

    def accept_loop(lsock, local):
        while True:
            s, _ = lsock.accept()
            if local:  # as the piperec server does on its Unix socket
                s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
            else:
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            threading.Thread(target=serve_conn, args=(s, body, raw, state, lock, total),
                             daemon=True).start()
    threading.Thread(target=accept_loop, args=(us, True), daemon=True).start()
    accept_loop(ls, False)


def proc_cpu(pid):
    """CPU seconds (user + system) process `pid` has used (Linux /proc)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            st = f.read().rsplit(")", 1)[1].split()
        return (int(st[11]) + int(st[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


def measure(name, rows, fn, extra=None, base=None, tcp=None, one=None, server=None):
    # client_cpu_us_per_batch: CPU time of this process (all its threads, not
    # the replay server's, not DataLoader worker processes') per batch: on a
    # loaded machine it moves far less than rows/s, so before/after
    # comparisons of the client's own cost read it. server_cpu_us_per_batch:
    # the replay server process's (pid `server`), over the same interval.
    s0 = proc_cpu(server) if server else None
    t0, c0 = time.perf_counter(), time.process_time()
    n_batches, n_rows = fn()
    dt, cpu = time.perf_counter() - t0, time.process_time() - c0
    s1 = proc_cpu(server) if server else None
    bytes_per_row = 4 + 4 * N_DENSE + 4 * N_SPARSE
    r = {"bench": name, "threads": 1, "rows": n_rows, "batches": n_batches, "seconds": round(dt, 4),
         "rows_per_s": round(n_rows / dt), "batches_per_s": round(n_batches / dt, 1),
         "mb_per_s": round(n_rows * bytes_per_row / dt / 1e6, 1), "batch_rows": rows,
         "client_cpu_us_per_batch": round(cpu / max(n_batches, 1) * 1e6, 1)}
    if s0 is not None and s1 is not None:
        r["server_cpu_us_per_batch"] = round((s1 - s0) / max(n_batches, 1) * 1e6, 1)
    r.update(extra or {})
    if base:
        r["vs_numpy_client"] = round(r["rows_per_s"] / base, 3)
    if tcp:
        r["vs_tcp"] = round(r["rows_per_s"] / tcp, 3)
    if one:  # a loader with workers against the same dataset in one process
        r["vs_one_process"] = round(r["rows_per_s"] / one, 3)
    print(json.dumps(r), flush=True)
    return r["rows_per_s"]


def step_timers(torch_mod):
    """Wrap the default raw host path's steps (issue 22: where a batch's
    time goes) with time.perf_counter_ns accumulators; returns (totals
    {step: ns}, undo). Steps nest: feed_next holds recv and widen."""
    import piperec.feed as feed
    import piperec.torch as ptorch
    acc, undo = {}, []

    def wrap(obj, attr, step):
        f = getattr(obj, attr)
        acc[step] = 0

        def timed(*a, **k):
            t = time.perf_counter_ns()
            try:
                return f(*a, **k)
            finally:
                acc[step] += time.perf_counter_ns() - t
        setattr(obj, attr, timed)
        undo.append((obj, attr, f))
    for obj, attr, step in ((feed, "widen", "widen"), (feed.InlineFeed, "next", "feed_next"),
                            (pc.TrainerClient, "recv", "recv"), (pc.TrainerClient, "ack", "ack"),
                            (ptorch.StreamDataset, "_raw_views", "raw_views"),
                            (ptorch.StreamDataset, "_record", "record")):
        wrap(obj, attr, step)

    def restore():
        for obj, attr, f in reversed(undo):
            setattr(obj, attr, f)
    return acc, restore


# ---------------------------------------------------------------- live: piperec run

LIVE_ROW_BYTES = 243  # a `piperec gen` row; the test broker keeps ~5 MB a partition


class LiveStream:
    """The test broker loaded with `rows` generated rows, and `piperec run`
    processes reading them (one per case, each its own consumer group)."""

    def __init__(self, piperec, rows, partitions, threads, batch, tmpdir, consumers=1):
        self.piperec, self.rows, self.threads, self.batch = piperec, rows, threads, batch
        self.consumers = consumers
        self.tmp, self.procs = tmpdir, []
        # keep each partition under ~3 MB of the broker's ~5 MB
        self.partitions = max(partitions, -(-rows * LIVE_ROW_BYTES // 3_000_000))
        br = self._spawn([piperec, "broker", "--partitions", str(self.partitions), "--topics",
                          "events:%d" % self.partitions], "broker", stdout=subprocess.PIPE)
        line = br.stdout.readline().decode()
        if not line.startswith("bootstrap="):
            raise RuntimeError("piperec broker printed %r" % line)
        self.bootstrap = line.strip().split("=", 1)[1]
        data = os.path.join(tmpdir, "data.tsv")
        subprocess.run([piperec, "gen", "--rows", str(rows), "--seed", "1", "--threads", "2",
                        "--output", data], check=True)
        # keyless messages spread per message (as bench_stream.sh does)
        subprocess.run([piperec, "produce", "--bootstrap", self.bootstrap, "--topic", "events",
                        "--input", data, "-X", "sticky.partitioning.linger.ms=0"], check=True,
                       stdout=subprocess.DEVNULL)
        os.unlink(data)

    def _spawn(self, argv, name, **kw):
        kw.setdefault("stderr", open(os.path.join(self.tmp, name + ".err"), "w"))
        p = subprocess.Popen(argv, **kw)
        self.procs.append(p)
        return p

    def start_run(self, group):
        """A `piperec run` of a new consumer group; its trainer endpoint."""
        cfg = os.path.join(self.tmp, group + ".yaml")
        with open(cfg, "w") as f:
            f.write("""pipelines:
  - name: bench
    source:
      kafka:
        topics: [events]
        group.id: %s
        properties:
          bootstrap.servers: "%s"
          auto.offset.reset: earliest
          fetch.wait.max.ms: 10
      format: criteo_tsv
      consumers: %d
    schema: { label: true, dense: 13, sparse: 26 }
    transform:
      dense: [neg2zero, log1p]
      sparse: [hex2int, { modulus: 524288 }, vocab]
      vocab: { profile: dlrm, min_count: 1, capacity: 0, count_mode: streaming }
    batch: { size: %d, max_delay_ms: 100 }
    sinks:
      trainer: { listen: "127.0.0.1:0", max_unacked_batches: 64 }
http: { listen: "127.0.0.1:0" }
engine: { backend: cpu, threads: %d }
limits: { max_inflight_bytes: 1GiB }
log: { level: info }
""" % (group, self.bootstrap, self.consumers, self.batch, self.threads))
        err = os.path.join(self.tmp, group + ".err")
        p = self._spawn([self.piperec, "run", "--config", cfg], group)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and p.poll() is None:
            m = re.search(r"trainers connect to port (\d+)", open(err).read())
            if m:
                return p, "127.0.0.1:%s" % m.group(1)
            time.sleep(0.05)
        raise RuntimeError("piperec run did not start:\n" + open(err).read()[-1500:])

    @staticmethod
    def stop(p):
        p.terminate()
        try:
            p.wait(5)  # it drains: waits for acks that may never come
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()

    def close(self):
        for p in reversed(self.procs):
            if p.poll() is None:
                self.stop(p)


def live_main(args, torch, StreamDataset):
    """One JSON line per live case (see the module doc)."""
    tmpdir = tempfile.mkdtemp(prefix="bench_trainer_py.live.")
    cuda = torch.cuda.is_available()

    def timed(it, sync=False):
        # rows/s from the first batch to the last: the group join before is not counted
        # (an idle timeout, rows lost, ends the loop: timed to the last batch)
        n = r = total = 0
        t0 = t1 = None
        for b in it:
            t1 = time.perf_counter()
            total += b.rows
            if t0 is None:
                t0 = t1
            else:
                n += 1
                r += b.rows
            if total >= args.live_rows:
                break
        if sync:
            torch.cuda.synchronize()
            t1 = time.perf_counter()
        return n, r, (t1 - t0) if t0 is not None else 0.0

    cases = [("trainer_py_live_numpy_client", lambda ep: timed(
        pc.TrainerClient(ep, "bench", credits=8).batches(timeout=10)),
        {"client": "piperec_client (numpy views)", "layout": "protobuf"}),
             ("trainer_py_live_stream_dataset_raw_compact", lambda ep: timed(StreamDataset(
                 ep, "bench", idle_timeout=10, layout="raw", compact=True)),
              {"client": "StreamDataset(layout=raw, compact), host memory", "layout": "raw compact",
               "pinned": cuda})]
    if cuda:
        cases.append(("trainer_py_live_stream_dataset_raw_compact_gpu", lambda ep: timed(
            StreamDataset(ep, "bench", idle_timeout=10, layout="raw", compact=True, device="cuda"),
            True), {"client": "StreamDataset(layout=raw, compact, device=cuda)",
                    "layout": "raw compact", "device": torch.cuda.get_device_name()}))
    else:
        print("bench_trainer_py --live: torch.cuda.is_available() is false: the live GPU case "
              "skipped", file=sys.stderr)
    only = set(args.only.split(",")) if args.only else None
    stream = None
    try:
        stream = LiveStream(args.live, args.live_rows, args.live_partitions, args.live_threads,
                            args.rows, tmpdir, args.live_consumers)
        base = None
        for name, fn, extra in cases:
            if only and name not in only and name != "trainer_py_live_numpy_client":
                continue
            p, ep = stream.start_run(name)
            try:
                n, r, dt = fn(ep)
            finally:
                stream.stop(p)
            res = {"bench": name, "rows": r, "batches": n, "seconds": round(dt, 4),
                   "rows_per_s": round(r / dt) if dt > 0 else 0, "batch_rows": args.rows,
                   "engine_threads": args.live_threads, "consumers": args.live_consumers,
                   "partitions": stream.partitions,
                   "transport": "tcp loopback", "source": "piperec run (test broker)",
                   "torch": torch.__version__, "numpy": np.__version__}
            res.update(extra)
            if base:
                res["vs_numpy_client"] = round(res["rows_per_s"] / base, 3)
            if name == "trainer_py_live_numpy_client":
                base = res["rows_per_s"]
            print(json.dumps(res), flush=True)
    finally:
        if stream is not None:
            stream.close()
        shutil.rmtree(tmpdir, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=4096, help="rows per batch")
    ap.add_argument("--batches", type=int, default=2000, help="batches per measurement")
    ap.add_argument("--only", help="comma-separated case names (default: all)")
    ap.add_argument("--steps", action="store_true", help="only the default raw StreamDataset, with "
                    "the us a batch of each step of its host path (recv, widen, ack, ...)")
    ap.add_argument("--live", metavar="PIPEREC", help="the live cases: this piperec binary's "
                    "broker, gen, produce and run instead of the replay server")
    ap.add_argument("--live-rows", type=int, default=1_000_000, help="rows produced (--live)")
    ap.add_argument("--live-partitions", type=int, default=128,
                    help="test broker partitions (--live; raised to keep each under ~3 MB)")
    ap.add_argument("--live-threads", type=int, default=2, help="piperec run engine.threads (--live)")
    ap.add_argument("--live-consumers", type=int, default=1,
                    help="piperec run source.consumers: consumer instances (--live)")
    args = ap.parse_args()
    import torch
    from piperec.torch import StreamDataLoader, StreamDataset

    if args.live:
        return live_main(args, torch, StreamDataset)

    tmpdir = tempfile.mkdtemp(prefix="bench_trainer_py.")

    def run_server(unix=False, total=None):
        q = mp.Queue()
        path = os.path.join(tmpdir, "s%d.sock" % len(os.listdir(tmpdir)))
        p = mp.Process(target=server_main, args=(q, args.rows, total or args.batches, path),
                       daemon=True)
        p.start()
        port = q.get(timeout=30)
        return p, ("unix:" + path) if unix else "127.0.0.1:%d" % port

    def loop(it):
        # Stop at the last batch rather than at the stream's end: a dataset
        # acks its last batch only when asked for one more.
        n = r = 0
        for b in it:
            n += 1
            r += b.rows
            if n == args.batches:
                break
        return n, r

    def read_exact(c, view):
        # what the client already buffered (read with SubscribeOk) first
        k = min(len(c._buf), len(view))
        view[:k] = c._buf[:k]
        del c._buf[:k]
        while k < len(view):
            k += c.sock.recv_into(view[k:], len(view) - k)
        return view

    def raw_client(ep, compact=False, bare=False):
        # The numpy client over the raw layout: every batch into one of two
        # preallocated aligned buffers (the zero-copy receive a trainer gets).
        bufs = [np.empty(args.rows * 512 + (1 << 16), np.uint8) for _ in range(2)]
        n = r = 0
        with pc.TrainerClient(ep, "bench", credits=8, layout="raw", compact=compact) as c:
            while n < args.batches:
                mem = bufs[n % 2][(-bufs[n % 2].ctypes.data) % 64:]
                if bare:  # frames read whole, not decoded
                    (k,) = struct.unpack_from("<I", read_exact(c, memoryview(mem)[:4]), 0)
                    read_exact(c, memoryview(mem)[4:4 + k])
                    pre = pc._read_varint(bytes(mem[5:16]), 0)[1] + 5
                    c.ack(struct.unpack_from("<Q", mem, pre + 40)[0])
                    n += 1
                    r += args.rows
                    continue
                b = c.recv(5, into=lambda k: memoryview(mem)[:k])
                if b is None:
                    break
                c.ack(b.sequence)
                n += 1
                r += b.rows
        return n, r

    def socket_bytes(ep):
        # The bare transport: the replay server streams raw frames and the
        # client only recv_into()s them (the same bytes as the raw case),
        # acking as it goes; what is left is the socket's copy cost.
        return raw_client(ep, bare=True)

    def ds(layout, **kw):
        return StreamDataset(ep_box[0], "bench", idle_timeout=5, layout=layout, **kw)

    ep_box = [None]
    pin = torch.cuda.is_available()
    if args.steps:
        p, ep_box[0] = run_server()
        acc, restore = step_timers(torch)

        def timed_loop():
            n, r = loop(ds("raw"))
            for k in acc:  # ns in all -> us a batch (the timers' own cost included)
                acc[k] = round(acc[k] / max(n, 1) / 1e3, 1)
            return n, r
        try:
            measure("trainer_py_stream_dataset_raw_steps", args.rows, timed_loop,
                    {"client": "StreamDataset(layout=raw), host path, steps timed",
                     "layout": "raw", "steps_us_per_batch": acc}, server=p.pid)
        finally:
            restore()
            p.terminate()
            p.join()
        return
    cases = [
        ("trainer_py_numpy_client", lambda ep: loop(pc.TrainerClient(ep, "bench", credits=8).batches(
            timeout=5)), {"client": "piperec_client (numpy views)", "layout": "protobuf"}),
        ("trainer_py_numpy_client_raw", raw_client,
         {"client": "piperec_client recv(into=) preallocated", "layout": "raw"}),
        ("trainer_py_numpy_client_raw_compact", lambda ep: raw_client(ep, True),
         {"client": "piperec_client recv(into=) preallocated", "layout": "raw compact"}),
        ("trainer_py_stream_dataset", lambda ep: loop(ds("protobuf", pin_memory=False)),
         {"client": "StreamDataset, main process", "layout": "protobuf", "pinned": False}),
        ("trainer_py_stream_dataset_raw", lambda ep: loop(ds("raw")),
         {"client": "StreamDataset, main process, ring + receive thread (compact on the wire, "
          "widened on the host)", "layout": "raw", "pinned": pin, "wire_bytes_per_row": 160}),
        ("trainer_py_stream_dataset_raw_recv_thread", lambda ep: loop(ds("raw", recv_thread=True)),
         {"client": "StreamDataset, main process, ring + a receive thread (recv_thread=True: "
          "receive and widening overlap the loop; the default receives on the loop's thread)",
          "layout": "raw", "pinned": pin, "wire_bytes_per_row": 160}),
        ("trainer_py_stream_dataset_raw_full_wire", lambda ep: loop(ds("raw", compact_wire=False)),
         {"client": "StreamDataset, main process, ring + receive thread, full raw bytes "
          "(compact_wire=False: the default before)", "layout": "raw", "pinned": pin,
          "wire_bytes_per_row": 368}),
        ("trainer_py_stream_dataset_raw_compact", lambda ep: loop(ds("raw", compact=True)),
         {"client": "StreamDataset, main process, ring + receive thread", "layout": "raw compact",
          "pinned": pin}),
        ("trainer_py_dataloader_2w", lambda ep: loop(StreamDataLoader(
            ds("protobuf", pin_memory=False), num_workers=2)),
         {"client": "StreamDataLoader num_workers=2 -> the main process (default)",
          "layout": "protobuf", "pinned": False, "one_process_case": "trainer_py_stream_dataset"}),
        ("trainer_py_dataloader_2w_processes", lambda ep: loop(StreamDataLoader(
            ds("protobuf", pin_memory=False), num_workers=2, processes=True)),
         {"client": "StreamDataLoader, 2 worker processes", "layout": "protobuf", "pinned": False,
          "one_process_case": "trainer_py_stream_dataset"}),
        ("trainer_py_dataloader_2w_views", lambda ep: loop(StreamDataLoader(
            ds("protobuf", pin_memory=False), num_workers=2, views=True)),
         {"client": "StreamDataLoader, 2 workers, views on the ring slots (no copy-out)",
          "layout": "protobuf", "pinned": False, "one_process_case": "trainer_py_stream_dataset"}),
        ("trainer_py_dataloader_2w_raw", lambda ep: loop(StreamDataLoader(ds("raw"), num_workers=2)),
         {"client": "StreamDataLoader num_workers=2 -> the receive thread", "layout": "raw",
          "pinned": pin, "one_process_case": "trainer_py_stream_dataset_raw"}),
        ("trainer_py_dataloader_2w_raw_compact", lambda ep: loop(StreamDataLoader(
            ds("raw", compact=True), num_workers=2)),
         {"client": "StreamDataLoader num_workers=2 -> the receive thread", "layout": "raw compact",
          "pinned": pin, "one_process_case": "trainer_py_stream_dataset_raw_compact"}),
    ]
    if torch.cuda.is_available():
        def to_gpu(ep):
            n = r = 0
            for b in StreamDataset(ep, "bench", idle_timeout=5, pin_memory=True):
                g = b.to("cuda", non_blocking=True)
                n += 1
                r += g.rows
                if n == args.batches:
                    break
            torch.cuda.synchronize()
            return n, r

        def raw_gpu(ep, compact=False):
            n = r = 0
            for g in ds("raw", device="cuda", compact=compact):
                n += 1
                r += g.rows
                if n == args.batches:
                    break
            torch.cuda.synchronize()
            return n, r
        dev = torch.cuda.get_device_name()
        cases.append(("trainer_py_stream_dataset_gpu", to_gpu,
                      {"client": "StreamDataset pinned + .to(cuda)", "layout": "protobuf", "device": dev}))
        cases.append(("trainer_py_stream_dataset_raw_gpu", raw_gpu,
                      {"client": "StreamDataset(layout=raw, device=cuda): side-stream copy",
                       "layout": "raw", "device": dev}))
        cases.append(("trainer_py_stream_dataset_raw_compact_gpu", lambda ep: raw_gpu(ep, True),
                      {"client": "StreamDataset(layout=raw, device=cuda): side-stream copy",
                       "layout": "raw compact", "device": dev}))
    else:
        print("bench_trainer_py: torch.cuda.is_available() is false: GPU figures (copies to the "
              "device) skipped; raw-layout buffers are plain (not pinned) memory", file=sys.stderr)
    unix_of = ("trainer_py_numpy_client", "trainer_py_numpy_client_raw",
               "trainer_py_numpy_client_raw_compact", "trainer_py_stream_dataset_raw",
               "trainer_py_stream_dataset_raw_compact")
    # each _unix case right after its TCP case: on a shared, noisy machine
    # the ratio of two neighbouring measurements is the one worth reading
    cases = [c for n, fn, extra in cases for c in [(n, fn, extra)] + (
        [(n + "_unix", fn, dict(extra, transport="unix", tcp_case=n))] if n in unix_of else [])]
    cases[1:1] = [("trainer_py_socket_bytes", socket_bytes,
                   {"client": "recv_into one buffer, no protocol: the transport alone",
                    "layout": "raw", "wire_bytes_per_row": 368}),
                  ("trainer_py_socket_bytes_unix", socket_bytes,
                   {"client": "recv_into one buffer, no protocol: the transport alone",
                    "layout": "raw", "wire_bytes_per_row": 368, "transport": "unix",
                    "tcp_case": "trainer_py_socket_bytes"})]
    only = set(args.only.split(",")) if args.only else None
    base, by_name = None, {}
    for name, fn, extra in cases:
        if only and name not in only and name != "trainer_py_numpy_client":
            continue
        local = extra.get("transport") == "unix"
        # A loader with worker processes gets its batches from the workers
        # round robin, in order: when the stream ends, the loop would wait
        # the idle timeout (5 s) for a worker whose connection was dealt
        # fewer of the last batches. The server serves twice what the loop
        # takes, so the figure is the loader's rate, not that end-of-stream
        # wait (issue 22: it was most of the measured loader time).
        total = 2 * args.batches if "one_process_case" in extra else None
        p, ep = run_server(local, total)
        ep_box[0] = ep
        extra = dict(extra, torch=torch.__version__, numpy=np.__version__)
        extra.setdefault("transport", "tcp loopback")
        try:
            rps = measure(name, args.rows, lambda: fn(ep), extra, base,
                          tcp=by_name.get(extra.get("tcp_case")),
                          one=by_name.get(extra.get("one_process_case")), server=p.pid)
            by_name[name] = rps
            if name == "trainer_py_numpy_client":
                base = rps
        finally:
            p.terminate()
            p.join()
    shutil.rmtree(tmpdir, ignore_errors=True)


if __name__ == "__main__":
    main()
