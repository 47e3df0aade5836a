#!/bin/sh
# run_compat.sh — the Python package's tests (tests/python, the two
# examples' long live-stream runs left to python_torch) with NumPy 2 and
# torch 2 behaviour made to fail loudly on the Debian numpy 1.24 / torch 1.13
# (issue 22: the package must work on both generations; the 2.x versions are
# not installable here, and bench/device_gpu.sh runs the same tests on them):
#   NPY_PROMOTION_STATE=weak_and_warn  numpy 1.24's switch for NEP 50 (2.0's
#       scalar promotion): Python ints out of a small dtype's range raise
#       OverflowError as in 2.x, and results whose dtype changes warn;
#   error::DeprecationWarning          what 1.24 deprecates and 2.0 removed or
#       changed (out-of-bound integer conversion, ...), in the tests and in
#       every client process they start (PYTHONWARNINGS is inherited);
#   "result dtype changed", "NumPy array is not writable"  as errors: a NEP 50
#       dtype change, and torch.from_numpy() on read-only memory.
# The names NumPy 2.0 removed without a 1.24 warning (np.float_, np.NaN, ...)
# are checked statically by check_compat_names.py (ctest python_compat_names).
set -eu
export PYTHONPATH="$PR_SOURCE_DIR/clients/python"
export PYTHONDONTWRITEBYTECODE=1
export NPY_PROMOTION_STATE=weak_and_warn
W="error::DeprecationWarning,error:result dtype changed:UserWarning"
W="$W,error:The given NumPy array is not writable:UserWarning"
export PYTHONWARNINGS="$W"
cd "$PR_TMP"
/usr/bin/python3 -c 'import numpy; assert numpy._get_promotion_state() == "weak_and_warn", "NEP 50 emulation off"' 2>/dev/null ||
    echo "run_compat.sh: this numpy has no NEP 50 switch (numpy 2.x has NEP 50 built in)"
exec /usr/bin/python3 -m pytest -q -p no:cacheprovider -W error::DeprecationWarning \
    -W "error:result dtype changed:UserWarning" \
    --ignore="$PR_SOURCE_DIR/tests/python/test_example.py" \
    --ignore="$PR_SOURCE_DIR/tests/python/test_example_jagged.py" \
    "$PR_SOURCE_DIR/tests/python" "$@"
