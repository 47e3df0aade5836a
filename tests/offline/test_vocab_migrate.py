#!/usr/bin/python3
"""test_vocab_migrate.py — `piperec vocab migrate --from OLD`: a pipeline's
vocabularies carried over a change of its features (docs/formats.md,
"Changing the features").

examples/clickstream.yaml's vocabulary (from `piperec process`, imported into
a state dir) is migrated to a config that adds a feature (device) and drops
one (category):
  - before: the new config cannot read the state dir (the error points at
    migrate);
  - after: every kept column's export is byte-identical to the old one, the
    new column is empty, the dropped one is gone, the journal is folded in;
  - `vocab lookup` of every event's user and history gives the same indices
    under the new config as under the old one;
  - a config that breaks a kept column (modulus below its keys) fails and
    leaves the state dir as it was;
  - usage: --from missing, another pipeline's name.
usage: test_vocab_migrate.py   ($PIPEREC, $PR_TMP, $PR_SOURCE_DIR)
"""
import filecmp
import os
import struct
import subprocess
import sys

PIPEREC = os.environ["PIPEREC"]
TMP = os.environ["PR_TMP"]
SRC = os.environ["PR_SOURCE_DIR"]
EXAMPLE = os.path.join(SRC, "examples", "clickstream.yaml")


def fail(msg):
    print("FAIL: " + msg, file=sys.stderr)
    sys.exit(1)


def run(args, rc=0):
    p = subprocess.run([PIPEREC] + args, capture_output=True, text=True)
    if p.returncode != rc:
        fail("%s: exit %d (want %d)\n%s" % (" ".join(args), p.returncode, rc, p.stderr))
    return p


def write(name, text):
    path = os.path.join(TMP, name)
    with open(path, "w") as f:
        f.write(text)
    return path


def shared_table(ev):
    """The history joins the item's vocabulary (`table: item`): the old state
    is refused (the features with a vocabulary changed), the migrate keeps
    the item's indices byte for byte and drops the history's own column;
    after it, an item's history index is its candidate index."""
    head = ("pipelines:\n  - name: t\n    source: { format: json }\n    schema:\n"
            "      labels: [ { name: click, path: label.click } ]\n      sparse:\n"
            "        - { name: item, path: item.id, ops: [vocab] }\n"
            "        - { name: history, path: history, list: { max_len: 10, keep: last }, "
            "ops: [vocab]%s }\n    transform: { vocab: { profile: default } }\n")
    old, new = write("t_old.yaml", head % ""), write("t_new.yaml", head % ", table: item")
    out, st = os.path.join(TMP, "t_out"), os.path.join(TMP, "t_state")
    run(["process", "--config", old, "--input", ev, "--output", out, "--no-progress"])
    run(["vocab", "import", "--config", old, "--state", st, "--input", os.path.join(out, "vocab")])
    p = run(["vocab", "export", "--config", new, "--state", st, "--output",
             os.path.join(TMP, "t_x")], rc=2)
    if "vocab migrate --from" not in p.stderr:
        fail("a history joining a table: the old state was not refused: %s" % p.stderr)
    p = run(["vocab", "migrate", "--from", old, "--config", new, "--state", st])
    for want in ("column item: kept, every index unchanged",
                 "column history: not in the new config, dropped"):
        if want not in p.stderr:
            fail("migrate into a shared table lacks %r: %s" % (want, p.stderr))
    after = os.path.join(TMP, "t_after")
    run(["vocab", "export", "--config", new, "--state", st, "--output", after])
    if sorted(os.listdir(after)) != ["item.tsv"] or not filecmp.cmp(
            os.path.join(out, "vocab", "item.tsv"), os.path.join(after, "item.tsv"),
            shallow=False):
        fail("the item's table changed in the migrate: %s" % os.listdir(after))
    ids = '"5972"\n41\n'
    a = None
    for feat in ("item", "history"):
        p = subprocess.run([PIPEREC, "vocab", "lookup", "--config", new, "--feature", feat,
                            "--state", st], input=ids, capture_output=True, text=True)
        if p.returncode:
            fail("lookup %s: %s" % (feat, p.stderr))
        if a is None:
            a = p.stdout
        elif p.stdout != a:
            fail("item and history give other indices in one table: %r %r" % (a, p.stdout))


