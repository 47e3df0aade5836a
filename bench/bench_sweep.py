#!/usr/bin/python3
"""bench_sweep.py — the helpers of bench/bench_sweep.sh (standard library only,
so that the sweep runs on a machine with nothing but python3).

  poll HOST:PORT ROWS RUN_PID BROKER_PID [TRAINER_PID]
      Polls `piperec run`'s /metrics (every 20 ms until rows flow, then
      less often until near the end: poll_pause()): the clock runs from the
      first poll that sees rows out of the engine (piperec_records_out_total)
      to the one that sees all ROWS (the group join before is not counted).
      Over that window, the CPU accounting ("accounting": see account()):
      CPU seconds of `piperec run`, of the test broker and of the trainer
      (`piperec consume`), of each kind of thread of each (/proc/PID/task,
      names without their trailing digits: the pipeline thread, its workers,
      librdkafka's threads), of this poller, and the machine's busy, idle
      and steal time (/proc/stat).
      Then it waits (up to 20 s) until every batch sent to the trainer is
      acknowledged, so the caller can stop `piperec consume` at once instead
      of waiting for its idle timeout. One JSON object on stdout.

  watch FIFO OUT.json NAME=PID...
      The same accounting for a bench_ceiling run (its --marks FIFO says
      when the first message came and when the count completed): the named
      processes (broker, ceiling) and the machine over that window.

  fields ACCT.json ROWS NAME,NAME... [CEILING.json]
      A run's CPU fields from its accounting (cpu_fields(): CPU us per row
      of each process, busy share, available cores, saturation); with the
      ceiling run's JSON line, the ratio that CPU alone predicts
      (predicted()).

  states PID OUT.json [PERIOD_S]
      Samples the state and wait channel of each thread of PID (see
      states()): where a run's threads wait (BENCH_SWEEP_STATES=1).

  timed OUT.json CMD ARGS...
      Runs CMD, writes {"seconds", "peak_rss_mb", "rc"} (wall time and the
      child's peak RSS from wait4) to OUT.json; exits with CMD's status.

  fresh HOST:PORT PIPELINE WANT_ROWS OUT.json
      A trainer for the freshness run (standard library only; speaks
      docs/trainer-protocol.md with the few protobuf fields it needs):
      subscribes with 64 credits, acks every batch at once, and records per
      batch emit_time_ms - min_event_time_ms (event time = the Kafka
      timestamp the paced producer set) and when it came. Stops at WANT_ROWS
      rows, or 20 s after the last batch (or the start). OUT.json: rows, batches, p50/p99/
      max of that freshness in ms over the batches after the first 0.5 s
      (warm-up), the rows/s it received over that window.

  summary RESULTS.jsonl
      The sweep's table from its JSON lines: per thread count, streaming
      rows/s of piperec and of the bare-consumer ceiling for each message
      shape, their ratio, peak RSS, and offline `piperec process` rows/s.
"""
import json
import os
import re
import socket
import struct
import subprocess
import sys
import time
import urllib.request

CLK = os.sysconf("SC_CLK_TCK")


def cpu_of(pid):
    f = open("/proc/%s/stat" % pid).read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / CLK


def switches_of(path):
    """Voluntary + involuntary context switches of a task (/proc/.../status):
    how often it slept or was preempted, i.e. woken, per row."""
    n = 0
    for line in open(path + "/status"):
        if line.startswith(("voluntary_ctxt_switches:", "nonvoluntary_ctxt_switches:")):
            n += int(line.split()[1])
    return n


def tids_of(pid):
    """{tid: (kind, CPU seconds, context switches)} of a process's threads
    (kind: the thread's name without trailing digits)."""
    out = {}
    try:
        tids = os.listdir("/proc/%s/task" % pid)
    except OSError:
        return out
    for tid in tids:
        try:
            name = open("/proc/%s/task/%s/comm" % (pid, tid)).read().strip()
            s = cpu_of("%s/task/%s" % (pid, tid))
            cs = switches_of("/proc/%s/task/%s" % (pid, tid))
        except OSError:
            continue
        out[tid] = (re.sub(r"[0-9]+$", "", name) or name, s, cs)
    return out


