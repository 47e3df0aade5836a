#!/usr/bin/python3
"""test_vocab_lookup.py — `piperec vocab lookup` gives each id the index a row
with that id gets (docs/formats.md, "From your ids to their indices").

Against `piperec process` of the same events, whose arrays are the truth:
  - examples/clickstream.yaml on `piperec gen --format json` events plus
    hand-written ones (integer and string ids that look alike, missing and
    null fields, a category filled by its default): for every vocab feature
    (string ids, integer ids after modulus, a default, a list cut to its last
    10, an hour from a time), --events gives every row's indices exactly;
    the id modes (JSON values, and --strings) give each single-valued row's
    index, and each list element's;
  - a cross with vocab (--events), operators after vocab (modulus), profile
    dlrm (unseen is "-", missing is key 0's index), min_count 2
    (below_min_count reads as OOV 1);
  - the Criteo layout (the 100-row sample, default config): every column's
    hex field, an empty field (missing);
  - a state dir (vocab import of the output) reads as the output does;
  - bad ids are rejected with the decoder's reason, nothing is added;
  - usage and config errors exit 2 naming the problem.
usage: test_vocab_lookup.py   ($PIPEREC, $PR_TMP, $PR_SOURCE_DIR, $PR_TEST_DATA)
"""
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


def run(args, stdin=None, rc=0):
    p = subprocess.run([PIPEREC] + args, input=stdin, capture_output=True, text=True)
    if p.returncode != rc:
        fail("%s: exit %d (want %d)\n%s" % (" ".join(args), p.returncode, rc, p.stderr))
    return p


def lookup(cfg, feature, src, lines, *extra, rc=0):
    args = ["vocab", "lookup", "--feature", feature] + list(src) + list(extra)
    if cfg:
        args += ["--config", cfg]
    p = run(args, "".join(l + "\n" for l in lines), rc)
    out = [l.split("\t") for l in p.stdout.splitlines()]
    for row in out:
        if len(row) != 3:
            fail("%s: not 3 columns: %r" % (feature, row))
    return out, p.stderr


def rows_of(outdir, feature):
    v = np.load(os.path.join(outdir, "sparse", feature + ".values.npy"))
    n = np.load(os.path.join(outdir, "sparse", feature + ".lengths.npy"))
    o = np.concatenate([[0], np.cumsum(n)])
    return [list(v[o[i]:o[i + 1]]) for i in range(len(n))]


def path_get(ev, path):
    for seg in path.split("."):
        if not isinstance(ev, dict) or seg not in ev:
            return None
        ev = ev[seg]
    return ev


def ints(cell):
    return [int(x) for x in cell.split(",")] if cell else []


def check_events(cfg, outdir, feature, lines):
    got, err = lookup(cfg, feature, ["--input", outdir], lines, "--events")
    want = rows_of(outdir, feature)
    if len(got) != len(want):
        fail("%s --events: %d lines for %d rows" % (feature, len(got), len(want)))
    for i, (g, w) in enumerate(zip(got, want)):
        if ints(g[1]) != [int(x) for x in w]:
            fail("%s row %d: lookup %s, process %s (%s)" % (feature, i, g[1], w, g[2]))
    if "rejected" in err.split("\n")[-2] and " 0 rejected" not in err:
        fail("%s --events: rejects: %s" % (feature, err))
    return got


def write(path, text):
    with open(path, "w") as f:
        f.write(text)


