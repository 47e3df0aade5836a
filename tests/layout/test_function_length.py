#!/usr/bin/python3
"""test_function_length.py — no product function over 120 lines (issue 18).

Finds every function definition in the product's C sources (the component
folders below; not tests/ or bench/) and fails naming each one longer than
MAX_LINES, counted from the line with the function's name to its closing
brace, both included. A function's length is read from the source with
comments, strings and preprocessor lines blanked out, so a brace inside
them does not count.

ALLOWED lists the functions known to be over the limit and not split yet
(each with the length it had when listed). It is a to-do list to empty, not
an exemption: an entry fails the test when its function grows, and when it
shrinks to the limit or disappears (then delete the entry).

Environment: PR_SOURCE_DIR (source tree).
"""
import os
import re
import sys

SRC = os.environ.get("PR_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
MAX_LINES = 120
FOLDERS = ["common", "kafka", "fpga_engine", "ingest", "vocab", "batcher", "sinks", "config",
           "service", "tools/gen", "cli"]

# "folder/file.c:function" -> its length when listed. Functions in folders
# other engineers were changing when the test was written (issue 18
# leftovers); split them when their work has landed, then delete the entry.
ALLOWED = {}


def blank(text):
    """The source with comments, string and char literals and preprocessor
    lines replaced by spaces (newlines kept, so line numbers hold)."""
    out = []
    i, n = 0, len(text)
    line_start = True
    while i < n:
        c = text[i]
        if line_start and c in " \t":
            out.append(c)
            i += 1
            continue
        if line_start and c == "#":  # a directive, with its continuation lines
            while i < n and text[i] != "\n":
                if text[i] == "\\" and i + 1 < n and text[i + 1] == "\n":
                    out.append(" \n")
                    i += 2
                    continue
                out.append(" ")
                i += 1
            continue
        line_start = c == "\n"
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


HEAD = re.compile(r"([A-Za-z_]\w*)\s*\(")


def functions(text):
    """(name, first line, last line) of every function defined in C source."""
    code = blank(text)
    found = []
    depth = 0
    i = 0
    top_start = 0  # where the current top-level declaration began
    linkage = 0  # open extern "C" { blocks: their braces do not nest
    while i < len(code):
        c = code[i]
        if depth == 0 and c == "{" and re.search(r"\bextern\s*$", code[top_start:i]):
            linkage += 1
            top_start = i = i + 1
            continue
        if depth == 0 and c == "}" and linkage:
            linkage -= 1
            top_start = i = i + 1
            continue
        if c == "{":
            if depth == 0:
                head = code[top_start:i]
                name = function_name(head)
                if name:
                    first = code.count("\n", 0, top_start + head.rfind(name + "(") if
                                       head.rfind(name + "(") >= 0 else top_start) + 1
                    end = matching_brace(code, i)
                    last = code.count("\n", 0, end) + 1
                    found.append((name, first, last))
                    i = end + 1
                    top_start = i
                    continue
            depth += 1
        elif c == "}":
            depth -= 1
        elif c == ";" and depth == 0:
            top_start = i + 1
        if depth == 0 and c == "}":
            top_start = i + 1
        i += 1
    return found


def function_name(head):
    """The name a function definition's head declares, or None (struct,
    initializer, ...)."""
    h = head.strip()
    if not h.endswith(")") or "=" in h:
        return None
    # the parameter list: from the ')' back to its '('
    depth = 0
    for k in range(len(h) - 1, -1, -1):
        if h[k] == ")":
            depth += 1
        elif h[k] == "(":
            depth -= 1
            if depth == 0:
                m = re.search(r"([A-Za-z_]\w*)\s*$", h[:k])
                if not m or m.group(1) in ("if", "while", "for", "switch", "return", "sizeof"):
                    return None
                return m.group(1)
    return None


def matching_brace(code, i):
    depth = 0
    for k in range(i, len(code)):
        if code[k] == "{":
            depth += 1
        elif code[k] == "}":
            depth -= 1
            if depth == 0:
                return k
    return len(code) - 1


def product_sources():
    for folder in FOLDERS:
        for root, _dirs, files in os.walk(os.path.join(SRC, folder)):
            for f in sorted(files):
                if f.endswith(".c"):
                    yield os.path.join(root, f)


def self_check():
    """The finder on a made-up source: braces in comments, strings, chars and
    directives do not count; structs, initializers and extern "C" are not
    functions."""
    body = "".join("    x += %d; /* } */\n" % k for k in range(117))
    src = ('#define M { \\\n  }\nstruct s { int a; };\nstatic const int t[] = {1, 2};\n'
           'extern "C" {\nstatic int\nlong_one(int x)\n{\n    const char *s = "{{";\n'
           "    char c = '}';\n" + body + "    return x;\n}\n}\n"
           "void short_one(void) { if (1) { } }\n")
    got = [(n, b - a + 1) for n, a, b in functions(src)]
    want = [("long_one", 123), ("short_one", 1)]
    return [] if got == want else ["self-check: found %s, expected %s" % (got, want)]


def main():
    errors = self_check()
    seen = set()
    longest = []
    for path in product_sources():
        rel = os.path.relpath(path, SRC)
        with open(path, encoding="utf-8", errors="replace") as fh:
            text = fh.read()
        for name, first, last in functions(text):
            length = last - first + 1
            key = "%s:%s" % (rel, name)
            longest.append((length, key))
            if key in ALLOWED:
                seen.add(key)
                if length > ALLOWED[key]:
                    errors.append("%s:%d: %s is %d lines, up from %d on the allow-list: split it"
                                  % (rel, first, name, length, ALLOWED[key]))
                elif length <= MAX_LINES:
                    errors.append("%s:%d: %s is %d lines now: delete it from ALLOWED"
                                  % (rel, first, name, length))
            elif length > MAX_LINES:
                errors.append("%s:%d: %s is %d lines (at most %d): split it"
                              % (rel, first, name, length, MAX_LINES))
    for key in sorted(set(ALLOWED) - seen):
        errors.append("%s: on the allow-list but not found: delete the entry" % key)
    if len(longest) < 500:  # the scan itself broke (folders moved?)
        errors.append("only %d functions found under %s" % (len(longest), ", ".join(FOLDERS)))
    for e in errors:
        print("FAIL " + e)
    longest.sort(reverse=True)
    print("%d functions; longest: %s" % (len(longest), ", ".join(
        "%s (%d)" % (k, n) for n, k in longest[:5])))
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
