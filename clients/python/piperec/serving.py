"""piperec.serving — the model server's side of ``piperec serve``
(docs/serving.md): a request's events in, the batch the model was trained
on out.

A model trained on ``StreamDataset`` / ``FileDataset`` batches takes a
``StreamBatch``; ``ServeClient.batch(events)`` builds one from
``piperec serve``'s rows, laid out exactly as training lays it out: a
declared schema's jagged batch (``labels`` float32 [B, n_labels], ``dense``
float32 [B, n_dense] with a vector's NAME[c] columns, ``sparse_features`` a
KeyedJaggedTensor or JaggedSparse key-major with the true lengths and the
weights of weighted lists), or the Criteo layout (``sparse`` int64 [B, 26]).
So the model's forward, ``embedding_bag_inputs()`` and ``dense_feature()``
are the same code in training and in serving, and no feature is rebuilt in
the serving stack.

``ServeClient`` keeps one HTTP/1.1 connection per thread (standard library
only) and reconnects once when the server closed it. ``batch()`` asks for the
rows as one batch in the trainer stream's raw layout (``raw_to_batch``: no
JSON is parsed); ``rows()`` returns the rows as dicts (numpy-only code can
stop there); ``rows_to_batch()`` turns rows (from ``rows()`` or from
``piperec transform``'s output) into a StreamBatch and needs torch.
"""

import http.client
import json
import threading
import urllib.parse


class TransformError(ValueError):
    """Events piperec rejected: ``errors`` is [(index, reason, detail)], the
    index into the events given (the reason as in rejects.tsv)."""

    def __init__(self, errors):
        self.errors = errors
        first = errors[0]
        super().__init__("%d event(s) rejected; event %d: %s (%s)" % (
            len(errors), first[0], first[1], first[2]))


def _varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def encode_events(events, framing):
    """The request body of ``events`` (dicts are JSON-encoded, str encoded
    UTF-8, bytes taken as one record each) in ``framing``: "lines" joins
    them with newlines, "delimited" prefixes each with its LEB128 length."""
    recs = []
    for e in events:
        if isinstance(e, (bytes, bytearray, memoryview)):
            recs.append(bytes(e))
        elif isinstance(e, str):
            recs.append(e.encode())
        else:
            recs.append(json.dumps(e, separators=(",", ":")).encode())
    if framing == "lines":
        for r in recs:
            if b"\n" in r:
                raise ValueError("a record with a newline cannot go in lines framing")
        return b"".join(r + b"\n" for r in recs)
    if framing == "delimited":
        return b"".join(_varint(len(r)) + r for r in recs)
    raise ValueError("framing %r: lines or delimited" % (framing,))