def machine():
    """The machine's CPU time from /proc/stat's first line, in seconds summed
    over all CPUs: busy (user, nice, system, irq, softirq; guest time is
    inside user), idle (idle, iowait), steal (taken by the hypervisor)."""
    f = [int(x) for x in open("/proc/stat").readline().split()[1:]]
    f += [0] * (8 - len(f))
    return {"busy": (f[0] + f[1] + f[2] + f[5] + f[6]) / CLK, "idle": (f[3] + f[4]) / CLK,
            "steal": f[7] / CLK}


def snapshot(procs, told=None):
    """CPU time of every named process (and of its threads), of this helper
    and of the machine, now. procs: [(name, pid)]; told: {name: CPU
    seconds} a process said itself (bench_ceiling's marks), used instead of
    /proc, which may no longer hold it."""
    snap = {"t": time.perf_counter(), "machine": machine(), "procs": dict(told or {}), "tids": {}}
    for name, pid in procs:
        try:
            snap["tids"][name] = tids_of(pid)
            if name not in snap["procs"]:
                snap["procs"][name] = cpu_of(pid)
        except OSError:
            continue  # gone: counted as 0 over the window
    t = os.times()
    snap["harness"] = t.user + t.system
    return snap


def account(a, b):
    """CPU accounting between two snapshots: wall seconds, CPU seconds of each
    named process, of its thread kinds and its busiest thread, this helper's
    (harness), the machine's busy / idle / steal seconds and CPU count."""
    w = b["t"] - a["t"]
    acct = {"window_s": round(w, 4), "ncpu": os.cpu_count() or 1,
            "machine_s": {k: round(b["machine"][k] - a["machine"][k], 3) for k in b["machine"]},
            "harness_s": round(b["harness"] - a["harness"], 3), "cpu_s": {}, "threads_s": {},
            "busiest_thread_cores": {}, "switches": {}}
    for name in b["procs"]:
        acct["cpu_s"][name] = round(b["procs"][name] - a["procs"].get(name, 0.0), 3)
        ta, tb = a["tids"].get(name, {}), b["tids"].get(name, {})
        kinds, switches, top = {}, {}, 0.0
        for tid, (kind, sec, cs) in tb.items():
            d = sec - ta.get(tid, (kind, 0.0, 0))[1]
            kinds[kind] = round(kinds.get(kind, 0.0) + d, 3)
            switches[kind] = switches.get(kind, 0) + cs - ta.get(tid, (kind, 0.0, 0))[2]
            top = max(top, d)
        acct["threads_s"][name] = kinds
        acct["switches"][name] = switches
        # None: no thread of it ran in the window as sampled (the watcher read
        # both marks late, after the run: a loaded machine), not 0 cores.
        acct["busiest_thread_cores"][name] = round(top / w, 2) if w > 0 and top > 0 else None
    return acct


def cpu_fields(acct, rows, involved):
    """The JSON fields of a run's CPU accounting over ROWS rows. involved:
    the named processes that do the run's work (broker, client, trainer).
      cpu_us_per_row   CPU microseconds per row of each involved process, of
                       the sweep's own helper (harness: the /metrics poller in
                       a piperec run) and of everything else on the machine
                       (other: machine busy time minus all of those);
      involved_us_per_row  their sum over the involved processes (c);
      busy_share, idle_share, steal_share  of the machine's CPU time
                       (ncpu x window) over the window;
      involved_cores   CPU seconds of the involved processes per second (U);
      available_cores  ncpu minus what steal, the harness and other
                       processes took (A): what the involved ones could use;
      saturation       U / A: 1 = CPU-bound on this machine, less = the
                       involved processes waited while CPU was idle;
      busiest_thread_us_per_row  CPU us per row of each involved process's
                       busiest thread: 1e6 / the largest is the most rows/s
                       the run can reach however many cores it gets."""
    w = acct["window_s"]
    if not w or not rows:
        return {}
    m = acct["machine_s"]
    ours = sum(acct["cpu_s"].get(n, 0.0) for n in involved)
    other = max(0.0, m["busy"] - ours - acct["harness_s"])
    total = m["busy"] + m["idle"] + m["steal"]
    us = {n: round(acct["cpu_s"].get(n, 0.0) * 1e6 / rows, 3) for n in involved}
    us["harness"] = round(acct["harness_s"] * 1e6 / rows, 3)
    us["other"] = round(other * 1e6 / rows, 3)
    avail = acct["ncpu"] - (m["steal"] + acct["harness_s"] + other) / w
    return {"cpu_window_s": w, "ncpu": acct["ncpu"], "cpu_us_per_row": us,
            "involved_us_per_row": round(ours * 1e6 / rows, 3),
            "busy_share": round(m["busy"] / total, 3) if total else None,
            "idle_share": round(m["idle"] / total, 3) if total else None,
            "steal_share": round(m["steal"] / total, 3) if total else None,
            "involved_cores": round(ours / w, 3), "available_cores": round(avail, 3),
            "saturation": round(ours / w / avail, 3) if avail > 0 else None,
            "cpu_seconds_by_process": acct["cpu_s"], "thread_cpu_seconds_by_process": acct["threads_s"],
            "busiest_thread_cores": acct["busiest_thread_cores"],
            "busiest_thread_us_per_row": {n: round(c * w * 1e6 / rows, 3)
                                          for n, c in acct["busiest_thread_cores"].items()
                                          if c is not None and n in involved},
            "switches_per_krow": {n: {k: round(v * 1e3 / rows, 2) for k, v in acct["switches"][n].items()}
                                  for n in acct.get("switches", {})},
            "machine_cpu_seconds": m, "harness_cpu_seconds": acct["harness_s"]}


