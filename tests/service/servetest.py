"""servetest.py — what the `piperec serve` script tests share: the binary and
folders from the environment (pr_script_test: $PIPEREC, $PR_TMP,
$PR_SOURCE_DIR), failing with a message (the server killed first), running
a piperec command, and `piperec process` of some event lines."""
import os
import subprocess
import sys

PIPEREC = os.environ["PIPEREC"]
TMP = os.environ["PR_TMP"]
SRC = os.environ["PR_SOURCE_DIR"]
EXAMPLE = os.path.join(SRC, "examples", "clickstream.yaml")


def fail(msg, proc=None):
    """Say why and exit 1 at once (client threads may still run)."""
    print("FAIL: " + msg, file=sys.stderr, flush=True)
    if proc:
        proc.kill()
    os._exit(1)


def run(args, stdin=None):
    p = subprocess.run([PIPEREC] + args, input=stdin, capture_output=True, text=True)
    if p.returncode != 0:
        fail("%s: exit %d\n%s" % (" ".join(args), p.returncode, p.stderr))
    return p


def process(lines, out):
    """`piperec process` of the clickstream example's event lines into out."""
    path = out + ".jsonl"
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    run(["process", "--config", EXAMPLE, "--input", path, "--output", out, "--no-progress"])
