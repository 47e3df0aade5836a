#!/usr/bin/python3
"""test_transform.py — `piperec transform` gives each event the row
`piperec process` gave it, with the vocabulary frozen (docs/serving.md).

Against `piperec process` of the same events, whose arrays are the truth:
  - the Criteo layout (the 100-row sample, the default config, profile dlrm):
    every label, dense value (float32, bit for bit) and index;
  - examples/clickstream.yaml on `piperec gen --format json` events: labels,
    dense, every sparse and list feature (vocab, modulus, hash, bucketize,
    hour, a cross);
  - a weighted list and a dense vector (a config of its own): weights and
    vector values;
  - the same output from a state dir (vocab import of the output);
  - a filter and downsampling do not apply: every event gets its row;
  - ids the vocabulary has not seen: OOV (1) under profile default, --unseen
    under dlrm; counted; the vocabulary files unchanged, a second run the same;
  - a bad event gets its error line in its place; the others their rows;
  - Avro and Protobuf input (delimited, and --framing single) give the JSON
    input's rows;
  - `piperec process --vocab DIR --frozen` of a held-out half writes the
    arrays transform gives it (Criteo with --unseen, clickstream), and its
    vocab/ is the one given, file for file;
  - usage errors exit 2 naming the problem.
usage: test_transform.py   ($PIPEREC, $PR_TMP, $PR_SOURCE_DIR, $PR_TEST_DATA)
"""
import hashlib
import json
import os
import subprocess
import sys

import numpy as np

PIPEREC = os.environ["PIPEREC"]
TMP = os.environ["PR_TMP"]
SRC = os.environ["PR_SOURCE_DIR"]
DATA = os.environ["PR_TEST_DATA"]
EXAMPLE = os.path.join(SRC, "examples", "clickstream.yaml")


def fail(msg):
    print("FAIL: " + msg, file=sys.stderr)
    sys.exit(1)


def run(args, stdin=None, rc=0, binary=False):
    p = subprocess.run([PIPEREC] + args, input=stdin, capture_output=True, text=not binary)
    if p.returncode != rc:
        fail("%s: exit %d (want %d)\n%s" % (" ".join(args), p.returncode, rc, p.stderr))
    return p


def transform(args, stdin=None, rc=0, binary=False):
    p = run(["transform"] + args, stdin, rc, binary)
    out = p.stdout.decode() if binary else p.stdout
    return [json.loads(l) for l in out.splitlines()], (p.stderr.decode() if binary else p.stderr)


def write(path, text):
    with open(path, "w") as f:
        f.write(text)


def rows_of(outdir, feature):
    v = np.load(os.path.join(outdir, "sparse", feature + ".values.npy"))
    n = np.load(os.path.join(outdir, "sparse", feature + ".lengths.npy"))
    o = np.concatenate([[0], np.cumsum(n)])
    return [list(v[o[i]:o[i + 1]]) for i in range(len(n))], o


def f32(x):
    return np.float32(np.nan if x is None else x)


def same_f32(a, b):
    a, b = np.float32(a), np.float32(b)
    return a.tobytes() == b.tobytes()