def predicted(ceil, run):
    """The ratio piperec / ceiling that CPU alone predicts, from the CPU
    fields of the ceiling run and of the piperec run. When the involved
    processes of a run are CPU-bound they use all they can get, so
    rows/s = A / c (available cores / involved CPU seconds per row), and
      ratio_cpu_bound = (A_piperec / c_piperec) / (A_ceiling / c_ceiling);
    with the same capacity in both runs that is c_ceiling / c_piperec
    (ratio_equal_capacity). The measured ratio is exactly
    (U_piperec / c_piperec) / (U_ceiling / c_ceiling), so measured /
    ratio_cpu_bound = saturation_piperec / saturation_ceiling: below 1, the
    piperec run left CPU it could have used idle (a wait, not CPU).
    ratio_serial: the same with each run's busiest thread instead of its
    whole CPU, the bound where cores are plenty (16)."""
    cc, cp = ceil.get("involved_us_per_row"), run.get("involved_us_per_row")
    ac, ap = ceil.get("available_cores"), run.get("available_cores")
    if not cc or not cp or not ac or not ap:
        return {}
    out = {"predicted_ratio_equal_capacity": round(cc / cp, 3),
           "predicted_ratio_cpu_bound": round((ap / cp) / (ac / cc), 3)}
    # With cores to spare (16), each run is bound by its busiest thread
    # instead: ratio_serial = (its us/row in the ceiling) / (in piperec).
    sc = max((ceil.get("busiest_thread_us_per_row") or {}).values(), default=0)
    sp = max((run.get("busiest_thread_us_per_row") or {}).values(), default=0)
    if sc and sp:
        out["predicted_ratio_serial"] = round(sc / sp, 3)
    return out


def watch(fifo, out, *named):
    """`watch FIFO OUT.json MARKER=PID NAME=PID...`: snapshots at the
    "first CPU" and "last CPU" lines the process MARKER writes to FIFO
    (bench_ceiling --marks; CPU: its own CPU seconds, which count for it),
    the accounting between them to OUT.json ({} when the marks never came).
    Blocked in read between the marks, so it takes no CPU in the window."""
    procs = [tuple(x.split("=", 1)) for x in named]
    first = acct = None
    with open(fifo) as f:
        for line in f:
            w = line.split()
            told = {procs[0][0]: float(w[1])} if len(w) > 1 else None
            if w and w[0] == "first" and first is None:
                first = snapshot(procs, told)
            elif w and w[0] == "last" and first is not None:
                acct = account(first, snapshot(procs, told))
    with open(out, "w") as f:
        json.dump(acct or {}, f)


def run_fields(acct_path, rows, involved, ceil_path=None):
    """`fields ACCT.json ROWS NAMES [CEIL.json]`: cpu_fields() of an
    accounting file (watch's output, or poll's, which holds it) as one JSON
    object; with CEIL.json (the ceiling run's
    line) the predicted ratios too."""
    acct = json.load(open(acct_path))
    acct = acct.get("accounting", acct)  # poll's output holds it under "accounting"
    out = cpu_fields(acct, int(rows), involved.split(",")) if acct else {}
    if ceil_path and out:
        out.update(predicted(json.load(open(ceil_path)), out))
    print(json.dumps(out))


def scrape(url):
    try:
        return urllib.request.urlopen(url, timeout=1).read().decode()
    except Exception:
        return ""


