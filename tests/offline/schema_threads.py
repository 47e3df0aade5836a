#!/usr/bin/python3
"""schema_threads.py — `piperec process` with a declared schema gives the same
bytes at --threads 1, 2, 4, 8 and 16 (issue 21, offline).

The declared-schema driver (service/offline_schema.c) runs rounds in
overlapping steps on every worker: round r's first appearances per column
in input order beside round r + 1's decoding and round r + 2's cutting;
then, behind a gate opened once those chains and round r's block ends are
done, round r's operators after vocab and writes at their place beside
round r + 1's engine first half (lookups of known keys, direct and
hash-table vocabularies); a round is cut into units (up to 4 per worker,
--block-rows / 4 rows each, at least 64) that any worker takes. Rounds whose blocks do not split (eviction,
streaming min_count, the counting pass) run serially. Every output must
depend on the input order only. Checked here on hundreds of small blocks
and rounds (--block-rows 64, the smallest allowed, and 100: one unit per
worker; 256: four units of 64 rows per worker; rounds of 64 to 4096
lines, so a value's first appearance and its next ones fall in different,
overlapping rounds all the time), against the one-thread run of the same
config with 8192-row blocks:
  - schema_reference.py's clickstream (string and integer ids, nested and
    missing fields, lists cut to max_len, absent lists, bad records that land
    in rejects.tsv), profiles default and dlrm, count_mode two_pass with
    min_count 3, streaming min_count 2 and eviction lru (the serial rounds),
    and a dlrm vocabulary that fills up (same error, same rejects.tsv);
  - examples/clickstream.yaml on `piperec gen --format json` events with
    rejected lines mixed in (hash-table vocabularies of string ids, a
    direct-indexed one after modulus, lists of 10, hash, cross, bucketize);
  - the same with every user id new or back one round later (the user
    chain longer than the decoding beside it: workers wait at the gate);
every file compared: labels.npy, dense.npy, sparse/<f>.values/.lengths.npy,
vocab/*.tsv, rejects.tsv, recycled.npy. The clickstream file has blank lines
and no final newline, and is also read from stdin (line by line, where a
file is mapped): same bytes. The default profile's output is also
checked against schema_reference.py's Python reference.

usage: schema_threads.py   ($PIPEREC, $PR_TMP, $PR_SOURCE_DIR)
"""
import os
import random
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import schema_reference as ref  # noqa: E402

THREADS = (1, 2, 4, 8, 16)


def identical(piperec, tmp, tag, cfg, inp, block_sizes=(64, 100)):
    base = os.path.join(tmp, "out-%s-base" % tag)
    ref.run(piperec, cfg, inp, base, 1, 8192)
    want = ref.files(base)
    runs = 0
    for block_rows in block_sizes:
        for threads in THREADS:
            out = os.path.join(tmp, "out-%s-t%d-b%d" % (tag, threads, block_rows))
            ref.run(piperec, cfg, inp, out, threads, block_rows)
            got = ref.files(out)
            assert want.keys() == got.keys(), (out, want.keys() ^ got.keys())
            for k in want:
                assert want[k] == got[k], "%s: %s differs from %s" % (tag, k, base)
            runs += 1
    rejects = want.get("rejects.tsv", b"").count(b"\n")
    print("ok: %s: threads %s x block rows %s identical (%d files, %d rejects)"
          % (tag, "/".join(map(str, THREADS)), "/".join(map(str, block_sizes)), len(want),
             rejects))
    return base


def write_cfg(tmp, tag, text):
    cfg = os.path.join(tmp, "clicks-%s.yaml" % tag)
    with open(cfg, "w") as f:
        f.write(text)
    return cfg


def reference_schema(piperec, tmp):
    lines, events = ref.gen(20000, random.Random(21))
    inp = os.path.join(tmp, "events.jsonl")
    with open(inp, "w") as f:
        f.write("\n".join(lines) + "\n")
    default = ref.CONFIG.format(profile="default")
    vocab = "      vocab: { profile: default }\n"
    base = identical(piperec, tmp, "default", write_cfg(tmp, "default", default), inp,
                     (64, 100, 256))
    ref.check(base, events, "default")
    identical(piperec, tmp, "dlrm", write_cfg(tmp, "dlrm", ref.CONFIG.format(profile="dlrm")), inp)
    text = default.replace(vocab, "      vocab: { profile: default, min_count: 3, "
                                  "count_mode: two_pass }\n")
    identical(piperec, tmp, "two_pass", write_cfg(tmp, "two_pass", text), inp,
              (64, 100, 256))
    text = default.replace(vocab, "      vocab: { profile: default, min_count: 2 }\n")
    identical(piperec, tmp, "streaming_min_count", write_cfg(tmp, "min2", text), inp, (64,))
    text = default.replace(vocab, vocab + "      columns: { history: { eviction: lru, "
                                          "capacity: 22 } }\n")
    identical(piperec, tmp, "lru", write_cfg(tmp, "lru", text), inp, (64, 256))
    # a dlrm vocabulary that fills up: the same error at every thread count,
    # the layout dropped, rejects.tsv as far as the failing block's slice
    text = ref.CONFIG.format(profile="dlrm").replace(
        "      vocab: { profile: dlrm }\n",
        "      vocab: { profile: dlrm }\n      columns: { user: { capacity: 10 } }\n")
    cfg = write_cfg(tmp, "full", text)
    seen = set()
    for threads in THREADS:
        out = os.path.join(tmp, "out-full-t%d" % threads)
        p = subprocess.run([piperec, "process", "--config", cfg, "--input", inp, "--output", out,
                            "--threads", str(threads), "--block-rows", "64", "--no-progress"],
                           capture_output=True, text=True)
        assert p.returncode == 1 and "column user is full" in p.stderr, (threads, p.stderr)
        assert sorted(os.listdir(out)) == ["rejects.tsv"], (threads, os.listdir(out))
        seen.add((p.stderr, open(os.path.join(out, "rejects.tsv"), "rb").read()))
    assert len(seen) == 1, "a full vocabulary fails differently across thread counts"
    print("ok: full dlrm vocabulary: same error and rejects at threads %s"
          % "/".join(map(str, THREADS)))


