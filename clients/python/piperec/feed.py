"""piperec.feed — the raw-layout receive path of ``StreamDataset`` (issue 22).

Batches of the raw tensor layout (docs/trainer-protocol.md, "Raw batch
layout") are received by one background thread per connection straight
into a ring of preallocated buffers (page-locked when CUDA is available, so
a host-to-device copy reads them directly), and handed out as numpy views:
no per-batch allocation once the buffers have grown to the largest batch,
no decoding, no copy on the host.

Why a thread and not DataLoader worker processes: a worker hands each batch
to the main process through shared memory and pickling, which costs more
than receiving it; the socket reads here release the GIL, so one thread per
connection keeps the wire busy while the training loop runs.

Ownership: a buffer ("slot") belongs to the receive thread until a batch
lands in it, then to the consumer until :meth:`RawFeed.release`, which the
consumer calls once the batch is acknowledged and, on the GPU path, its
copy has finished (the caller waits on the copy's event first). On the
host the training loop holds views on the slot itself: the consumer leases
the slot to them (``_Slot.leases``, weak references to the arrays the views
were made from), and a released slot whose views are still alive is set
aside rather than refilled; the ring takes it back once they are gone and,
when every free slot is set aside, adds one. So a batch the loop keeps
never changes under it, and memory follows what it keeps. All socket
I/O of a connection (receive, Pong, Ack, CheckpointCommit) happens on its
thread, so TLS connections are never used from two threads at once; the
consumer queues acks and commits and wakes the thread through a pipe.

:class:`InlineFeed` is the same ring without the thread: the consumer's
own thread receives (StreamDataset's host path, ``device`` None, by
default): on the host there is no device copy to overlap, and the thread's
hand-off of each batch cost more than the overlap bought (bench/RESULTS.md,
"Issue 22: the host path receives on the consumer's thread").
"""

import os
import queue
import select
import threading
import time
import weakref
from collections import deque

import numpy as np

from piperec_client import RAW_UNIT, RAW_VALUES32, ConnectionClosed

__all__ = ["RawFeed", "InlineFeed", "widen"]

_ALIGN = 64


def _host_array(n, dtype, pin, torch_mod):
    """A numpy array of n `dtype` items (a torch tensor's memory, page-locked
    when `pin`, when torch is given)."""
    if torch_mod is not None:
        tdt = {np.int64: torch_mod.int64, np.int32: torch_mod.int32}[dtype]
        return torch_mod.empty(n, dtype=tdt, pin_memory=pin).numpy()
    return np.empty(n, dtype)