def check_criteo():
    out = os.path.join(TMP, "criteo")
    tsv = os.path.join(DATA, "criteo_sample_100.tsv")
    run(["process", "--input", tsv, "--output", out, "--no-progress"])
    rows, err = transform(["--vocab", out, "--input", tsv])
    labels = np.load(os.path.join(out, "labels.npy"))
    dense = np.load(os.path.join(out, "dense.npy"))
    sparse = np.load(os.path.join(out, "sparse.npy"))
    if len(rows) != len(labels):
        fail("criteo: %d rows for %d" % (len(rows), len(labels)))
    for i, r in enumerate(rows):
        if r["labels"]["label"] != labels[i]:
            fail("criteo row %d: label %r, process %d" % (i, r["labels"], labels[i]))
        d = [r["dense"]["I%d" % (k + 1)] for k in range(13)]
        if not all(same_f32(x, y) for x, y in zip(d, dense[i])):
            fail("criteo row %d: dense %r, process %r" % (i, d, dense[i]))
        s = [r["sparse"]["C%d" % (k + 1)] for k in range(26)]
        if s != [int(x) for x in sparse[i]]:
            fail("criteo row %d: sparse %r, process %r" % (i, s, list(sparse[i])))
    if " 0 ids without an index" not in err:
        fail("criteo: the sample's own ids unseen: " + err)
    # An unseen hex id under dlrm: --unseen, and counted.
    line = open(tsv).readline().rstrip("\n").split("\t")
    line[14] = "deadbeef"
    rows, err = transform(["--vocab", out, "--unseen", "77"], "\t".join(line) + "\n")
    if rows[0]["sparse"]["C1"] != 77 or " 1 ids without an index" not in err:
        fail("criteo unseen: %r %s" % (rows[0]["sparse"], err))
    return out


def check_clickstream(ev_path, lines):
    out = os.path.join(TMP, "cs")
    run(["process", "--config", EXAMPLE, "--input", ev_path, "--output", out, "--no-progress"])
    before = {f: hashlib.sha256(open(os.path.join(out, "vocab", f), "rb").read()).hexdigest()
              for f in os.listdir(os.path.join(out, "vocab"))}
    rows, err = transform(["--config", EXAMPLE, "--vocab", out, "--input", ev_path])
    if len(rows) != len(lines):
        fail("clickstream: %d rows for %d events" % (len(rows), len(lines)))
    labels = np.load(os.path.join(out, "labels.npy"))
    dense = np.load(os.path.join(out, "dense.npy"))
    for i, r in enumerate(rows):
        got = [r["labels"][k] for k in ("click", "purchase", "dwell")]
        if not all(same_f32(f32(x), y) for x, y in zip(got, labels[i])):
            fail("clickstream row %d: labels %r, process %r" % (i, got, labels[i]))
        got = [r["dense"][k] for k in ("price", "age_days", "price_z")]
        if not all(same_f32(f32(x), y) for x, y in zip(got, dense[i])):
            fail("clickstream row %d: dense %r, process %r" % (i, got, dense[i]))
    for f in ("user", "item", "category", "tags", "history", "age_bucket", "hour", "weekday",
              "cat_x_device"):
        want, _ = rows_of(out, f)
        for i, r in enumerate(rows):
            g = r["sparse"][f]
            g = g if isinstance(g, list) else [g]
            if g != [int(x) for x in want[i]]:
                fail("clickstream %s row %d: %r, process %r" % (f, i, g, want[i]))
    if " 0 ids without an index" not in err or " 0 rejected" not in err:
        fail("clickstream: " + err)
    after = {f: hashlib.sha256(open(os.path.join(out, "vocab", f), "rb").read()).hexdigest()
             for f in os.listdir(os.path.join(out, "vocab"))}
    if before != after:
        fail("clickstream: transform changed the vocabulary files")
    return out, rows


def check_state(out, rows, ev_path):
    state = os.path.join(TMP, "state")
    cfg = os.path.join(TMP, "cs_state.yaml")
    write(cfg, open(EXAMPLE).read().replace("engine: { backend: cpu }",
                                            "engine: { backend: cpu }\n")
          .replace("    batch: { size: 1024", "    state: { dir: %s }\n    batch: { size: 1024"
                   % state))
    run(["vocab", "import", "--config", cfg, "--input", os.path.join(out, "vocab")])
    got, _ = transform(["--config", cfg, "--input", ev_path])
    if got != rows:
        fail("state dir: rows differ from --vocab's")