def clickstream_events(piperec, tmp, name, rows):
    """examples/clickstream.yaml and `rows` JSON events of `piperec gen`."""
    src = os.environ.get("PR_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
    gen = os.path.join(tmp, name)
    subprocess.run([piperec, "gen", "--format", "json", "--rows", str(rows), "--output", gen],
                   check=True, capture_output=True)
    with open(gen) as f:
        return os.path.join(src, "examples", "clickstream.yaml"), f.read().splitlines()


def clickstream(piperec, tmp):
    cfg, lines = clickstream_events(piperec, tmp, "gen.jsonl", 20000)
    bad = ['{"ts": 1732600000000, "user": {"id": [1]}}', '{"ts": ', "[1, 2]",
           '{"ts": 1732600000000, "history": [1.5]}']
    for i in range(len(lines) - 1, 0, -331):
        lines.insert(i, bad[i % len(bad)])
    inp = os.path.join(tmp, "clickstream.jsonl")
    with open(inp, "w") as f:  # blank lines (counted, skipped) and no final newline
        f.write("\n".join(ln if i % 500 else "  \n" + ln for i, ln in enumerate(lines)))
    base = identical(piperec, tmp, "clickstream", cfg, inp, (64, 100, 256))
    rejects = open(os.path.join(base, "rejects.tsv")).read().splitlines()
    assert len(rejects) >= 15, len(rejects)
    # a file is mapped, stdin read line by line: the same bytes
    for threads, block_rows in ((3, 64), (2, 256)):
        out = os.path.join(tmp, "out-clickstream-stdin-t%d" % threads)
        with open(inp, "rb") as f:
            p = subprocess.run([piperec, "process", "--config", cfg, "--input", "-", "--output",
                                out, "--threads", str(threads), "--block-rows", str(block_rows),
                                "--no-progress"], stdin=f, capture_output=True, text=True)
        assert p.returncode == 0, p.stderr
        assert ref.files(out) == ref.files(base), "stdin (read) and file (mapped) outputs differ"
    print("ok: clickstream from stdin identical to the mapped file")


def all_new(piperec, tmp):
    """Every user id new (the user column's chain is every row, longer than
    the decoding beside it, so workers wait at the step's gate) and ids that
    come back one round later (first appearance and next use in different,
    overlapping rounds): the same bytes at every thread count."""
    cfg, lines = clickstream_events(piperec, tmp, "gen-new.jsonl", 12000)
    out = []
    for i, ln in enumerate(lines):
        uid = "n%d" % (i if i % 3 else max(0, i - 700))  # a third come back ~700 lines on
        out.append(re.sub(r'"user":\{"id":"[^"]*"', '"user":{"id":"%s"' % uid, ln, count=1))
    inp = os.path.join(tmp, "all-new.jsonl")
    with open(inp, "w") as f:
        f.write("\n".join(out) + "\n")
    identical(piperec, tmp, "all_new", cfg, inp, (64, 256))


def split_export(piperec, tmp):
    """A user vocabulary of 40K entries: above 16K entries a column's export
    is cut into pieces formatted on several workers and written in order
    (pr_vocab_export_job, issue 21); vocab/user.tsv, like every file, has the
    same bytes at every thread count."""
    src = os.environ.get("PR_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
    cfg = os.path.join(src, "examples", "clickstream.yaml")
    gen = os.path.join(tmp, "gen-split.jsonl")
    subprocess.run([piperec, "gen", "--format", "json", "--rows", "40000", "--output", gen],
                   check=True, capture_output=True)
    with open(gen) as f:
        lines = f.read().splitlines()
    out = [re.sub(r'"user":\{"id":"[^"]*"', '"user":{"id":"s%d"' % i, ln, count=1)
           for i, ln in enumerate(lines)]
    inp = os.path.join(tmp, "split-export.jsonl")
    with open(inp, "w") as f:
        f.write("\n".join(out) + "\n")
    base = identical(piperec, tmp, "split_export", cfg, inp, (256,))
    with open(os.path.join(base, "vocab", "user.tsv")) as f:
        n = sum(1 for _ in f)
    assert n > 2 * 16384, n  # three pieces or more


def main():
    piperec = os.environ["PIPEREC"]
    tmp = os.environ.get("PR_TMP", "/tmp/schema_threads")
    os.makedirs(tmp, exist_ok=True)
    reference_schema(piperec, tmp)
    clickstream(piperec, tmp)
    all_new(piperec, tmp)
    split_export(piperec, tmp)


if __name__ == "__main__":
    main()