class _Slot:
    """One receive buffer: `mem` (a torch uint8 tensor when torch is given,
    else a numpy array), grown on demand, and a 64-byte aligned numpy view.

    `wide` and `ones`: the slot's int64 values and int32 all-ones lengths
    for a batch that came compact on the wire but is handed out in the
    default raw form (StreamDataset(compact_wire=True), the default): they
    belong to the slot, so they live exactly as long as its batch's views."""

    __slots__ = ("mem", "view", "cap", "used", "event", "grows", "wide", "ones", "leases")

    def __init__(self):
        self.mem, self.view, self.cap, self.used, self.event, self.grows = None, None, 0, False, None, 0
        self.wide = self.ones = None
        self.leases = None  # weak references to the arrays the loop's views were made from

    def lease(self, arrays):
        """Lease the slot to the arrays (numpy; None skipped) that the
        consumer's views were made from, all in the slot's memory: weak
        references, so the slot knows when they are gone."""
        self.leases = tuple(weakref.ref(a) for a in arrays if a is not None) or None

    def leased(self):
        """Does a view the consumer handed out still use this slot?"""
        return self.leases is not None and any(r() is not None for r in self.leases)

    def widened(self, n_values, n_lengths, pin, torch_mod):
        """(int64 [n_values] to write into, int32 [n_lengths] of ones): the
        ones are written when the array is (re)allocated, not per batch."""
        if self.wide is None or len(self.wide) < n_values:
            self.wide = _host_array(n_values + n_values // 4, np.int64, pin, torch_mod)
        if self.ones is None or len(self.ones) < n_lengths:
            self.ones = _host_array(n_lengths + n_lengths // 4, np.int32, pin, torch_mod)
            self.ones.fill(1)
        return self.wide[:n_values], self.ones[:n_lengths]

    def alloc(self, n, pin, torch_mod):
        """A writable memoryview of n bytes at a 64-byte aligned address."""
        self.used = True
        if n > self.cap:
            cap = max(n + n // 4, 1 << 16)  # headroom: batches vary in size (jagged, deadline)
            if torch_mod is not None:
                self.mem = torch_mod.empty(cap + _ALIGN, dtype=torch_mod.uint8, pin_memory=pin)
                arr = self.mem.numpy()
            else:
                self.mem = arr = np.empty(cap + _ALIGN, np.uint8)
            skip = (-arr.ctypes.data) % _ALIGN
            self.view, self.cap = arr[skip:skip + cap], cap
            self.grows += 1
        return memoryview(self.view)[:n]


def widen(b, slot=None, pin=False, torch_mod=None):
    """Turn a Criteo batch that came compact on the wire (flags 8 and/or 16)
    into the default raw form in place: ``values`` (and ``sparse``) int64,
    ``lengths`` int32 ones, on `slot`'s arrays (fresh ones without a slot),
    and those flags cleared from ``b.raw_flags``. Other batches: untouched.
    One memory-bound pass over the values (4096 rows: 30-50 us on a quiet
    core, 150-230 us on the loaded 2-core CI box; bench/RESULTS.md)."""
    flags = b.raw_flags & (RAW_UNIT | RAW_VALUES32)
    if not flags or b.jagged or b.layout != "raw":
        return b
    nv, nl = len(b._values), b.n_sparse * b.rows
    if slot is not None:
        wide, ones = slot.widened(nv, nl, pin, torch_mod)
    else:
        wide, ones = np.empty(nv, np.int64), np.ones(nl, np.int32)
    if flags & RAW_VALUES32:
        np.copyto(wide, b._values, casting="safe")
        b._values, b.sparse_width = wide, 8
        b.sparse = wide.reshape(b.n_sparse, b.rows).T
    if flags & RAW_UNIT:
        b._lengths = ones
    b.raw_flags &= ~flags
    return b


def _settle(feed, slot, b):
    """A received frame's slot as the batch keeps it: none for a small frame
    (decoded from its own bytes; the slot goes back to `feed`), and the
    compact wire's values widened into it when `feed` widens."""
    if not slot.used:
        feed.release(slot)
        slot = None
    if feed._wide and b.raw_flags:
        widen(b, slot, feed._pin, feed._torch)
    return slot


def _give_back(feed, slot):
    """A released slot into the ring's free list, or set aside while a view
    on it lives (see "Ownership" above). The caller holds the feed's lock."""
    slot.event = None
    if slot.leased():
        feed._held.append(slot)
    else:
        slot.leases = None
        feed._free.append(slot)


def _free_slot(feed, grow=False):
    """The next free slot, taken (the caller holds the feed's lock). Set-aside
    slots whose views are gone come back first, as the most recently used
    (in a loop that drops each batch after its step, the batch before the
    last: the loop variable held it when it was released); with every free
    slot set aside (or none free at all, with `grow`) the ring grows by one.
    None when the ring is simply busy."""
    if feed._held:
        held, feed._held = feed._held, []
        for s in held:
            if s.leased():
                feed._held.append(s)
            else:
                s.leases = None
                feed._free.append(s)
    if not feed._free:
        if not (grow or feed._held):
            return None
        feed.slots.append(_Slot())
        feed._free.append(feed.slots[-1])
    slot = feed._free.pop()  # the slot released last: still in cache
    slot.used = False
    return slot


class _Conn:
    """One connection and its receive thread's state."""

    def __init__(self, endpoint, client):
        self.endpoint, self.client = endpoint, client
        self.outbox = deque()  # (kind, payload, done Event or None)
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_r, False)
        os.set_blocking(self.wake_w, False)
        self.error = None
        self.thread = None
        self.slot = None  # slot holding a partially received frame
        self.sleeping = False  # the thread is (about to be) in select()

    def wake(self):
        """Wake the thread when it waits in select() (`sleeping`); else it
        sees the outbox and the free slots at its next turn anyway."""
        if not self.sleeping:
            return
        try:
            os.write(self.wake_w, b"x")
        except (BlockingIOError, OSError):
            pass  # a full pipe wakes the thread anyway

    def close(self):
        for fd in (self.wake_r, self.wake_w):
            try:
                os.close(fd)
            except OSError:
                pass


class RawFeed:
    """Receive threads over `clients` ([(endpoint, TrainerClient)], each
    subscribed with layout="raw") feeding one queue of (conn, slot, Batch).

    n_slots: buffers in the ring (default: the sum of the granted credit
    windows + 1: the server never has more batches in flight to us).
    pin: page-locked buffers (torch needed). torch_mod: the torch module, or
    None for plain numpy buffers. wide: the receive thread widens batches
    that came compact on the wire into the default raw form (:func:`widen`,
    on the slot's arrays) before queueing them: done there, the values are
    still in cache from the receive, and the consumer thread is spared."""

    def __init__(self, clients, pin=False, torch_mod=None, n_slots=None, poll_s=0.5, wide=False):
        self.conns = [_Conn(ep, c) for ep, c in clients]
        if n_slots is None:
            n_slots = sum(int(c.client.info.get("credits") or 8) for c in self.conns) + 1
        self.slots = [_Slot() for _ in range(n_slots)]
        self._free = deque(self.slots)
        self._held = []  # released, but a view on each still lives
        self._mu = threading.Lock()
        self._out = queue.Queue()
        self._stop = False
        self._pin, self._torch, self._poll, self._wide = pin, torch_mod, poll_s, wide
        for c in self.conns:
            c.thread = threading.Thread(target=self._run, args=(c,), daemon=True,
                                        name="piperec-recv-%s" % c.endpoint)
            c.thread.start()

    # -- consumer side (the training loop's thread)

    def next(self, timeout=None):
        """(conn, slot, Batch), or None after `timeout` idle seconds or when
        every connection has ended. A connection that ends puts its error
        (ConnectionClosed, ServerError, or what else stopped its thread,
        e.g. a ValueError for a malformed frame) in the queue: it is returned as
        (conn, None, exception) for the caller to decide. `slot` is None for
        a batch small enough to be decoded from its own bytes."""
        if all(c.thread is None for c in self.conns):
            return None
        try:
            item = self._out.get(timeout=timeout)
        except queue.Empty:
            return None
        if isinstance(item[2], BaseException):
            item[0].thread = None
        return item

    def ack(self, conn, *seqs):
        """Queue an Ack on conn's thread."""
        if conn.error is None:
            conn.outbox.append(("ack", seqs, None))
            conn.wake()

    def commit(self, conn, position, checkpoint_id, timeout=10.0):
        """Send a CheckpointCommit on conn's thread and wait until it is
        written; raises the connection's error (ConnectionClosed naming the
        endpoint) when it could not be."""
        if conn.error is not None:
            raise conn.error
        done = threading.Event()
        conn.outbox.append(("commit", (position, checkpoint_id), done))
        conn.wake()
        if not done.wait(timeout):
            raise TimeoutError("piperec at %s: CheckpointCommit not written in %.0f s"
                               % (conn.endpoint, timeout))
        if conn.error is not None:
            raise conn.error

    def release(self, slot):
        """Give a slot back to the ring (its batch acked, its copy done)."""
        if slot is None:
            return
        with self._mu:
            _give_back(self, slot)
        for c in self.conns:
            c.wake()

    def close(self):
        self._stop = True
        for c in self.conns:
            c.wake()
        for c in self.conns:
            t = c.thread
            if t is not None and t is not threading.current_thread():
                t.join(timeout=5)
            c.close()

    # -- receive threads

    def _take_slot(self, conn):
        if conn.slot is not None:
            return conn.slot
        with self._mu:
            conn.slot = _free_slot(self)
        return conn.slot

    def _flush(self, conn):
        while conn.outbox:
            kind, arg, done = conn.outbox.popleft()
            try:
                if kind == "ack":
                    conn.client.ack(*arg)
                else:
                    conn.client.commit_checkpoint(*arg)
            finally:
                if done is not None:
                    done.set()

    def _drain_wake(self, conn):
        try:
            while os.read(conn.wake_r, 4096):
                pass
        except (BlockingIOError, OSError):
            pass

    @staticmethod
    def _has_input(client):
        if client._frame is not None or len(client._buf) >= 4:
            return True
        pending = getattr(client.sock, "pending", None)  # TLS: decrypted bytes select() misses
        return bool(pending and pending())

    def _run(self, conn):
        client = conn.client
        try:
            while True:
                self._flush(conn)  # first: acks queued before close() still go out
                if self._stop:
                    break
                slot = self._take_slot(conn)
                if slot is None or not self._has_input(client):
                    # Publish `sleeping` first, then look again: a producer
                    # that queued before seeing it set is seen here, one
                    # that queued after writes to the pipe.
                    conn.sleeping = True
                    if conn.outbox or self._stop or (slot is None and (self._free or self._held)):
                        conn.sleeping = False
                        continue
                    fds = [conn.wake_r] if slot is None else [conn.wake_r, client.sock]
                    ready = select.select(fds, [], [], self._poll)[0]
                    conn.sleeping = False
                    if conn.wake_r in ready:
                        self._drain_wake(conn)
                    if slot is None or client.sock not in ready:
                        continue
                b = client.recv(timeout=0.2, into=lambda n: slot.alloc(n, self._pin, self._torch))
                if b is None:
                    continue  # a frame in progress keeps its slot (conn.slot)
                conn.slot = None
                self._out.put((conn, _settle(self, slot, b), b))
        except Exception as e:  # noqa: BLE001 — any failure ends the connection, and is reported
            if isinstance(e, OSError) and not isinstance(e, ConnectionError):
                e = ConnectionClosed("piperec at %s: %s" % (conn.endpoint, e))
            conn.error = e
            while conn.outbox:  # wake committers waiting on a dead connection
                done = conn.outbox.popleft()[2]
                if done is not None:
                    done.set()
            self._out.put((conn, None, e))
        finally:
            if conn.slot is not None:
                self.release(conn.slot)
                conn.slot = None


class _InConn:
    """One connection of an :class:`InlineFeed`: the names RawFeed's
    connections have where the dataset reads them (endpoint, client,
    error), and its partially received frame's slot."""

    __slots__ = ("endpoint", "client", "error", "ended", "slot")

    def __init__(self, endpoint, client):
        self.endpoint, self.client = endpoint, client
        self.error, self.ended, self.slot = None, False, None


class InlineFeed:
    """The raw-layout receive path without a receive thread: RawFeed's
    interface (next, ack, commit, release, close, conns, slots), but every
    receive, Pong, Ack and CheckpointCommit runs on the caller's thread.

    Why: on the host path (no device copy to overlap) the receive thread's
    hand-off of each batch (a queue, the GIL passing between two threads,
    futex wakes: ~200-250 us a batch on the 2-core CI box, bench/RESULTS.md)
    cost more than the overlap of receive and training step bought. What it
    trades: while the training step runs nothing reads the socket (the
    kernel's socket buffer and the server's credit window still hold the
    next batches), and Pings are answered at the next batch asked for (the
    server waits sinks.trainer.idle_timeout_ms, 60 s by default, as for
    the TrainingBatch path). Same ring of slots, same widening, same
    ownership rule: a slot is the consumer's from next() to release()."""

    def __init__(self, clients, pin=False, torch_mod=None, n_slots=None, wide=False):
        self.conns = [_InConn(ep, c) for ep, c in clients]
        if n_slots is None:
            n_slots = sum(int(c.client.info.get("credits") or 8) for c in self.conns) + 1
        self.slots = [_Slot() for _ in range(n_slots)]
        self._free = deque(self.slots)
        self._held = []  # released, but a view on each still lives
        self._pin, self._torch, self._wide = pin, torch_mod, wide
        self._rr = 0

    def _take_slot(self, conn):
        if conn.slot is None:
            # the slot released last: its buffer (and widened values) is
            # still in cache, where the oldest free one of a ring of
            # credits + 1 slots is not (a 4096-row Criteo batch is 1.5 MB);
            # growing without a set-aside slot is not reached: the credit
            # window bounds the slots held
            conn.slot = _free_slot(self, grow=True)
        return conn.slot

    def _pick(self, live, deadline):
        """(conn, receive timeout) to read next, or None when no connection
        has input before the deadline; round robin between ready ones."""
        if len(live) == 1:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            return live[0], left
        ready = [c for c in live if RawFeed._has_input(c.client)]
        if not ready:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            socks = select.select([c.client.sock for c in live], [], [], left)[0]
            ready = [c for c in live if c.client.sock in socks]
            if not ready:
                return None
        self._rr += 1
        return ready[self._rr % len(ready)], 0.05  # bytes are there: finish a frame or come back

    def _fail(self, conn, e):
        if isinstance(e, OSError) and not isinstance(e, ConnectionError):
            e = ConnectionClosed("piperec at %s: %s" % (conn.endpoint, e))
        conn.error, conn.ended = e, True
        if conn.slot is not None:
            self.release(conn.slot)
            conn.slot = None
        return conn, None, e

    def next(self, timeout=None):
        """As RawFeed.next: (conn, slot, Batch); (conn, None, exception) once
        for a connection that ended (also when an ack or a commit on it
        failed); None on `timeout` idle seconds or when every connection
        has ended."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            live = [c for c in self.conns if not c.ended]
            if not live:
                return None
            for c in live:
                if c.error is not None:
                    return self._fail(c, c.error)
            got = self._pick(live, deadline)
            if got is None:
                return None
            conn, t = got
            slot = self._take_slot(conn)
            try:
                b = conn.client.recv(timeout=t, into=lambda n: slot.alloc(n, self._pin, self._torch))
            except Exception as e:  # noqa: BLE001 — any failure ends the connection, and is reported
                return self._fail(conn, e)
            if b is None:  # timed out; a frame in progress keeps its slot (conn.slot)
                if len(live) == 1 or (deadline is not None and time.monotonic() >= deadline):
                    return None
                continue
            conn.slot = None
            return conn, _settle(self, slot, b), b

    def ack(self, conn, *seqs):
        """Send an Ack now; a failure is reported by the next next()."""
        if conn.error is None:
            try:
                conn.client.ack(*seqs)
            except OSError as e:
                conn.error = e

    def commit(self, conn, position, checkpoint_id, timeout=10.0):
        """Send a CheckpointCommit now; raises the connection's error
        (ConnectionClosed naming the endpoint) when it cannot be."""
        if conn.error is not None:
            raise conn.error
        try:
            conn.client.commit_checkpoint(position, checkpoint_id)
        except OSError as e:
            conn.error = e
            raise

    def release(self, slot):
        """Give a slot back to the ring (its batch acked)."""
        if slot is not None:
            _give_back(self, slot)

    def close(self):
        for c in self.conns:
            if c.slot is not None:
                self.release(c.slot)
                c.slot = None
