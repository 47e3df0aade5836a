#!/usr/bin/python3
"""test_layers.py — the layout rules of docs/architecture.md, checked on the tree.

1. Includes: a product source may include headers of its own component (any)
   and the public headers (`<comp>/include/`) of the components below it in
   the layer map; never a private header of another component.
2. Symbols: every `pr_*` symbol a component's static library leaves undefined
   is defined by itself or by a library below it (so a lower layer never uses
   a name a higher one defines). Read with `nm` from the build tree.
3. Public names: no `_create`/`_destroy` constructors in public headers
   (one constructor style: `_new`/`_free`, `_init`/`_fini`).

Environment: PR_SOURCE_DIR (source tree), PIPEREC (the binary, whose
directory is the build tree).
"""
import os
import re
import subprocess
import sys

SRC = os.environ.get("PR_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.path.dirname(os.environ["PIPEREC"]) if "PIPEREC" in os.environ else None

# component -> (folder, library, components it may use)
LAYERS = {
    "common": ("common", "pr_common", []),
    "schemas": ("schemas", "pr_schemas", []),
    "kafka": ("kafka", "pr_kafka", ["common"]),
    "engine": ("fpga_engine", "pr_engine", ["common"]),
    "ingest": ("ingest", "pr_ingest", ["kafka", "engine", "schemas", "common"]),
    "vocab": ("vocab", "pr_vocab", ["ingest", "kafka", "engine", "schemas", "common"]),
    "batcher": ("batcher", "pr_batcher", ["engine", "schemas", "common"]),
    "sinks": ("sinks", "pr_sinks", ["batcher", "kafka", "engine", "schemas", "common"]),
    "config": ("config", "pr_config",
               ["sinks", "batcher", "vocab", "ingest", "engine", "common"]),
    "service": ("service", "pr_service",
                ["sinks", "batcher", "vocab", "ingest", "config", "engine", "schemas",
                 "common"]),
    "gen": ("tools/gen", "pr_gen", ["config", "engine", "schemas", "common"]),
    "cli": ("cli", "pr_cli",
            ["service", "gen", "sinks", "batcher", "vocab", "ingest", "kafka", "config",
             "engine", "schemas", "common"]),
}

errors = []


def closure(comp):
    seen, todo = set(), [comp]
    while todo:
        c = todo.pop()
        if c in seen:
            continue
        seen.add(c)
        todo.extend(LAYERS[c][2])
    return seen


def component_headers(comp):
    """(public, private) header names of a component."""
    folder = os.path.join(SRC, LAYERS[comp][0])
    pub, priv = set(), set()
    for root, _dirs, files in os.walk(folder):
        for f in files:
            if f.endswith(".h"):
                (pub if os.path.basename(root) == "include" else priv).add(f)
    if comp == "schemas":
        pub |= {p[:-6] + ".pb-c.h" for p in os.listdir(folder) if p.endswith(".proto")}
        pub.add("descriptor.pb-c.h")  # google/protobuf/descriptor.proto, compiled there too
    return pub, priv


def check_includes():
    headers = {c: component_headers(c) for c in LAYERS}
    owner_pub = {}
    owner_priv = {}
    for c, (pub, priv) in headers.items():
        for h in pub:
            owner_pub.setdefault(h, set()).add(c)
        for h in priv:
            owner_priv.setdefault(h, set()).add(c)
    inc = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
    for comp, (folder, _lib, _deps) in LAYERS.items():
        allowed = closure(comp)
        for root, _dirs, files in os.walk(os.path.join(SRC, folder)):
            for f in files:
                if not f.endswith((".c", ".h", ".cpp")):
                    continue
                path = os.path.join(root, f)
                rel = os.path.relpath(path, SRC)
                for name in inc.findall(open(path, encoding="utf-8").read()):
                    base = os.path.basename(name)
                    if os.path.exists(os.path.join(root, name)):
                        continue  # a file beside it (the HLS top includes the kernel source)
                    if base in headers[comp][0] or base in headers[comp][1]:
                        continue
                    owners = owner_pub.get(base, set())
                    if owners & allowed:
                        continue
                    if owners:
                        errors.append("%s includes %s, public header of %s, a layer it may not use"
                                      % (rel, name, "/".join(sorted(owners))))
                    elif base in owner_priv:
                        errors.append("%s includes %s, a private header of %s"
                                      % (rel, name, "/".join(sorted(owner_priv[base]))))
                    else:
                        errors.append("%s includes %s, which no component provides" % (rel, name))


def nm(lib):
    out = subprocess.run(["nm", "-g", "--defined-only", lib], capture_output=True, text=True,
                         check=True).stdout
    defined = {l.split()[-1] for l in out.splitlines() if len(l.split()) == 3}
    out = subprocess.run(["nm", "-g", "--undefined-only", lib], capture_output=True,
                         text=True, check=True).stdout
    undefined = {l.split()[-1] for l in out.splitlines()
                 if l.strip() and not l.rstrip().endswith(":")}
    return defined, undefined


def check_symbols():
    if not BUILD:
        print("skip symbols: PIPEREC not set")
        return
    defs, undefs = {}, {}
    for comp, (folder, lib, _deps) in LAYERS.items():
        path = os.path.join(BUILD, folder, "lib%s.a" % lib)
        if not os.path.exists(path):
            errors.append("missing library %s" % path)
            continue
        defs[comp], undefs[comp] = nm(path)
    for comp in defs:
        allowed = closure(comp)
        visible = set().union(*(defs[c] for c in allowed if c in defs))
        for sym in sorted(undefs[comp]):
            if not sym.startswith(("pr_", "pr__", "PR_", "piperec__")):
                continue
            if sym in visible:
                continue
            users = [c for c in defs if sym in defs[c]]
            errors.append("%s uses %s, defined by %s" % (LAYERS[comp][1], sym,
                                                         ", ".join(users) or "nobody"))


def check_names():
    decl = re.compile(r"\b(pr_[a-z0-9_]+_(?:create|destroy))\s*\(")
    for comp, (folder, _lib, _deps) in LAYERS.items():
        inc = os.path.join(SRC, folder, "include")
        if not os.path.isdir(inc):
            continue
        for f in os.listdir(inc):
            for m in decl.findall(open(os.path.join(inc, f), encoding="utf-8").read()):
                errors.append("%s/include/%s: %s: constructors are _new/_free or _init/_fini"
                              % (folder, f, m))


check_includes()
check_symbols()
check_names()
for e in errors:
    print("FAIL " + e)
print("layout: %d problem(s)" % len(errors))
sys.exit(1 if errors else 0)