def main():
    # ---- the events: generated, and hand-written edge cases --------------
    ev_path = os.path.join(TMP, "ev.jsonl")
    run(["gen", "--format", "json", "--rows", "2000", "--seed", "11", "--output", ev_path])
    lines = [l for l in open(ev_path).read().splitlines() if l]
    base = json.loads(lines[0])
    extra = []
    for uid, cat in ((42, "toys"), ("42", None), (None, "toys"), ("ü-ñ \"q\"", "shoes")):
        e = json.loads(json.dumps(base))
        e["user"]["id"] = uid
        if cat is None:
            del e["item"]["category"]
        else:
            e["item"]["category"] = cat
        extra.append(json.dumps(e, ensure_ascii=False))
    lines += extra
    write(ev_path, "\n".join(lines) + "\n")
    events = [json.loads(l) for l in lines]

    # ---- clickstream, profile default ------------------------------------
    out = os.path.join(TMP, "out")
    run(["process", "--config", EXAMPLE, "--input", ev_path, "--output", out, "--no-progress"])
    feats = {"user": "user.id", "item": "item.id", "category": "item.category",
             "history": "history", "hour": "ts"}
    for f in feats:
        check_events(EXAMPLE, out, f, lines)
    # id modes: each single-valued row's id as a JSON value
    for f, path in feats.items():
        want = rows_of(out, f)
        if f == "history":
            ids, idx = [], []
            for e, w in zip(events, want):
                elems = [x for x in (path_get(e, path) or []) if x is not None][-10:]
                ids += [json.dumps(x) for x in elems]
                idx += [int(x) for x in w]
        else:
            ids = [json.dumps(path_get(e, path), ensure_ascii=False) for e in events]
            idx = [int(w[0]) for w in want]
        got, _ = lookup(EXAMPLE, f, ["--input", out], ids)
        for i, (g, w) in enumerate(zip(got, idx)):
            if g[0] != ids[i] or int(g[1]) != w:
                fail("%s id %s: lookup %s, process %d" % (f, ids[i], g, w))
        if any(g[2] not in ("known", "missing") for g in got):
            fail("%s: statuses %s" % (f, sorted({g[2] for g in got})))
    # --strings: the user ids as they are (string ids only)
    sids = [e["user"]["id"] for e in events if isinstance(e["user"]["id"], str)]
    got, _ = lookup(EXAMPLE, "user", ["--input", out], sids, "--strings")
    byid = {json.dumps(e["user"]["id"]): int(w[0]) for e, w in zip(events, rows_of(out, "user"))}
    for s, g in zip(sids, got):
        if int(g[1]) != byid[json.dumps(s)] or g[2] != "known":
            fail("--strings %r: %s" % (s, g))
    # 42 and "42" are two ids; null is missing (0); unseen is OOV (1); bad ids
    got, err = lookup(EXAMPLE, "user", ["--input", out],
                      ['42', '"42"', 'null', '"never-seen"', '4.5', '"a", "user": 1', '[1]'])
    st = [(g[1], g[2]) for g in got]
    if st[0][1] != "known" or st[1][1] != "known" or st[0][0] == st[1][0]:
        fail("42 vs \"42\": %s" % st)
    if st[2] != ("0", "missing") or st[3] != ("1", "unseen"):
        fail("null / unseen: %s" % st)
    if st[4:] != [("-", "rejected")] * 3 or "wrong_type" not in err or "not_json" not in err:
        fail("bad ids: %s\n%s" % (st, err))
    # one output line per input line, blank ones included (rejected), so that
    # the output lines up with the input; --events counts every line
    got, err = lookup(EXAMPLE, "user", ["--input", out], ['"u1"', "", '"u2"'])
    if [g[0] for g in got] != ['"u1"', "", '"u2"'] or got[1][1:] != ["-", "rejected"]:
        fail("blank line: %s" % got)
    got, err = lookup(EXAMPLE, "user", ["--input", out], [lines[0], "", "{\"user\":"], "--events")
    if [g[0] for g in got] != ["1", "2", "3"] or "line 3 rejected (truncated)" not in err:
        fail("--events line numbers: %s %s" % (got, err))
    # a TAB in a string id cannot split the output's columns
    got, _ = lookup(EXAMPLE, "user", ["--input", out], ["a\tb"], "--strings")
    if got != [["a\\tb", "1", "unseen"]]:
        fail("TAB in an id: %r" % got)
    # a byte order mark on line 1 would be read into the first id (a wrong
    # "unseen"): refused, naming it
    p = run(["vocab", "lookup", "--config", EXAMPLE, "--feature", "user", "--input", out,
             "--strings"], "\ufeff" + sids[0] + "\n", rc=2)
    if "byte order mark" not in p.stderr or p.stdout:
        fail("BOM: %r %r" % (p.stdout, p.stderr))
    # without --config, a declared schema's output is not read through the
    # embedded Criteo config: meta.json's pipeline is named
    p = run(["vocab", "lookup", "--feature", "user", "--input", out], '"u1"\n', rc=2)
    if "says pipeline 'clicks' wrote it" not in p.stderr or "--config" not in p.stderr:
        fail("no --config on a schema output: %s" % p.stderr)
    # nothing was added: the vocabulary files are unchanged by lookups
    before = open(os.path.join(out, "vocab", "user.tsv")).read()
    lookup(EXAMPLE, "user", ["--input", out], ['"new-1"', '"new-2"'])
    if open(os.path.join(out, "vocab", "user.tsv")).read() != before:
        fail("lookup changed the vocabulary file")
    # a missing category takes its default ("unknown"): the row's index
    got, _ = lookup(EXAMPLE, "category", ["--input", out], ["null", '"unknown"'])
    if got[0][1] != got[1][1] or got[0][2] != "known":
        fail("default fill: %s" % got)

    # ---- a state dir reads as the output does -----------------------------
    st_dir = os.path.join(TMP, "state")
    run(["vocab", "import", "--config", EXAMPLE, "--state", st_dir, "--input",
         os.path.join(out, "vocab")])
    a, _ = lookup(EXAMPLE, "history", ["--input", out], lines, "--events")
    b, _ = lookup(EXAMPLE, "history", ["--state", st_dir], lines, "--events")
    if a != b:
        fail("--state differs from --input")

    # ---- cross with vocab, operators after vocab, dlrm, min_count ---------
    text = open(EXAMPLE).read()
    cross = text.replace("ops: [ { hash: 65536 } ] }", "ops: [vocab] }").replace(
        "{ name: user, path: user.id, ops: [vocab] }",
        "{ name: user, path: user.id, ops: [vocab, { modulus: 5 }] }")
    if cross == text:
        fail("example changed: edit the test's replacements")
    cfg_x = os.path.join(TMP, "cross.yaml")
    write(cfg_x, cross)
    out_x = os.path.join(TMP, "out-x")
    run(["process", "--config", cfg_x, "--input", ev_path, "--output", out_x, "--no-progress"])
    check_events(cfg_x, out_x, "cat_x_device", lines)
    got = check_events(cfg_x, out_x, "user", lines)
    if max(int(g[1]) for g in got) > 4:
        fail("modulus after vocab not applied")
    _, err = lookup(cfg_x, "cat_x_device", ["--input", out_x], ['"toys"'], rc=2)
    if "cross" not in err or "--events" not in err:
        fail("cross without --events: %s" % err)

    cfg_d = os.path.join(TMP, "dlrm.yaml")
    write(cfg_d, text.replace("profile: default", "profile: dlrm").replace(
        "{ name: category, path: item.category, default: unknown, ops: [vocab] }",
        "{ name: category, path: item.category, ops: [vocab] }"))
    out_d = os.path.join(TMP, "out-d")
    run(["process", "--config", cfg_d, "--input", ev_path, "--output", out_d, "--no-progress"])
    for f in ("user", "category", "history"):
        check_events(cfg_d, out_d, f, lines)
    got, _ = lookup(cfg_d, "category", ["--input", out_d], ['"never-seen"', "null"])
    miss = rows_of(out_d, "category")[len(lines) - 3][0]  # the event without a category
    if got[0][1:] != ["-", "unseen"] or got[1][1:] != [str(miss), "missing"]:
        fail("dlrm unseen / missing: %s (row without category: %d)" % (got, miss))

    cfg_m = os.path.join(TMP, "min.yaml")
    write(cfg_m, text.replace("vocab: { profile: default }",
                              "vocab: { profile: default, min_count: 2 }"))
    out_m = os.path.join(TMP, "out-m")
    run(["process", "--config", cfg_m, "--input", ev_path, "--output", out_m, "--no-progress"])
    # rows before a value's min_count-th sighting got OOV; the vocabulary's
    # final state is what its last row got
    got, _ = lookup(cfg_m, "user", ["--input", out_m], lines, "--events")
    want = rows_of(out_m, "user")
    last = {json.dumps(e["user"]["id"]): i for i, e in enumerate(events)}
    for i in last.values():
        if int(got[i][1]) != int(want[i][0]):
            fail("min_count: row %d: lookup %s, process %s" % (i, got[i], want[i]))
    if {g[2] for g in got} != {"known", "below_min_count", "missing"}:
        fail("min_count statuses: %s" % sorted({g[2] for g in got}))
    got, _ = lookup(cfg_m, "user", ["--input", out_m], ['"42"'])
    if got[0][1:] != ["1", "below_min_count"]:
        fail("min_count: %s" % got)

    # ---- the Criteo layout: every column, and an empty field --------------
    sample = os.path.join(DATA, "criteo_sample_100.tsv")
    out_c = os.path.join(TMP, "out-c")
    run(["process", "--input", sample, "--output", out_c, "--no-progress"])
    sp = np.load(os.path.join(out_c, "sparse.npy"))
    rows = [l.rstrip("\n").split("\t") for l in open(sample)]
    for c in range(26):
        ids = [r[14 + c] for r in rows]
        got, _ = lookup(None, "C%d" % (c + 1), ["--input", out_c], ids)
        for i, g in enumerate(got):
            if int(g[1]) != int(sp[i, c]) or g[2] != ("missing" if ids[i] == "" else "known"):
                fail("C%d row %d (%r): lookup %s, process %d" % (c + 1, i, ids[i], g, sp[i, c]))
    got, _ = lookup(None, "C3", ["--input", out_c], [l.rstrip("\n") for l in open(sample)],
                    "--events")
    if [int(g[1]) for g in got] != [int(x) for x in sp[:, 2]]:
        fail("Criteo --events")

    # ---- docs/formats.md's example, run as written there -------------------
    doc = open(os.path.join(SRC, "docs", "formats.md")).read()
    block = doc[doc.index("$ piperec gen --format json --rows 3000 --seed 7"):]
    block = block[:block.index("```")].splitlines()
    cmds = [l[2:] for l in block if l.startswith("$ ")]
    shown = [l for l in block if l and not l.startswith("$ ")]
    sh = "cd '%s' && PATH='%s':$PATH && " % (TMP, os.path.dirname(os.path.abspath(PIPEREC)))
    cmds = [c.replace("examples/clickstream.yaml", EXAMPLE).replace("--output out",
                                                                    "--output doc-out")
            .replace("--input out", "--input doc-out") for c in cmds]
    p = subprocess.run(["sh", "-c", sh + " && ".join(c + " 2>/dev/null" for c in cmds[:-1]) +
                        " && " + cmds[-1] + " 2>/dev/null"], capture_output=True, text=True)
    if p.returncode or p.stdout.splitlines() != shown:
        fail("docs example: got %r, docs show %r (%s)" % (p.stdout, shown, p.stderr))

    # ---- errors name the problem ------------------------------------------
    for args, want in (
        (["--feature", "nope", "--input", out], "no feature 'nope'"),
        (["--feature", "tags", "--input", out], "no vocab operator"),
        (["--feature", "user", "--input", out, "--state", st_dir], "not both"),
        (["--input", out], "--feature is required"),
        (["--feature", "user", "--feature", "item", "--input", out], "'--feature' given twice"),
        (["--feature", "user", "--input", os.path.join(TMP, "absent")], "absent: No such file"),
        (["--feature", "user", "--input", ev_path], "ev.jsonl: Not a directory"),
        (["--feature", "user", "--state", os.path.join(TMP, "absent")], "holds no vocabulary"),
    ):
        p = run(["vocab", "lookup", "--config", EXAMPLE] + args, "", 2)
        if want not in p.stderr:
            fail("%s: %r not in %s" % (args, want, p.stderr))
    print("test_vocab_lookup: ok (%d events, 5 features, cross, dlrm, min_count, Criteo 26 "
          "columns)" % len(lines))


main()