def metric(text, name):
    return sum(int(float(v)) for v in re.findall(r"^%s(?:\{[^}]*\})? ([0-9.e+]+)$" % name, text, re.M))


def poll_pause(first, n, want):
    """Seconds to the next scrape of /metrics. Every scrape costs CPU in the
    window (this poller's and piperec's HTTP thread: 0.15-0.7 us per row
    at 20 ms on 2 cores, 5-10% of the run's own CPU per row), which the
    ceiling run does not pay. So once rows flow, wait half the time the
    rows still missing need at the rate so far (at least 20 ms, at most
    1 s): the end is still seen within 20 ms, with ~10 scrapes instead of
    one per 20 ms. BENCH_SWEEP_POLL=fixed keeps one per 20 ms (before/after)."""
    if first is None or n <= first[0] or os.environ.get("BENCH_SWEEP_POLL") == "fixed":
        return 0.02
    rate = (n - first[0]) / max(1e-6, time.perf_counter() - first[1]["t"])
    return min(1.0, max(0.02, 0.5 * (want - n) / rate))


def poll(hostport, want, pid, bpid, tpid=None):
    url = "http://%s/metrics" % hostport
    want = int(want)
    procs = [("broker", bpid), ("piperec", pid)] + ([("trainer", tpid)] if tpid else [])
    first = last = None
    deadline = time.time() + 400
    text = ""
    while time.time() < deadline:
        text = scrape(url)
        n = metric(text, "piperec_records_out_total")
        if n > 0 and first is None:
            first = (n, snapshot(procs))
        if n >= want:
            last = (n, snapshot(procs))
            break
        time.sleep(poll_pause(first, n, want))
    if last is None:
        sys.exit("poll: piperec_records_out_total never reached %d" % want)
    ops = {o: round(float(v), 3) for o, v in re.findall(
        r'^piperec_engine_operator_seconds_total\{[^}]*operator="(\w+)"[^}]*\} ([0-9.e+-]+)', text, re.M)}
    t0 = time.perf_counter()
    acked = False
    while time.perf_counter() - t0 < 20:
        m = scrape(url)
        sent = metric(m, "piperec_sink_batches_sent_total")
        if sent > 0 and metric(m, "piperec_sink_batches_acked_total") >= sent and \
                metric(m, "piperec_sink_queued_batches") == 0:
            acked = True
            break
        time.sleep(0.05)
    acct = account(first[1], last[1])
    print(json.dumps({"t_first": first[1]["t"], "t_last": last[1]["t"],
        "rows": want - first[0], "seconds": acct["window_s"],
        "cpu_seconds": acct["cpu_s"].get("piperec", 0.0),
        "broker_cpu_seconds": acct["cpu_s"].get("broker", 0.0),
        "thread_cpu_seconds": acct["threads_s"].get("piperec", {}),
        "accounting": acct,
        "engine_op_seconds": ops, "all_acked": acked,
        "backpressure_pauses": metric(text, "piperec_backpressure_pauses_total"),
        "inflight_peak_bytes": metric(text, "piperec_inflight_peak_bytes"),
        "drain_seconds": round(time.perf_counter() - t0, 2)}))


def states(pid, out, period="0.01"):
    """`states PID OUT.json [PERIOD_S]`: until PID exits or SIGTERM, every
    PERIOD_S (10 ms) the state of each of its threads (R running or
    runnable; S/D asleep, with the kernel function it sleeps in, wchan:
    futex_wait_queue = a lock or condition, do_epoll_wait / do_sys_poll =
    sockets, hrtimer_nanosleep = a sleep); OUT.json: per thread kind, the
    share of samples in each state. Where the threads wait when CPU is idle
    (BENCH_SWEEP_STATES=1). Costs a few % of a core itself."""
    import signal
    bins = {}  # 0.1 s bin of time.perf_counter() -> kind -> state -> samples
    stop = []
    signal.signal(signal.SIGTERM, lambda *a: stop.append(1))
    while not stop:
        try:
            tids = os.listdir("/proc/%s/task" % pid)
        except OSError:
            break
        for t in tids:
            base = "/proc/%s/task/%s/" % (pid, t)
            try:
                name = open(base + "comm").read().strip()
                st = open(base + "stat").read().rsplit(")", 1)[1].split()[0]
                wc = open(base + "wchan").read().strip() if st != "R" else ""
            except OSError:
                continue
            kind = re.sub(r"[0-9]+$", "", name) or name
            b = bins.setdefault(str(round(time.perf_counter(), 1)), {}).setdefault(kind, {})
            st += ":" + wc if wc and wc != "0" else ""
            b[st] = b.get(st, 0) + 1
        time.sleep(float(period))
    with open(out, "w") as f:
        json.dump(bins, f)


