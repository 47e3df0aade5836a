#!/usr/bin/python3
"""doc_examples.py — every configuration example in the docs loads, and every
`piperec <command> --flag` the docs show exists.

A user copies the docs' examples verbatim, so they are checked like code:

1. Every ```yaml fence of README.md and docs/*.md, and every examples/*.yaml,
   is loaded with `piperec explain --config` (the whole config load: keys,
   types, operator chains, placement, descriptor sets and Avro schemas read
   and every feature path checked against them; nothing is started). A whole
   config (`pipelines:` at the top) loads as it is. A fragment is wrapped into
   the smallest config of its shape, decided by its top-level keys against the
   generated key reference (`piperec explain --reference`): top-level keys
   (`http:`, `engine:`) beside one pipeline; pipeline keys (`source:`,
   `sinks:`, `transform:`) inside one; schema keys (`labels:`, `dense:`,
   `filter:`) as its `schema:`. A fragment without a feature of its own gets
   one (a schema declares at least one). An error names the doc's file:line.
2. Every ```proto fence compiles with protoc; the one declaring `message Click`
   is the docs' click.desc (the file their Protobuf examples name).
3. A fence that holds no piperec config (a Helm values file, an example of an
   error) says so in a comment readers do not see, on the line before it:
   `<!-- doc-test: skip REASON -->`. The skipped blocks are listed. An
   untagged fence that starts like a config is an error: tag it ```yaml so it
   is checked.
4. Every `piperec <command> ...` line of a shell or untagged fence or of an
   example's comments, and every inline `piperec <command> --flag` span, uses
   only flags that the command's --help names.

Environment (pr_script_test): PIPEREC, PR_SOURCE_DIR, PR_TMP.
Exit 0 when all pass, 1 otherwise (every failure is printed first).
"""
import glob
import os
import re
import subprocess
import sys

import yaml

PIPEREC = os.environ["PIPEREC"]
SRC = os.environ["PR_SOURCE_DIR"]
TMP = os.environ["PR_TMP"]

FENCE = re.compile(r"^(\s*)```(\S*)\s*$")
SKIP = re.compile(r"^\s*<!--\s*doc-test:\s*skip\s+(.+?)\s*-->\s*$")
FILLER = "{ name: doc_filler, path: user.id, ops: [vocab] }"
SHELL = ("", "sh", "bash", "console", "shell")

failures = []
skipped = []
commands = []  # (where, command) checked against --help


def fail(where, msg):
    failures.append(f"{where}: {msg}")


class Block:
    def __init__(self, path, line, lang, lines, skip):
        self.path = path  # relative to SRC
        self.line = line  # 1-based line of the block's first content line
        self.lang = lang
        self.lines = lines
        self.skip = skip  # the skip marker's reason, or None

    def where(self, k=0):
        return f"{self.path}:{self.line + k}"


def fences(rel):
    """The fenced blocks of a markdown file, with the skip marker before each."""
    with open(os.path.join(SRC, rel), encoding="utf-8") as f:
        lines = f.read().split("\n")
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        j = i + 1
        while j < len(lines) and not re.match(r"^\s*```\s*$", lines[j]):
            j += 1
        p = i - 1
        while p >= 0 and not lines[p].strip():
            p -= 1
        s = SKIP.match(lines[p]) if p >= 0 else None
        yield Block(rel, i + 2, m.group(2), lines[i + 1 : j], s.group(1) if s else None)
        i = j + 1


def dedent(lines):
    ind = min((len(x) - len(x.lstrip()) for x in lines if x.strip()), default=0)
    return [x[ind:] for x in lines]


def reference_keys():
    """Top-level, pipeline and schema keys, from the generated key reference."""
    out = subprocess.run([PIPEREC, "explain", "--reference"], capture_output=True, text=True,
                         check=True).stdout
    top, pipe, schema = set(), set(), set()
    for m in re.finditer(r"^\| `([^`]+)` \|", out, re.M):
        k = m.group(1)
        if k.startswith("pipelines[]."):
            rest = k[len("pipelines[].") :]
            pipe.add(re.split(r"[.\[]", rest)[0])
            if rest.startswith("schema."):
                schema.add(re.split(r"[.\[]", rest[len("schema.") :])[0])
        else:
            top.add(re.split(r"[.\[]", k)[0])
    # The operator table's rows are operators, not keys.
    ops = set(re.findall(r"^\| `([a-z0-9_]+)` \|", out.split("\n\n", 1)[1], re.M)) \
        if "\n\n" in out else set()
    return top - ops, pipe, schema


def indent(body, n):
    return [(" " * n + x if x.strip() else x, k) for x, k in body]


