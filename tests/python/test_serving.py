"""piperec.serving: a request's events come back from ``piperec serve`` as the
batch training had for them (docs/serving.md).

For the same events, FileDataset over ``piperec process``'s output (what the
model trained on) and ServeClient.batch over ``piperec serve`` with that
output's vocabulary must hold the same tensors: a declared schema with lists,
a cross, hashes and a weighted list with a dense vector (jagged), and the
Criteo layout; a rejected event raises TransformError naming it; rows from
``piperec transform`` give the same batch; delimited framing encodes."""
import json
import os
import random
import signal
import subprocess
import threading

import pytest
import torch

from piperec import FileDataset
from piperec.serving import ServeClient, TransformError, encode_events, rows_to_batch
from piperec.torch import _sf_parts

SRC = os.environ.get("PR_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
EXAMPLE = os.path.join(SRC, "examples", "clickstream.yaml")
WV = """pipelines:
  - name: wv
    source: { format: json, kafka: { topics: [t], properties: { bootstrap.servers: "127.0.0.1:9" } } }
    schema:
      labels: [ { name: y, path: y, default: 0 } ]
      dense:
        - { name: emb, path: emb, dim: 3 }
        - { name: x, path: x, default: 0, ops: [log1p] }
      sparse:
        - { name: u, path: u, ops: [vocab] }
        - { name: v, path: v, ops: [vocab], table: u }
        - { name: cats, path: cats, list: { max_len: 4, from: keys },
            weights: { from: values, default: 0 }, ops: [vocab] }
    transform: { vocab: { profile: default } }
"""


def piperec():
    p = os.environ.get("PIPEREC")
    if not p:
        pytest.skip("PIPEREC not set: run through ctest")
    return p


def run(*args, stdin=None):
    p = subprocess.run([piperec()] + list(args), input=stdin, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    return p.stdout


@pytest.fixture
def serve():
    procs = []

    def start(config, vocab, scheme="http", threads=1):
        args = [piperec(), "serve", "--vocab", vocab, "--listen", "127.0.0.1:0", "--reload-s",
                "0", "--threads", str(threads)] + (["--config", config] if config else [])
        p = subprocess.Popen(args, stderr=subprocess.PIPE, text=True)
        procs.append(p)
        line = p.stderr.readline()
        at = "listening on %s://127.0.0.1:" % scheme
        assert at in line, line
        return "%s://127.0.0.1:%s" % (scheme, line.split(at)[1].split()[0])

    yield start
    for p in procs:
        p.send_signal(signal.SIGTERM)
        p.wait(timeout=20)


def same(a, b):
    assert a.keys == b.keys
    assert list(a.vocab_sizes) == list(b.vocab_sizes)
    assert list(a.feature_tables) == list(b.feature_tables)
    assert a.jagged == b.jagged
    assert list(a.label_names) == list(b.label_names)
    assert list(a.dense_names) == list(b.dense_names)
    assert list(a.weighted_keys) == list(b.weighted_keys)
    assert torch.equal(a.labels, b.labels)
    assert torch.allclose(a.dense, b.dense, rtol=0, atol=0, equal_nan=True)
    va, la, wa = _sf_parts(a.sparse_features)
    vb, lb, wb = _sf_parts(b.sparse_features)
    assert torch.equal(va, vb) and torch.equal(la.int(), lb.int())
    assert (wa is None) == (wb is None)
    if wa is not None:
        assert torch.equal(wa, wb)
    if a.sparse is not None or b.sparse is not None:
        assert torch.equal(a.sparse, b.sparse)


def train_batch(out, n):
    ds = FileDataset(out, batch_size=n, sparse_format="triple")
    return next(iter(ds))


def test_clickstream_equals_training(tmp_path, serve):
    ev = tmp_path / "ev.jsonl"
    run("gen", "--format", "json", "--rows", "300", "--seed", "4", "--output", str(ev))
    out = tmp_path / "out"
    run("process", "--config", EXAMPLE, "--input", str(ev), "--output", str(out), "--no-progress")
    events = [json.loads(l) for l in open(ev) if l.strip()]
    client = ServeClient(serve(EXAMPLE, str(out)))
    assert client.status()["layouts"] == ["json", "raw"]
    got = client.batch(events, sparse_format="triple")  # the raw layout
    same(got, train_batch(str(out), len(events)))
    same(client.batch(events, sparse_format="triple", wire="json"), got)
    # piperec transform's rows give the same batch
    rows = [json.loads(l) for l in
            run("transform", "--config", EXAMPLE, "--vocab", str(out), "--input", str(ev))
            .splitlines()]
    st = client.status()
    same(rows_to_batch(rows, sparse_format="triple", vocab_sizes=st["vocab_sizes"],
                       feature_tables=st.get("feature_tables")), got)
    # a rejected event is named, by both wires
    for wire, n, rows in (("raw", 1, 0), ("json", 2, 2)):
        before = client.status()
        with pytest.raises(TransformError) as e:
            client.batch([events[0], "{not json", events[1]], wire=wire)
        assert e.value.errors == [(1, "not_json", "key expected at byte 1")]
        st = client.status()
        assert st["rejected"] == n and st["events"] == before["events"] + 3
        assert st["rows"] == before["rows"] + rows  # raw: no row went out


def test_raw_over_blocks(tmp_path, serve):
    """A raw answer of 2500 events: three blocks of the transform into one
    batch that grows twice (from 1024 rows), equal to training's."""
    ev = tmp_path / "ev.jsonl"
    run("gen", "--format", "json", "--rows", "2500", "--seed", "8", "--output", str(ev))
    out = tmp_path / "out"
    run("process", "--config", EXAMPLE, "--input", str(ev), "--output", str(out), "--no-progress")
    events = [json.loads(l) for l in open(ev) if l.strip()]
    got = ServeClient(serve(EXAMPLE, str(out))).batch(events, sparse_format="triple")
    assert got.rows == 2500
    same(got, train_batch(str(out), len(events)))


def ids_by_row(batch, n):
    """{key: [the ids of row i] for i < n} of a key-major jagged batch."""
    values, lengths, _ = _sf_parts(batch.sparse_features)
    values, lengths = values.tolist(), lengths.tolist()
    out, at = {}, 0
    for k, key in enumerate(batch.keys):
        rows = []
        for i in range(n):
            ln = lengths[k * n + i]
            rows.append(values[at:at + ln])
            at += ln
        out[key] = rows
    return out


def test_client_shared_by_threads(tmp_path, serve):
    """One ServeClient used by 6 threads at once against serve --threads 3:
    each thread's batches equal the rows of one batch of all the events,
    itself equal to training's."""
    ev = tmp_path / "ev.jsonl"
    run("gen", "--format", "json", "--rows", "600", "--seed", "9", "--output", str(ev))
    out = tmp_path / "out"
    run("process", "--config", EXAMPLE, "--input", str(ev), "--output", str(out), "--no-progress")
    events = [json.loads(l) for l in open(ev) if l.strip()]
    client = ServeClient(serve(EXAMPLE, str(out), threads=3))
    assert client.status()["threads"] == 3
    want = client.batch(events, sparse_format="triple")
    same(want, train_batch(str(out), len(events)))
    want_ids = ids_by_row(want, len(events))
    wrong, posted = [], []

    def worker(k):
        rng = random.Random(k)
        for _ in range(25):
            a = rng.randrange(len(events))
            b = min(len(events), a + rng.randint(1, 40))
            got = client.batch(events[a:b], sparse_format="triple")
            posted.append(b - a)
            ids = ids_by_row(got, b - a)
            if not torch.equal(got.labels, want.labels[a:b]) or \
                    not torch.allclose(got.dense, want.dense[a:b], rtol=0, atol=0,
                                       equal_nan=True) or \
                    any(ids[key] != want_ids[key][a:b] for key in want.keys):
                wrong.append((k, a, b))

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert wrong == []
    assert len(posted) == 150
    assert client.status()["events"] == len(events) + sum(posted)
    # close() from here closes the workers' connections too; a generator is events
    assert len(client._conns) == 7
    client.close()
    assert not client._conns
    got = client.batch(e for e in events[:5])
    assert got.rows == 5 and len(client._conns) == 1


def test_weights_vectors_equal_training(tmp_path, serve):
    cfg = tmp_path / "wv.yaml"
    cfg.write_text(WV)
    evs = [{"y": 1, "emb": [0.5, -1.25, 3], "x": 2.5, "u": "a", "v": "c",
            "cats": {"p": 2.5, "q": 0.1}},
           {"y": 0, "emb": [1, 2, 3.75], "u": "b", "v": "a", "cats": {"q": 7, "r": 1e-3, "p": 0}},
           {"y": 0, "emb": [0, 0, 0], "x": 0.125, "u": "a", "v": "b", "cats": {}}]
    ev = tmp_path / "wv.jsonl"
    ev.write_text("".join(json.dumps(e) + "\n" for e in evs))
    out = tmp_path / "out"
    run("process", "--config", str(cfg), "--input", str(ev), "--output", str(out), "--no-progress")
    client = ServeClient(serve(str(cfg), str(out)))
    got = client.batch(evs, sparse_format="triple")
    same(got, train_batch(str(out), len(evs)))
    same(client.batch(evs, sparse_format="triple", wire="json"), got)
    assert got.dense_names == ["emb[0]", "emb[1]", "emb[2]", "x"]
    assert got.weighted_keys == ["cats"]
    assert got.feature_tables == ["u", "u", "cats"]  # v shares u's table
    vb, _, _ = _sf_parts(got.sparse_features)
    assert vb[3:6].tolist() == [3, 2, 4]  # v's ids in u's table: c new, a and b known


def test_criteo_equals_training(tmp_path, serve):
    tsv = os.path.join(SRC, "tests", "data", "criteo_sample_100.tsv")
    out = tmp_path / "out"
    run("process", "--input", tsv, "--output", str(out), "--no-progress")
    lines = [l.rstrip("\n") for l in open(tsv)]
    client = ServeClient(serve(None, str(out)))
    got = client.batch(lines, sparse_format="triple")
    same(got, train_batch(str(out), len(lines)))
    same(client.batch(lines, sparse_format="triple", wire="json"), got)
    assert got.sparse.shape == (len(lines), 26)


def test_encode_events():
    assert encode_events([b"ab", b""], "delimited") == b"\x02ab\x00"
    assert encode_events([b"x" * 200], "delimited")[:2] == b"\xc8\x01"
    assert encode_events([{"a": 1}, "b"], "lines") == b'{"a":1}\nb\n'
    with pytest.raises(ValueError):
        encode_events(["a\nb"], "lines")


def make_certs(d):
    """A CA, a server certificate for 127.0.0.1 and a client certificate it signed
    (the openssl CLI, as the other TLS tests)."""
    script = """set -e; cd %s; exec >/dev/null 2>&1
ca() { openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout $1.key -out $1.crt -days 2 -subj /CN=$1; }
leaf() { openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout $1.key -out $1.csr -subj /CN=$1;
  printf "$2" > $1.ext;
  openssl x509 -req -in $1.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out $1.crt -days 2 -extfile $1.ext; }
ca ca
leaf server 'subjectAltName=IP:127.0.0.1,DNS:localhost\\nextendedKeyUsage=serverAuth\\n'
leaf client 'extendedKeyUsage=clientAuth\\n'
""" % d
    subprocess.run(["sh", "-c", script], check=True)


def test_mutual_tls(tmp_path, serve):
    """serve over HTTPS with a client CA (http.tls): ServeClient with the client's
    certificate gets the batch; without one it is refused."""
    import ssl
    make_certs(str(tmp_path))
    cfg = tmp_path / "tls.yaml"
    cfg.write_text(WV + "http:\n  tls: { cert_file: %s/server.crt, key_file: %s/server.key, "
                   "ca_file: %s/ca.crt }\n" % ((tmp_path,) * 3))
    evs = [{"y": 1, "emb": [0.5, -1.25, 3], "u": "a", "v": "b", "cats": {"p": 1}}]
    ev = tmp_path / "ev.jsonl"
    ev.write_text(json.dumps(evs[0]) + "\n")
    out = tmp_path / "out"
    run("process", "--config", str(cfg), "--input", str(ev), "--output", str(out), "--no-progress")
    url = serve(str(cfg), str(out), scheme="https")
    ctx = ssl.create_default_context(cafile=str(tmp_path / "ca.crt"))
    ctx.load_cert_chain(str(tmp_path / "client.crt"), str(tmp_path / "client.key"))
    got = ServeClient(url, ssl_context=ctx).batch(evs, sparse_format="triple")
    same(got, train_batch(str(out), 1))
    bare = ssl.create_default_context(cafile=str(tmp_path / "ca.crt"))
    with pytest.raises(RuntimeError) as e:
        ServeClient(url, ssl_context=bare).rows(evs)
    assert "HTTP 403" in str(e.value), e.value  # refused before the body is read