def states_in(path, t0, t1):
    """The shares of states() samples per thread kind between t0 and t1
    (perf_counter seconds; the poller's window), the 6 most frequent."""
    tot = {}
    for t, kinds in json.load(open(path)).items():
        if t0 <= float(t) <= t1:
            for kind, c in kinds.items():
                for st, n in c.items():
                    tot.setdefault(kind, {})[st] = tot.setdefault(kind, {}).get(st, 0) + n
    res = {}
    for kind, c in sorted(tot.items()):
        n = sum(c.values())
        res[kind] = {st: round(v / n, 3) for st, v in sorted(c.items(), key=lambda x: -x[1])[:6]}
    return res


def timed(out, cmd):
    t = time.perf_counter()
    p = subprocess.Popen(cmd)
    _, status, ru = os.wait4(p.pid, 0)
    s = time.perf_counter() - t
    rc = os.waitstatus_to_exitcode(status) if hasattr(os, "waitstatus_to_exitcode") else status >> 8
    with open(out, "w") as f:
        json.dump({"seconds": s, "peak_rss_mb": round(ru.ru_maxrss / 1024, 1), "rc": rc}, f)
    sys.exit(rc)


def _varint(v):
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def _field(num, wt, body):
    """One protobuf field: varint (wt 0, body an int) or bytes (wt 2)."""
    if wt == 0:
        return _varint(num << 3) + _varint(body)
    return _varint((num << 3) | 2) + _varint(len(body)) + body


def _fields(buf, pos, end):
    """(field number, wire type, int value or (start, end)) of a message."""
    while pos < end:
        key, pos = _read_varint(buf, pos)
        num, wt = key >> 3, key & 7
        if wt == 0:
            v, pos = _read_varint(buf, pos)
            yield num, wt, v
        elif wt == 2:
            n, pos = _read_varint(buf, pos)
            yield num, wt, (pos, pos + n)
            pos += n
        elif wt == 1:
            pos += 8
        elif wt == 5:
            pos += 4
        else:
            raise ValueError("wire type %d" % wt)


def _read_varint(buf, pos):
    v = shift = 0
    while True:
        b = buf[pos]
        pos += 1
        v |= (b & 0x7F) << shift
        if b < 0x80:
            return v, pos
        shift += 7


def _recv_exact(sock, n):
    out = bytearray()
    while len(out) < n:
        chunk = sock.recv(min(n - len(out), 1 << 20))
        if not chunk:
            raise EOFError("server closed")
        out += chunk
    return out


def _pct(v, q):
    return v[min(len(v) - 1, int(q * len(v)))] if v else None


def fresh(hostport, pipeline, want, out):
    """The freshness trainer (see the module doc). Frame numbers: Subscribe
    1, Batch 3, Ack 4, Ping 6 / Pong 7 (schemas/trainer.proto)."""
    host, port = hostport.rsplit(":", 1)
    want = int(want)
    deadline = time.time() + 60
    while True:
        try:
            sock = socket.create_connection((host, int(port)), timeout=5)
            break
        except OSError:
            if time.time() > deadline:
                raise
            time.sleep(0.1)

    def send(num, body):
        msg = _field(num, 2, body)
        sock.sendall(struct.pack("<I", len(msg)) + msg)

    send(1, _field(1, 0, 1) + _field(2, 2, pipeline.encode()) + _field(3, 0, 64) +
         _field(4, 2, b"bench-sweep-fresh"))
    rows, recs, t_last = 0, [], time.time()
    sock.settimeout(1.0)
    # until every row produced came, or nothing came for 20 s: a paced producer
    # that starts late on a loaded machine (2 of them side by side in CI) must
    # not end the step with its rows unread (one ran short after 5 s in a CI)
    while rows < want and time.time() - t_last < 20:
        try:
            n = struct.unpack("<I", _recv_exact(sock, 4))[0]
            buf = _recv_exact(sock, n)
        except socket.timeout:
            continue
        for num, wt, v in _fields(buf, 0, len(buf)):
            if wt != 2:
                continue
            if num == 3:  # Batch: TrainingBatch fields 2 seq, 3 rows, 11 min event, 13 emit
                f = {k: x for k, w, x in _fields(buf, v[0], v[1]) if w == 0}
                send(4, _field(1, 2, _varint(f.get(2, 0))))
                t_last = time.time()
                rows += f.get(3, 0)
                recs.append((time.perf_counter(), f.get(3, 0), f.get(13, 0) - f.get(11, 0)))
            elif num == 6:  # Ping: the same body back as Pong
                send(7, bytes(buf[v[0]:v[1]]))
    sock.close()
    res = {"rows": rows, "batches": len(recs)}
    if recs:
        t0 = recs[0][0] + 0.5
        kept = [r for r in recs if r[0] >= t0]
        ms = sorted(r[2] for r in kept)
        span = kept[-1][0] - kept[0][0] if len(kept) > 1 else 0
        res.update({"batches_measured": len(kept), "p50_ms": _pct(ms, 0.5), "p99_ms": _pct(ms, 0.99),
                    "max_ms": ms[-1] if ms else None,
                    "rows_per_s": round(sum(r[1] for r in kept[1:]) / span) if span > 0 else None})
    with open(out, "w") as f:
        json.dump(res, f)