def add_filler(out):
    """A feature under a block-style `schema:` that declares none of its own."""
    for i, (x, _) in enumerate(out):
        m = re.match(r"^(\s*)schema:\s*(#.*)?$", x)
        if not m:
            continue
        kids = [y for y, _ in out[i + 1 :] if y.strip()]
        ind = len(kids[0]) - len(kids[0].lstrip()) if kids else len(m.group(1)) + 2
        below = [y for y, _ in out[i + 1 :]
                 if y.strip() and len(y) - len(y.lstrip()) == ind]
        if not any(re.match(r"^\s*(dense|sparse):", y) for y in below):
            out.insert(i + 1, (" " * ind + "sparse: [ " + FILLER + " ]", None))
        return


def wrap(b, doc, top, pipe, schema):
    """The config as [(line, the block's line index or None)], or None when no
    shape fits."""
    body = [(x, k) for k, x in enumerate(dedent(b.lines))]
    keys = set(doc)
    if "pipelines" in keys or keys <= top:
        return body if "pipelines" in keys else body + [("pipelines:", None),
                                                         ("  - name: doc", None)]
    if keys <= pipe:
        out = [("pipelines:", None), ("  - name: doc", None)] + indent(body, 4)
        if "schema" in keys:
            add_filler(out)
        elif "transform" not in keys and \
                (doc.get("source") or {}).get("format") in ("json", "avro", "protobuf"):
            out += [("    schema:", None), ("      sparse: [ " + FILLER + " ]", None)]
        return out
    if keys <= schema:
        out = [("pipelines:", None), ("  - name: doc", None),
               ("    source: { format: json }", None), ("    schema:", None)] + indent(body, 6)
        add_filler(out)
        return out
    return None


def check_config(b, n, top, pipe, schema):
    where = b.where()
    try:
        doc = yaml.safe_load("\n".join(dedent(b.lines)))
    except yaml.YAMLError as e:
        fail(where, f"not YAML: {e}")
        return
    if not isinstance(doc, dict):
        fail(where, "not a mapping: mark it <!-- doc-test: skip REASON --> if it is no config")
        return
    lines = wrap(b, doc, top, pipe, schema)
    if lines is None:
        fail(where, f"keys {sorted(doc)} fit no config shape (top level, pipeline, schema)")
        return
    cfg = os.path.join(TMP, f"block{n}.yaml")
    with open(cfg, "w", encoding="utf-8") as f:
        f.write("\n".join(x for x, _ in lines) + "\n")
    r = subprocess.run([PIPEREC, "explain", "--config", cfg], capture_output=True, text=True,
                       cwd=TMP)
    if r.returncode == 0:
        return
    msg = r.stderr.strip() or f"exit {r.returncode}"

    def doc_line(m):  # name the doc's line, not the wrapper's
        nonlocal where
        n = int(m.group(1)) - 1
        k = lines[n][1] if n < len(lines) else None
        if k is None:
            return "(the test's wrapper):"
        if where == b.where():
            where = b.where(k)
        return f"{b.where(k)}:"

    msg = re.sub(re.escape(cfg) + r":(\d+):", doc_line, msg)
    msg = re.sub(r"^piperec explain: " + re.escape(where) + ": ", "", msg)
    fail(where, msg)


def check_proto(b, n):
    click = re.search(r"^\s*message Click\b", "\n".join(b.lines), re.M)
    name = "click.proto" if click else f"doc{n}.proto"
    with open(os.path.join(TMP, name), "w", encoding="utf-8") as f:
        f.write("\n".join(b.lines) + "\n")
    out = "click.desc" if click else f"doc{n}.desc"
    r = subprocess.run(["protoc", f"--descriptor_set_out={out}", "--include_imports", "-I", ".",
                        name], capture_output=True, text=True, cwd=TMP)
    if r.returncode != 0:
        fail(b.where(), "protoc: " + r.stderr.strip())


help_cache = {}


def help_flags(cmd):
    """The flags `piperec CMD --help` names."""
    if cmd not in help_cache:
        r = subprocess.run([PIPEREC] + cmd.split() + ["--help"], capture_output=True, text=True)
        help_cache[cmd] = set(re.findall(r"--[a-z][a-z0-9-]*", r.stdout + r.stderr))
    return help_cache[cmd]