def check_unseen_and_rejects(out, events):
    e = json.loads(json.dumps(events[0]))
    e["user"]["id"] = "never-seen-user"
    e["item"]["category"] = "never-seen-category"
    lines = [json.dumps(events[1]), "{not json", json.dumps(e), "", json.dumps(events[2])]
    rows, err = transform(["--config", EXAMPLE, "--vocab", out], "\n".join(lines) + "\n")
    if len(rows) != 4:
        fail("rejects: %d lines for 4 events: %r" % (len(rows), rows))
    if rows[1].get("error") != "not_json" or not rows[1].get("detail"):
        fail("rejects: line 2 %r" % rows[1])
    if rows[2]["sparse"]["user"] != 1 or rows[2]["sparse"]["category"] != 1:
        fail("unseen: OOV expected, got %r" % rows[2]["sparse"])
    if "error" in rows[0] or "error" in rows[3]:
        fail("rejects: a good event got an error: %r" % rows)
    if " 1 rejected" not in err or " 2 ids without an index" not in err:
        fail("rejects: counts: " + err)
    again, _ = transform(["--config", EXAMPLE, "--vocab", out], "\n".join(lines) + "\n")
    if again != rows:
        fail("a second run differs: the vocabulary moved")


def check_filter(ev_path):
    """A filter and downsampling drop records in training, never in serving."""
    cfg = os.path.join(TMP, "filtered.yaml")
    text = open(EXAMPLE).read().replace(
        "      cpu_ops:",
        "      filter: [ { path: context.device, in: [ios] } ]\n"
        "      downsample: { rate: 0.1, where: { path: label.click, in: [0] }, weight: w }\n"
        "      cpu_ops:")
    write(cfg, text)
    out = os.path.join(TMP, "filtered")
    p = run(["process", "--config", cfg, "--input", ev_path, "--output", out, "--no-progress"])
    kept = len(np.load(os.path.join(out, "labels.npy")))
    n = sum(1 for l in open(ev_path) if l.strip())
    rows, _ = transform(["--config", cfg, "--vocab", out, "--input", ev_path])
    if kept >= n or len(rows) != n or any("error" in r for r in rows):
        fail("filter: process kept %d of %d, transform answered %d" % (kept, n, len(rows)))
    if any(r["labels"]["w"] != 1 for r in rows):
        fail("filter: the downsample weight is not 1 in serving")


def check_weights_vectors():
    cfg = os.path.join(TMP, "wv.yaml")
    write(cfg, """pipelines:
  - name: wv
    source: { format: json, kafka: { topics: [t], properties: { bootstrap.servers: "127.0.0.1:9" } } }
    schema:
      labels: [ { name: y, path: y, default: 0 } ]
      dense:
        - { name: emb, path: emb, dim: 3 }
      sparse:
        - { name: cats, path: cats, list: { max_len: 4, from: keys },
            weights: { from: values, default: 0, ops: [log1p] }, ops: [vocab] }
    transform: { vocab: { profile: default } }
    sinks: { trainer: { listen: "127.0.0.1:0" } }
""")
    evs = ['{"y": 1, "emb": [0.5, -1.25, 3], "cats": {"a": 2.5, "b": 0.1}}',
           '{"y": 0, "emb": [1, 2, 3.75], "cats": {"b": 7, "c": 1e-3, "a": 0}}',
           '{"y": 0, "emb": [0, 0, 0], "cats": {}}']
    ev = os.path.join(TMP, "wv.jsonl")
    write(ev, "\n".join(evs) + "\n")
    out = os.path.join(TMP, "wv")
    run(["process", "--config", cfg, "--input", ev, "--output", out, "--no-progress"])
    rows, _ = transform(["--config", cfg, "--vocab", out, "--input", ev])
    dense = np.load(os.path.join(out, "dense.npy"))
    want, o = rows_of(out, "cats")
    w = np.load(os.path.join(out, "sparse", "cats.weights.npy"))
    for i, r in enumerate(rows):
        if not all(same_f32(x, y) for x, y in zip(r["dense"]["emb"], dense[i])):
            fail("vector row %d: %r, process %r" % (i, r["dense"]["emb"], dense[i]))
        if r["sparse"]["cats"] != [int(x) for x in want[i]]:
            fail("weighted list row %d: %r, process %r" % (i, r["sparse"]["cats"], want[i]))
        ww = w[o[i]:o[i + 1]]
        if len(r["weights"]["cats"]) != len(ww) or not all(
                same_f32(x, y) for x, y in zip(r["weights"]["cats"], ww)):
            fail("weights row %d: %r, process %r" % (i, r["weights"]["cats"], list(ww)))