def fmt(v, unit=""):
    if v is None:
        return "-"
    if isinstance(v, float) and v < 10:
        return "%.2f%s" % (v, unit)
    return "{:,}{}".format(int(round(v)), unit)


def summary(path):
    lines = [json.loads(l) for l in open(path) if l.startswith("{")]
    threads = []
    for l in lines:
        if "threads" in l and l["threads"] not in threads:
            threads.append(l["threads"])
    threads.sort()  # a sweep may run them in any order (the largest first on a lease)
    shapes = []
    for l in lines:
        if l.get("bench") == "sweep_stream" and l["lines_per_message"] not in shapes:
            shapes.append(l["lines_per_message"])

    def find(bench, n, **kw):
        for l in lines:
            if l.get("bench") == bench and l.get("threads") == n and \
                    all(l.get(k) == v for k, v in kw.items()):
                return l
        return None

    # piperec runs per source.decode_threads value (BENCH_SWEEP_DECODE), in run order
    decodes = []  # (decode_threads, consumers, poll_threads) of the piperec runs, in run order
    for l in lines:
        key = (l.get("decode_threads"), l.get("consumers"), l.get("poll_threads"))
        if l.get("bench") == "sweep_stream" and key not in decodes:
            decodes.append(key)
    multi_k = len({k for _, k, _ in decodes}) > 1
    multi_pt = len({pt for _, _, pt in decodes}) > 1
    head = ["threads"]
    for lpm in shapes:
        tag = "%d/msg" % lpm
        for d, k, pt in decodes:
            dt = "" if d is None else ", decode %s" % ("auto" if d == 0 else d)
            if multi_k:
                dt += ", %s consumer(s)" % k
            if multi_pt:
                dt += ", %s" % ("one polling thread" if pt == 0 else "polling thread each")
            head += ["piperec %s%s rows/s" % (tag, dt), "ratio"]
        if any(l.get("bench") == "sweep_fresh" and l["lines_per_message"] == lpm for l in lines):
            head += ["fresh %s: load, rows/s (target)" % tag, "p99 ms (goal)", "RSS MB"]
        head += ["ceiling %s rows/s" % tag, "RSS MB",
                 "ceiling, piperec's start path %s" % tag, "ceiling N consumers %s" % tag]
    head += ["offline rows/s (process)", "offline pass rows/s (serial %)", "offline RSS MB"]
    rows = []
    for n in threads:
        r = [str(n)]
        for lpm in shapes:
            s = {}
            for d, k, pt in decodes:
                s = find("sweep_stream", n, lines_per_message=lpm, decode_threads=d,
                         consumers=k, poll_threads=pt) or {}
                r += [fmt(s.get("rows_per_s")), fmt(s.get("ratio_piperec_over_ceiling"))]
            if any(l.get("bench") == "sweep_fresh" and l["lines_per_message"] == lpm for l in lines):
                fl = [l for l in lines if l.get("bench") == "sweep_fresh" and l.get("threads") == n
                      and l["lines_per_message"] == lpm]
                f = next((l for l in fl if l.get("kept_up")), fl[-1] if fl else {})
                r += ["%s%s, %s (%s)" % (f.get("load", "-"), "" if f.get("kept_up") else " not kept up",
                                         fmt(f.get("received_rows_per_s")), fmt(f.get("target_rows_per_s"))),
                      "%s (%s)" % (fmt(f.get("p99_ms")), fmt(f.get("goal_p99_ms"))),
                      fmt(f.get("peak_rss_mb"))]
            cr = find("sweep_ceiling_reset", n, lines_per_message=lpm) or {}
            cn = find("sweep_ceiling_n", n, lines_per_message=lpm) or \
                find("sweep_ceiling", n, lines_per_message=lpm, consumers=n) or {}
            r += [fmt(s.get("ceiling_rows_per_s")), fmt(s.get("peak_rss_mb")),
                  fmt(cr.get("rows_per_s")), fmt(cn.get("rows_per_s"))]
        o = find("sweep_offline", n) or {}
        r += [fmt(o.get("rows_per_s")),
              "%s (%s)" % (fmt(o.get("pass_rows_per_s")), fmt(o.get("serial_pct"))),
              fmt(o.get("peak_rss_mb"))]
        rows.append(r)
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for r in rows:
        print("| " + " | ".join(r) + " |")
    cpu_table(lines)