def check_command(where, text):
    """`piperec CMD [SUB] ... --flag ...`: each flag in CMD's --help."""
    m = re.match(r"piperec\s+([a-z|]+)(?:\s+([a-z]+)\b)?", text)
    if not m or text[m.end(1) :].startswith(":"):  # a message: `piperec run: cfg.yaml:4: ...`
        return
    flags = set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", text))
    commands.append((where, text))
    for cmd in m.group(1).split("|"):
        full = cmd
        if cmd == "vocab" and m.group(2):
            full = f"vocab {m.group(2)}"
        known = help_flags(full)
        if not known:
            fail(where, f"'piperec {full}' has no --help listing flags")
            continue
        for fl in sorted(flags - known - {"--help"}):
            fail(where, f"piperec {full}: no flag {fl} in 'piperec {full} --help'")


def check_shell(b):
    """Command lines of a shell fence; indented lines below one continue it."""
    i = 0
    while i < len(b.lines):
        x = b.lines[i]
        m = re.search(r"(?:^\s*(?:\$\s+)?|\|\s*)(piperec\s+[a-z].*)$", x)
        if not m or x.lstrip().startswith("#"):
            i += 1
            continue
        text, ind = m.group(1), len(x) - len(x.lstrip())
        j = i + 1
        while j < len(b.lines) and (b.lines[j - 1].rstrip().endswith("\\") or (
                b.lines[j].strip() and len(b.lines[j]) - len(b.lines[j].lstrip()) > ind + 4)):
            text += " " + b.lines[j].strip()
            j += 1
        text = re.sub(r"\s#\s.*$", "", text)  # a trailing comment
        check_command(b.where(i), text)
        i = j


def looks_like_config(lines, known):
    body = [x for x in dedent(lines) if x.strip() and not x.lstrip().startswith("#")]
    m = re.match(r"^([a-z_]+):(\s|$)", body[0]) if body else None
    return m is not None and m.group(1) in known


def main():
    top, pipe, schema = reference_keys()
    docs = ["README.md"] + sorted(os.path.relpath(p, SRC)
                                  for p in glob.glob(os.path.join(SRC, "docs", "*.md")))
    blocks = [b for d in docs for b in fences(d)]
    for p in sorted(glob.glob(os.path.join(SRC, "examples", "*.yaml"))):
        with open(p, encoding="utf-8") as f:
            blocks.append(Block(os.path.relpath(p, SRC), 1, "yaml", f.read().split("\n"), None))

    # Paths in the docs are relative to the repository root (examples/clickstream.avsc).
    if not os.path.exists(os.path.join(TMP, "examples")):
        os.symlink(os.path.join(SRC, "examples"), os.path.join(TMP, "examples"))
    # The docs' .proto files first: their configs name the descriptor sets.
    for n, b in enumerate(blocks):
        if b.lang == "proto" and not b.skip:
            check_proto(b, n)

    n_configs = 0
    for n, b in enumerate(blocks):
        if b.skip:
            skipped.append(f"{b.where()} ({b.lang or 'untagged'}): {b.skip}")
            continue
        if b.lang in ("yaml", "yml"):
            check_config(b, n, top, pipe, schema)
            n_configs += 1
        elif b.lang == "" and looks_like_config(b.lines, top | pipe | schema):
            fail(b.where(), "an untagged fence that reads as a config: tag it ```yaml")
        if b.lang in SHELL:
            check_shell(b)

    # Inline spans in the prose, a span may wrap: `piperec vocab import --force`.
    for d in docs:
        with open(os.path.join(SRC, d), encoding="utf-8") as f:
            lines = f.read().split("\n")
        in_fence = False
        for k, x in enumerate(lines):  # fences blanked, line numbers kept
            if FENCE.match(x):
                in_fence = not in_fence
                lines[k] = ""
            elif in_fence:
                lines[k] = ""
        prose = "\n".join(lines)
        for m in re.finditer(r"`(piperec [a-z][^`]*--[^`]*)`", prose):
            line = prose.count("\n", 0, m.start()) + 1
            check_command(f"{d}:{line}", " ".join(m.group(1).split()))

    # The examples' comments: `#   piperec run --config examples/clickstream.yaml`.
    for b in blocks:
        if b.path.startswith("examples/"):
            for k, x in enumerate(b.lines):
                m = re.match(r"^#\s+(piperec\s+[a-z].*?)\s*(#.*)?$", x)
                if m:
                    check_command(b.where(k), m.group(1))
                for m in re.finditer(r"`(piperec [a-z][^`]*--[^`]*)`", x):
                    check_command(b.where(k), m.group(1))

    for s in skipped:
        print(f"skipped {s}")
    for f in failures:
        print(f"FAIL {f}")
    if os.environ.get("VERBOSE"):
        for w, c in commands:
            print(f"command {w}: {c}")
    print(f"doc_examples: {n_configs} configs, {len(commands)} piperec commands, "
          f"{len(skipped)} skipped, {len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