def schema_only(cfg):
    """The schema: section of a config, up to its transform:."""
    text, keep, out = open(cfg).read().splitlines(), False, []
    for l in text:
        if l.startswith("    schema:"):
            keep = True
        elif l.startswith("    transform:"):
            keep = False
        if keep:
            out.append(l)
    return "\n".join(out) + "\n"


def check_formats():
    """Avro and Protobuf events (`piperec gen`, one seed) give the JSON events'
    rows, delimited and one at a time (--framing single)."""
    n = 300
    avsc = os.path.join(SRC, "examples", "clickstream.avsc")
    desc = os.path.join(TMP, "click.desc")
    subprocess.run(["protoc", "--descriptor_set_out=" + desc, "--include_imports", "-I",
                    DATA, "pbuser_clickstream.proto"], check=True)
    ev = {f: os.path.join(TMP, "f." + f) for f in ("json", "avro", "pb")}
    run(["gen", "--format", "json", "--rows", str(n), "--seed", "9", "--output", ev["json"]])
    run(["gen", "--format", "avro", "--avro-schema", avsc, "--schema-id", "plain", "--rows",
         str(n), "--seed", "9", "--output", ev["avro"]])
    run(["gen", "--format", "protobuf", "--descriptor-set", desc, "--message", "shop.Click",
         "--rows", str(n), "--seed", "9", "--output", ev["pb"]])
    schema = schema_only(EXAMPLE)
    src = {"json": "      format: json",
           "avro": "      format: avro\n      avro: { schema_file: \"%s\" }" % avsc,
           "pb": "      format: protobuf\n      protobuf: { descriptor_set: \"%s\", "
                 "message: shop.Click }" % desc}
    cfg = {}
    for f, lines in src.items():
        cfg[f] = os.path.join(TMP, "fmt_%s.yaml" % f)
        write(cfg[f], "pipelines:\n  - name: p\n    source:\n%s\n%s" % (lines, schema))
    out = os.path.join(TMP, "fmt_out")
    run(["process", "--config", cfg["json"], "--input", ev["json"], "--output", out,
         "--no-progress"])
    want, _ = transform(["--config", cfg["json"], "--vocab", out, "--input", ev["json"]])
    if len(want) != n or any("error" in r for r in want):
        fail("formats: json: %d rows" % len(want))
    for f in ("avro", "pb"):
        got, _ = transform(["--config", cfg[f], "--vocab", out, "--input", ev[f]])
        if got != want:
            fail("formats: %s rows differ from JSON's" % f)
    # the first Protobuf message alone, framed as the whole input
    raw = open(ev["pb"], "rb").read()
    ln, at = 0, 0
    for shift in range(0, 35, 7):
        ln |= (raw[at] & 0x7f) << shift
        at += 1
        if not raw[at - 1] & 0x80:
            break
    got, _ = transform(["--config", cfg["pb"], "--vocab", out, "--framing", "single"],
                       raw[at:at + ln], binary=True)
    if got != want[:1]:
        fail("formats: --framing single: %r" % got)