class ServeClient:
    """A client of one ``piperec serve`` (``url``: http://HOST:PORT).

    One client may be shared by the threads of a model server: each thread
    gets its own keep-alive connection, so their requests run at once on the
    server's threads (``piperec serve --threads``)."""

    def __init__(self, url="http://127.0.0.1:9470", timeout=10.0, ssl_context=None):
        """ssl_context: for https, an ``ssl.SSLContext`` (the CA that signed
        the server's certificate; with mutual TLS, ``load_cert_chain`` of the
        client's certificate and key); None: the default context."""
        u = urllib.parse.urlsplit(url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError("url %r: http://HOST:PORT" % (url,))
        self._https = u.scheme == "https"
        self._host, self._port = u.hostname, u.port or (443 if self._https else 80)
        self._timeout = timeout
        self._ssl = ssl_context
        self._local = threading.local()  # .conn: this thread's connection
        self._conns, self._conns_lock = set(), threading.Lock()  # every thread's, for close()
        self._status = None

    def _connect(self):
        if self._https:
            return http.client.HTTPSConnection(self._host, self._port, timeout=self._timeout,
                                               context=self._ssl)
        return http.client.HTTPConnection(self._host, self._port, timeout=self._timeout)

    def _request(self, method, path, body=None, ok=(200,)):
        """The answer's body (a status in ``ok``; (status, body) when ``ok``
        has more than one); RuntimeError naming the status otherwise."""
        for attempt in (0, 1):
            conn = getattr(self._local, "conn", None)
            if conn is None:
                conn = self._local.conn = self._connect()
            with self._conns_lock:  # again after a close(): it reopens on this request
                self._conns.add(conn)
            try:
                conn.request(method, path, body)
                r = conn.getresponse()
                data = r.read()
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
                conn.close()
                self._local.conn = None
                with self._conns_lock:
                    self._conns.discard(conn)
                if attempt:
                    raise
                continue
            if r.status not in ok:
                raise RuntimeError("piperec serve: %s %s: HTTP %d: %s" % (
                    method, path, r.status, data.decode(errors="replace").strip()))
            return (r.status, data) if len(ok) > 1 else data
        raise AssertionError("unreachable")

    def status(self):
        """GET /v1/status as a dict (pipeline, format, profile, vocab, counts)."""
        return json.loads(self._request("GET", "/v1/status"))

    def _format(self):
        return self._layout_status()["format"]

    def _layout_status(self):
        if self._status is None:
            self._status = self.status()
        return self._status

    def refresh(self):
        """Read /v1/status again: the vocab_sizes a batch carries are those of
        the client's first request until then."""
        self._status = self.status()

    def rows(self, events, framing=None):
        """One dict per event, in order: a row ({"labels", "dense", "sparse"
        [, "weights"]}) or {"error", "detail"} for an event piperec
        rejected. framing: "lines" (JSON, Criteo TSV) or "delimited" (Avro,
        Protobuf records as bytes); default by the pipeline's format."""
        fmt = self._format()
        if framing is None:
            framing = "lines" if fmt in ("json", "criteo_tsv") else "delimited"
        body = encode_events(events, framing)
        data = self._request("POST", "/v1/transform?framing=" + framing, body)
        return [json.loads(l) for l in data.splitlines()]

    def batch(self, events, framing=None, sparse_format=None, wire=None):
        """The events as one StreamBatch laid out as training batches are;
        raises TransformError when piperec rejected some. wire: "raw" (the
        default when the server offers it, /v1/status "layouts"): the server
        sends the rows as one batch in the trainer stream's raw layout, with
        the vocab sizes and names of that moment (raw_to_batch), and nothing
        is parsed from JSON; "json": rows_to_batch over rows(), with
        /v1/status's layout, vocab_sizes and feature_tables."""
        st = self._layout_status()
        if wire is None:
            wire = "raw" if "raw" in st.get("layouts", ()) else "json"
        if wire == "json":
            layout = st.get("layout") or ("criteo" if st["format"] == "criteo_tsv" else "jagged")
            return rows_to_batch(self.rows(events, framing), layout, sparse_format,
                                 vocab_sizes=st.get("vocab_sizes"),
                                 feature_tables=st.get("feature_tables"))
        if wire != "raw":
            raise ValueError("wire %r: raw or json" % (wire,))
        events = list(events)
        if not events:
            raise ValueError("no rows")
        if framing is None:
            framing = "lines" if st["format"] in ("json", "criteo_tsv") else "delimited"
        status, data = self._request("POST", "/v1/transform?layout=raw&framing=" + framing,
                                     encode_events(events, framing), ok=(200, 422))
        if status == 422:  # some rejected: their lines, each with its event's index
            errs = [json.loads(l) for l in data.splitlines()]
            raise TransformError([(e["index"], e["error"], e.get("detail", "")) for e in errs])
        return raw_to_batch(data, sparse_format, keys=st.get("keys"))

    def close(self):
        """Close every thread's connection (a thread's next request opens
        its connection again)."""
        with self._conns_lock:
            conns, self._conns = self._conns, set()
        for conn in conns:
            conn.close()
        self._local.conn = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _dense_columns(row):
    names, values = [], []
    for k, v in row["dense"].items():
        if isinstance(v, list):
            names += ["%s[%d]" % (k, c) for c in range(len(v))]
            values += v
        else:
            names.append(k)
            values.append(v)
    return names, values


def _nan(v):
    return float("nan") if v is None else v


def raw_to_batch(frame, sparse_format=None, keys=None):
    """A StreamBatch of ``piperec serve``'s ``?layout=raw`` answer: one
    trainer-stream frame (u32 length, tag, varint, then the raw layout of
    docs/trainer-protocol.md), decoded by ``piperec_client.decode_raw`` as
    ``StreamDataset(layout="raw")`` decodes a training batch; the tensors
    share one copy of ``frame``. ``keys``: the Criteo layout's sparse names
    (/v1/status "keys"; C1.. when None)."""
    from piperec import torch as pt
    from piperec.client import decode_raw
    buf = bytearray(frame)  # writable: torch tensors on it without a warning
    pos, n, shift = 5, 0, 0
    while True:  # the frame's varint payload length: the payload starts after it
        if pos >= len(buf) or shift > 63:
            raise ValueError("raw answer: a truncated frame preamble")
        byte = buf[pos]
        n |= (byte & 0x7F) << shift
        pos += 1
        shift += 7
        if byte < 0x80:
            break
    if len(buf) < pos + n or buf[4] != 0x5A:
        raise ValueError("raw answer: %d bytes, not a raw batch frame" % len(buf))
    b = decode_raw(buf, pos, pos + n, keys=keys)
    out = pt._raw_batch(b, sparse_format, list(b.keys))  # as StreamDataset(layout="raw")
    out._ring = out._ring_token = None
    return out


def rows_to_batch(rows, layout="jagged", sparse_format=None, vocab_sizes=None,
                  feature_tables=None):
    """A StreamBatch of rows from ``piperec serve`` or ``piperec transform``:
    layout "jagged" (a declared schema) or "criteo" (the Criteo layout, also
    protobuf_event pipelines'); sparse_format as StreamDataset's ("triple":
    JaggedSparse even with torchrec); vocab_sizes and feature_tables as
    /v1/status gives them (the batch's own, as training batches carry them;
    [] when not given). Raises TransformError when a row is an error."""
    import torch

    from piperec import torch as pt
    errors = [(i, r["error"], r.get("detail", "")) for i, r in enumerate(rows) if "error" in r]
    if errors:
        raise TransformError(errors)
    if not rows:
        raise ValueError("no rows")
    n = len(rows)
    keys = list(rows[0]["sparse"])
    out = pt.StreamBatch()
    if layout == "criteo":
        out.labels = torch.tensor([float(r["labels"].get("label", 0)) for r in rows],
                                  dtype=torch.float32)
        out.dense = torch.tensor([list(r["dense"].values()) for r in rows], dtype=torch.float32)
        values = torch.tensor([[r["sparse"][k] for r in rows] for k in keys],
                              dtype=torch.int64).reshape(-1)
        lengths = torch.ones(len(keys) * n, dtype=torch.int32)
        out.sparse = values.view(len(keys), n).t()
        out.sparse_features = pt._sparse_features(sparse_format, keys, values, lengths)
        out.jagged, out.label_names, out.dense_names, out.weighted_keys = False, [], [], []
    elif layout == "jagged":
        out.label_names = list(rows[0]["labels"])
        out.labels = torch.tensor([[_nan(r["labels"][k]) for k in out.label_names] for r in rows],
                                  dtype=torch.float32).reshape(n, len(out.label_names))
        out.dense_names, _ = _dense_columns(rows[0])
        out.dense = torch.tensor([[_nan(v) for v in _dense_columns(r)[1]] for r in rows],
                                 dtype=torch.float32).reshape(n, len(out.dense_names))
        out.weighted_keys = list(rows[0].get("weights", {}))
        vals, lens, wts = [], [], []
        for k in keys:
            for r in rows:
                v = r["sparse"][k]
                v = v if isinstance(v, list) else [] if v is None else [v]
                vals += v
                lens.append(len(v))
                w = r.get("weights", {}).get(k)
                wts += w if w is not None else [1.0] * len(v)
        values = torch.tensor(vals, dtype=torch.int64)
        lengths = torch.tensor(lens, dtype=torch.int32)
        weights = torch.tensor(wts, dtype=torch.float32) if out.weighted_keys else None
        out.sparse = None
        out.sparse_features = pt._sparse_features(sparse_format, keys, values, lengths,
                                                  weights=weights)
        out.jagged = True
    else:
        raise ValueError("layout %r: jagged or criteo" % (layout,))
    out.keys = keys
    out.vocab_sizes, out.feature_tables = list(vocab_sizes or []), list(feature_tables or [])
    out.recycled, out.offsets = [], []
    out.endpoint, out.epoch, out.sequence, out.rows, out.replica = None, None, 0, n, ""
    out._ring = out._ring_token = None
    return out