def main():
    ev = os.path.join(TMP, "ev.jsonl")
    run(["gen", "--format", "json", "--rows", "3000", "--seed", "3", "--output", ev])
    text = open(EXAMPLE).read()
    old = write("old.yaml", text)
    new_text = text.replace(
        "        - { name: category, path: item.category, default: unknown, ops: [vocab] }\n", ""
    ).replace("        - { name: weekday, path: ts, ops: [day_of_week] }\n",
              "        - { name: weekday, path: ts, ops: [day_of_week] }\n"
              "        - { name: device, path: context.device, ops: [vocab] }\n")
    if new_text.count("device, path: context.device") != 1 or "name: category" in new_text:
        fail("example changed: edit the test's replacements")
    new = write("new.yaml", new_text)
    out = os.path.join(TMP, "out")
    run(["process", "--config", old, "--input", ev, "--output", out, "--no-progress"])
    st = os.path.join(TMP, "state")
    run(["vocab", "import", "--config", old, "--state", st, "--input", os.path.join(out, "vocab")])
    before = os.path.join(TMP, "before")
    run(["vocab", "export", "--config", old, "--state", st, "--output", before])

    # the new config cannot read the old state (same settings, same column
    # count: only the names tell columns 2.. apart), and says what to do
    p = run(["vocab", "export", "--config", new, "--state", st, "--output",
             os.path.join(TMP, "x")], rc=2)
    if "column 2 is category in the snapshot, history in this config" not in p.stderr or \
            "vocab migrate --from" not in p.stderr:
        fail("the refusal does not name the moved column and migrate: %s" % p.stderr)

    # a kept column that no longer fits (a capacity below the indices item
    # has handed out): fails, nothing changes
    bad = write("bad.yaml", new_text.replace("      vocab: { profile: default }",
                                             "      vocab: { profile: default }\n"
                                             "      columns: { item: { capacity: 5 } }"))
    snap = os.path.join(st, "clicks.vocab")
    mtime = os.stat(snap).st_mtime_ns
    p = run(["vocab", "migrate", "--from", old, "--config", bad, "--state", st], rc=2)
    if "item" not in p.stderr or "nothing changed" not in p.stderr:
        fail("a column that does not fit: %s" % p.stderr)
    if os.stat(snap).st_mtime_ns != mtime:
        fail("a failed migrate changed the snapshot")
    if [n for n in os.listdir(st) if n.startswith(".migrate")]:
        fail("a failed migrate left its temporary folder")

    # the migrate
    p = run(["vocab", "migrate", "--from", old, "--config", new, "--state", st])
    for want in ("column user: kept", "column device: new, starts empty",
                 "column category: not in the new config, dropped"):
        if want not in p.stderr:
            fail("migrate summary lacks %r: %s" % (want, p.stderr))
    after = os.path.join(TMP, "after")
    run(["vocab", "export", "--config", new, "--state", st, "--output", after])
    for name in ("user", "item", "history", "hour"):
        if not filecmp.cmp(os.path.join(before, name + ".tsv"), os.path.join(after, name + ".tsv"),
                           shallow=False):
            fail("column %s changed in the migrate" % name)
    if os.path.exists(os.path.join(after, "category.tsv")):
        fail("the dropped column is still there")
    dev = [l for l in open(os.path.join(after, "device.tsv")) if not l.startswith("#")]
    if dev:
        fail("the new column is not empty: %s" % dev[:3])
    if os.path.exists(os.path.join(st, "clicks.journal")):
        fail("the journal was not folded into the new snapshot")

    # the same ids get the same indices under the new config
    for feat in ("user", "history"):
        a = run(["vocab", "lookup", "--config", old, "--feature", feat, "--events", "--ids", ev,
                 "--input", out]).stdout
        b = run(["vocab", "lookup", "--config", new, "--feature", feat, "--events", "--ids", ev,
                 "--state", st]).stdout
        if a != b:
            fail("%s: lookups differ after the migrate" % feat)

    # a feature whose values get other keys (item: modulus 1000 for 1000000;
    # item 1000 would take item 0's index): the snapshot refuses it, naming
    # it; the migrate starts it empty and keeps the others
    mod = write("mod.yaml", new_text.replace("{ modulus: 1000000 }, vocab", "{ modulus: 1000 }, vocab"))
    if "{ modulus: 1000 }, vocab" not in open(mod).read():
        fail("example changed: edit the test's modulus replacement")
    p = run(["vocab", "export", "--config", mod, "--state", st, "--output",
             os.path.join(TMP, "y")], rc=2)
    if "feature item gives its values other keys than when the snapshot was written" not in \
            p.stderr or "vocab migrate --from" not in p.stderr:
        fail("a changed feature chain was not refused by name: %s" % p.stderr)
    p = run(["vocab", "migrate", "--from", new, "--config", mod, "--state", st])
    if "column item: its values get other keys now" not in p.stderr or \
            "column user: kept" not in p.stderr:
        fail("migrate of a changed chain: %s" % p.stderr)
    after2 = os.path.join(TMP, "after2")
    run(["vocab", "export", "--config", mod, "--state", st, "--output", after2])
    if [l for l in open(os.path.join(after2, "item.tsv")) if not l.startswith("#")]:
        fail("the changed feature kept its old indices")
    if not filecmp.cmp(os.path.join(after, "user.tsv"), os.path.join(after2, "user.tsv"),
                       shallow=False):
        fail("user changed in the second migrate")

    # a state dir of the release before (snapshot version 6, no input
    # fingerprints) loads with the same indices, and a rewrite makes it 7
    fix = os.path.join(SRC, "tests", "offline", "fixtures", "v6_clicks")
    fcfg = os.path.join(fix, "clicks.yaml")
    st6 = os.path.join(TMP, "v6state")
    os.makedirs(st6, exist_ok=True)
    with open(os.path.join(fix, "clicks.vocab"), "rb") as f:
        old_bytes = f.read()
    if struct.unpack_from("<I", old_bytes, 8)[0] != 6:
        fail("the fixture is not a version 6 snapshot")
    with open(os.path.join(st6, "clicks.vocab"), "wb") as f:
        f.write(old_bytes)
    proc6 = os.path.join(TMP, "v6proc")
    run(["process", "--config", fcfg, "--input", os.path.join(fix, "events.jsonl"), "--output",
         proc6, "--no-progress"])
    for tag, extra in (("as written", []), ("rewritten", ["migrate"])):
        if extra:
            run(["vocab", "migrate", "--from", fcfg, "--config", fcfg, "--state", st6])
            with open(os.path.join(st6, "clicks.vocab"), "rb") as f:
                if struct.unpack_from("<I", f.read(), 8)[0] != 7:
                    fail("the rewritten snapshot is not version 7")
        exp = os.path.join(TMP, "v6exp-" + str(len(extra)))
        run(["vocab", "export", "--config", fcfg, "--state", st6, "--output", exp])
        for name in sorted(os.listdir(os.path.join(proc6, "vocab"))):
            if not filecmp.cmp(os.path.join(proc6, "vocab", name), os.path.join(exp, name),
                               shallow=False):
                fail("version 6 snapshot (%s): %s differs from today's process" % (tag, name))

    # usage
    p = run(["vocab", "migrate", "--config", new, "--state", st], rc=2)
    if "--from OLD_CONFIG is required" not in p.stderr:
        fail("--from missing: %s" % p.stderr)
    other = write("other.yaml", new_text.replace("name: clicks", "name: other"))
    p = run(["vocab", "migrate", "--from", mod, "--config", other, "--state", st], rc=2)
    if "name the same one with --pipeline" not in p.stderr:
        fail("another pipeline's name: %s" % p.stderr)
    shared_table(ev)
    print("test_vocab_migrate: ok (4 columns kept byte for byte, 1 new, 1 dropped; lookups equal; "
          "a history joining the item's table)")


main()