def _us(d, *names):
    return " + ".join(fmt(d.get(n)) for n in names) if d else "-"


def cpu_table(lines):
    """Per streaming run: where the CPU went, per row, in the ceiling run and
    in the piperec run, and the ratio CPU alone predicts beside the measured
    one (bench_sweep.py predicted())."""
    runs = [l for l in lines if l.get("bench") == "sweep_stream" and l.get("cpu_us_per_row")]
    if not runs:
        return
    head = ["threads", "lines/msg", "consumers", "ceiling rows/s",
            "ceiling us/row: broker + ceiling (busiest thread, cores)", "busy, sat",
            "piperec rows/s", "piperec us/row: broker + piperec + trainer", "harness, other us/row",
            "busy, sat", "predicted: equal capacity", "predicted: CPU-bound", "measured",
            "predicted: busiest thread (16 cores)"]
    print()
    print("CPU per row (us) of every process over each run's window; busy = the machine's "
          "busy share, sat = saturation (involved CPU / available cores)")
    print()
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for l in runs:
        cu, pu = l.get("ceiling_cpu_us_per_row") or {}, l["cpu_us_per_row"]
        bt = l.get("ceiling_busiest_thread_cores") or {}
        r = [str(l["threads"]), str(l["lines_per_message"]), str(l.get("consumers")),
             fmt(l.get("ceiling_rows_per_s")),
             "%s = %s (%s, %s)" % (_us(cu, "broker", "ceiling"), fmt(l.get("ceiling_involved_us_per_row")),
                                   fmt(bt.get("broker")), fmt(bt.get("ceiling"))),
             "%s, %s" % (fmt(l.get("ceiling_busy_share")), fmt(l.get("ceiling_saturation"))),
             fmt(l.get("rows_per_s")),
             "%s = %s" % (_us(pu, "broker", "piperec", "trainer"), fmt(l.get("involved_us_per_row"))),
             _us(pu, "harness", "other").replace(" + ", ", "),
             "%s, %s" % (fmt(l.get("busy_share")), fmt(l.get("saturation"))),
             fmt(l.get("predicted_ratio_equal_capacity")), fmt(l.get("predicted_ratio_cpu_bound")),
             fmt(l.get("ratio_piperec_over_ceiling")), fmt(l.get("predicted_ratio_serial"))]
        print("| " + " | ".join(r) + " |")


def main():
    if len(sys.argv) in (6, 7) and sys.argv[1] == "poll":
        poll(*sys.argv[2:])
    elif len(sys.argv) >= 4 and sys.argv[1] == "watch":
        watch(*sys.argv[2:])
    elif len(sys.argv) in (4, 5) and sys.argv[1] == "states":
        states(*sys.argv[2:])
    elif len(sys.argv) in (5, 6) and sys.argv[1] == "fields":
        run_fields(*sys.argv[2:])
    elif len(sys.argv) >= 4 and sys.argv[1] == "timed":
        timed(sys.argv[2], sys.argv[3:])
    elif len(sys.argv) == 6 and sys.argv[1] == "fresh":
        fresh(*sys.argv[2:6])
    elif len(sys.argv) == 3 and sys.argv[1] == "summary":
        summary(sys.argv[2])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
