#!/bin/sh
# run_pytest.sh — pytest over tests/python (env from pr_script_test: PIPEREC,
# PR_SOURCE_DIR, PR_TMP; BT_SERVE from CMake). Debian's python3 only.
set -eu
export PYTHONPATH="$PR_SOURCE_DIR/clients/python"
export PYTHONDONTWRITEBYTECODE=1
cd "$PR_TMP"
exec /usr/bin/python3 -m pytest -q -p no:cacheprovider "$PR_SOURCE_DIR/tests/python" "$@"