def check_frozen_process(ev_path, lines):
    """process --frozen: the training layout of a held-out half, with the
    first half's vocabulary."""
    tsv = os.path.join(DATA, "criteo_sample_100.tsv")
    first = os.path.join(TMP, "first50.tsv")
    write(first, "".join(open(tsv).readlines()[:50]))
    o1, o2 = os.path.join(TMP, "fz1"), os.path.join(TMP, "fz2")
    run(["process", "--input", first, "--output", o1, "--no-progress"])
    p = run(["process", "--input", tsv, "--output", o2, "--vocab", o1, "--frozen", "--unseen",
             "9", "--no-progress"])
    if "--frozen: " not in p.stderr or " ids without an index" not in p.stderr:
        fail("frozen criteo: no count: " + p.stderr)
    rows, _ = transform(["--vocab", o1, "--input", tsv, "--unseen", "9"])
    sparse = np.load(os.path.join(o2, "sparse.npy"))
    got = np.array([[r["sparse"]["C%d" % (k + 1)] for k in range(26)] for r in rows])
    if not (got == sparse).all() or not (np.load(os.path.join(o1, "sparse.npy")) ==
                                         sparse[:50]).all():
        fail("frozen criteo: process --frozen != transform")
    same_files(os.path.join(o1, "vocab"), os.path.join(o2, "vocab"), "frozen criteo")
    half = os.path.join(TMP, "half.jsonl")
    write(half, "\n".join(lines[: len(lines) // 2]) + "\n")
    c1, c2 = os.path.join(TMP, "fzc1"), os.path.join(TMP, "fzc2")
    run(["process", "--config", EXAMPLE, "--input", half, "--output", c1, "--no-progress"])
    run(["process", "--config", EXAMPLE, "--input", ev_path, "--output", c2, "--vocab", c1,
         "--frozen", "--threads", "3", "--no-progress"])
    rows, _ = transform(["--config", EXAMPLE, "--vocab", c1, "--input", ev_path])
    for f in ("user", "item", "history", "cat_x_device"):
        want, _ = rows_of(c2, f)
        for i, r in enumerate(rows):
            g = r["sparse"][f]
            if (g if isinstance(g, list) else [g]) != [int(x) for x in want[i]]:
                fail("frozen clickstream %s row %d: transform %r, process %r" % (f, i, g,
                                                                                 want[i]))
    same_files(os.path.join(c1, "vocab"), os.path.join(c2, "vocab"), "frozen clickstream")
    for args, want in ((["--frozen"], "--frozen needs"), (["--unseen", "3"], "--unseen is for"),
                       (["--vocab", os.path.join(TMP, "nope"), "--frozen"], "not a directory")):
        p = run(["process", "--input", tsv, "--output", os.path.join(TMP, "x")] + args, rc=2)
        if want not in p.stderr:
            fail("process %r: %s" % (args, p.stderr))


def same_files(a, b, what):
    for f in sorted(os.listdir(a)):
        if open(os.path.join(a, f), "rb").read() != open(os.path.join(b, f), "rb").read():
            fail("%s: vocab/%s changed" % (what, f))


def check_usage(out):
    cases = [
        (["--vocab", out, "--state", out], "not both"),
        (["--vocab", out, "--unseen", "-3"], "--unseen"),
        (["--vocab", out, "--framing", "csv"], "--framing"),
        (["--vocab", os.path.join(TMP, "nope")], "nope"),
        (["--vocab", out, "--bogus"], "unknown option"),
    ]
    for args, want in cases:
        p = run(["transform"] + args, "", rc=2)
        if want not in p.stderr:
            fail("usage %r: %s" % (args, p.stderr))
    # a delimited input whose length runs past its end
    p = run(["transform", "--vocab", out, "--framing", "delimited"], "\x7fab", rc=2)
    if "left" not in p.stderr:
        fail("truncated record: " + p.stderr)


def main():
    ev_path = os.path.join(TMP, "ev.jsonl")
    run(["gen", "--format", "json", "--rows", "1500", "--seed", "3", "--output", ev_path])
    lines = [l for l in open(ev_path).read().splitlines() if l]
    events = [json.loads(l) for l in lines]
    crit = check_criteo()
    out, rows = check_clickstream(ev_path, lines)
    check_state(out, rows, ev_path)
    check_unseen_and_rejects(out, events)
    check_filter(ev_path)
    check_weights_vectors()
    check_formats()
    check_frozen_process(ev_path, lines)
    check_usage(crit)
    print("ok")


if __name__ == "__main__":
    main()
