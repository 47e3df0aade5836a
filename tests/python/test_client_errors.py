"""Issue 22, "a server that goes away raises a ConnectionError naming the
endpoint and what happened, from every path": the paths before a
subscription is up. Stand-in servers (a thread on a loopback socket) that
stay silent, reset the connection during the TLS handshake, send a frame
no piperec sends, or refuse the subscription; and a connect that times out.
Each error names the endpoint, keeps its type (StreamDataset retries on a
refused, reset or timed-out connection by type) and leaves no socket open.
"""

import os
import socket
import struct
import sys
import threading
import time

import pytest

SRC = os.environ.get("PR_SOURCE_DIR", os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))
sys.path.insert(0, os.path.join(SRC, "clients", "python"))

import piperec_client as pc  # noqa: E402


def _one_connection(serve):
    """A stand-in server on a loopback port: accepts one connection and runs
    serve(socket) on it in a thread; returns (endpoint, thread)."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)

    def run():
        s, _ = srv.accept()
        srv.close()
        serve(s)
    t = threading.Thread(target=run, daemon=True)
    t.start()
    return "127.0.0.1:%d" % srv.getsockname()[1], t


def _server(mode):
    """A one-connection stand-in server doing `mode`; returns (endpoint, thread)."""
    def run(s):
        if mode == "silent":  # accepts, never answers the Subscribe
            time.sleep(2.5)
        elif mode == "garbage":  # a length prefix no piperec frame has
            s.recv(4096)
            s.sendall(b"\xff\xff\xff\xff" + b"x" * 64)
            time.sleep(0.5)
        elif mode == "http":  # an HTTP server: its answer reads as a ~1.3 GB frame
            s.recv(4096)
            s.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
            time.sleep(0.5)
        elif mode == "refuse":  # Error{UNKNOWN_PIPELINE}
            s.recv(4096)
            body = pc._field_varint(1, 3) + pc._field_bytes(2, b"no pipeline 'p'")
            s.sendall(pc._frame(pc.F_ERROR, body))
            time.sleep(0.5)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.close()  # "reset" closes at once with RST: like a killed server
    return _one_connection(run)


@pytest.mark.parametrize("mode,kw,etype", [
    ("silent", {"timeout": 1.0}, TimeoutError),
    ("reset", {"tls": True}, ConnectionError),
    ("garbage", {}, ValueError),
    ("http", {}, ValueError),
    ("refuse", {}, pc.ServerError),
])
def test_subscribe_errors_name_the_endpoint(mode, kw, etype, monkeypatch):
    # the client's connected socket, to see it closed after the failure (taken
    # where it is made: a reset can already fail the connect's own setsockopt)
    socks = []
    create = socket.create_connection
    monkeypatch.setattr(socket, "create_connection",
                        lambda *a, **kw: socks.append(create(*a, **kw)) or socks[-1])
    addr, t = _server(mode)
    with pytest.raises(etype) as ei:
        pc.TrainerClient(addr, "p", **kw)
    t.join()
    msg = "%s: %s" % (type(ei.value).__name__, ei.value)
    print(mode, "->", msg)
    assert addr in msg, msg
    # the failed handshake closed its socket; under load a "reset" can come
    # before the connect has finished (SO_ERROR is ECONNRESET), and then
    # create_connection itself failed and closed its socket: none came back
    assert len(socks) == 1 or (mode == "reset" and not socks), socks
    assert all(s.fileno() == -1 for s in socks)


def test_connect_timeout_names_the_endpoint(monkeypatch):
    # No host that black-holes SYNs is reachable from CI: the connect's
    # timeout is simulated where the client makes the connection.
    def timed_out(*a, **kw):
        raise socket.timeout("timed out")
    monkeypatch.setattr(socket, "create_connection", timed_out)
    with pytest.raises(socket.timeout) as ei:  # the type StreamDataset retries on
        pc.TrainerClient("192.0.2.1:7070", "p", timeout=0.5)
    assert "192.0.2.1:7070" in str(ei.value) and "connecting" in str(ei.value), str(ei.value)


def test_refused_keeps_type_and_names_the_endpoint():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    addr = "127.0.0.1:%d" % s.getsockname()[1]
    s.close()  # nothing listens there now
    with pytest.raises(ConnectionRefusedError) as ei:
        pc.TrainerClient(addr, "p", timeout=1.0)
    assert addr in str(ei.value), str(ei.value)


def _stream_server(end):
    """A stand-in that subscribes the client (SubscribeOk, 4 credits) and then
    ends the stream: "stop" sends the Error{SHUTDOWN} a stopping piperec sends,
    "killed" resets the connection as a killed server's kernel would."""
    def run(s):
        n = struct.unpack("<I", s.recv(4))[0]
        while n > 0:
            n -= len(s.recv(n))
        s.sendall(pc._frame(pc.F_SUBSCRIBE_OK, pc._field_varint(8, 4)))
        time.sleep(0.2)
        if end == "stop":
            body = pc._field_varint(1, 7) + pc._field_bytes(2, b"server is stopping")
            s.sendall(pc._frame(pc.F_ERROR, body))
            time.sleep(0.2)
        else:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.close()
    return _one_connection(run)


@pytest.mark.parametrize("end", ["stop", "killed"])
@pytest.mark.parametrize("reader", ["numpy", "protobuf", "raw"])
def test_a_killed_server_is_not_the_end_of_the_stream(end, reader):
    # A crash must never look like a finished stream: only the server's
    # SHUTDOWN notice ends a loop quietly (numpy batches(), StreamDataset in
    # both layouts); a reset raises ConnectionClosed naming the endpoint.
    addr, t = _stream_server(end)
    def loop():
        if reader == "numpy":
            with pc.TrainerClient(addr, "p") as c:
                return sum(1 for _ in c.batches(timeout=10))
        from piperec.torch import StreamDataset
        return sum(1 for _ in StreamDataset(addr, "p", layout=reader, idle_timeout=10))
    if end == "stop":
        assert loop() == 0
    else:
        with pytest.raises(ConnectionError) as ei:
            loop()
        assert addr in str(ei.value), ei.value
    t.join()


def test_an_endpoint_without_a_port_says_what_is_expected():
    with pytest.raises(ValueError) as ei:
        pc.TrainerClient("127.0.0.1", "p")
    assert "expected HOST:PORT" in str(ei.value), ei.value


def test_a_peer_that_is_not_piperec_is_refused_before_allocating():
    # the length of an HTTP answer's first 4 bytes is ~1.3 GB: refused at
    # once ("not a piperec trainer port?"), nothing allocated for it
    import resource
    addr, t = _server("http")
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(ValueError) as ei:
        pc.TrainerClient(addr, "p")
    t.join()
    assert "not a piperec trainer port?" in str(ei.value), ei.value
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 200 * 1024  # KiB
