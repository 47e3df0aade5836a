#!/usr/bin/python3
"""check_compat_names.py — a static check that the Python we ship or test
with uses no NumPy or PyTorch API that NumPy 2.x / torch 2.x removed or
changed (issue 22: the package must work on numpy 1.24 + torch 1.13, the
Debian versions CI has, and on numpy 2.x + torch 2.x, which a GPU host has).

Why static: the 2.x versions are not installable here (no PyPI), and most
NumPy 2.0 removals (np.float_, np.NaN, np.product, ...) raise no warning on
numpy 1.24, so no test run on 1.24 can see them. The check parses every file
(ast, not a text search: comments and strings never match) and flags:

- attributes of a numpy module alias (``np.float_``) or ``from numpy import``
  of a name removed or moved in NumPy 2.0 (the REMOVED table, with what to
  use instead);
- ``np.array(..., copy=False)``: in NumPy 2 it means "never copy" and raises
  where 1.x silently copied (use ``np.asarray``);
- array methods gone in 2.0 (``a.newbyteorder()``, ``a.itemset()``,
  ``a.ptp()``, ``a.tostring()``); ``np.dtype(...).newbyteorder()`` is fine;
- torch's legacy typed constructors (``torch.ByteTensor(...)``), the
  deprecated ``Tensor.storage()`` (TypedStorage warning on 2.x),
  ``torch._six`` (removed in 2.0) and other removed functions.

Usage: check_compat_names.py [FILE_OR_DIR ...] (default: the shipped and
tested Python: clients/python, examples, bench, tests; with the default, a
.py file git tracks outside those folders is a finding too, so nothing
escapes the check); --self-test checks the checker on snippets. Exit 1 with
one line per finding.
"""

import ast
import os
import sys

SRC = os.environ.get("PR_SOURCE_DIR", os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))
DEFAULT_ROOTS = ["clients/python", "examples", "bench", "tests"]

_F64 = "np.float64"
_C128 = "np.complex128"
# name -> what to use instead (NumPy 2.0 release notes, NEP 52)
REMOVED = {
    "float_": _F64, "complex_": _C128, "longfloat": "np.longdouble", "singlecomplex": "np.complex64",
    "cfloat": _C128, "longcomplex": "np.clongdouble", "clongfloat": "np.clongdouble",
    "string_": "np.bytes_", "unicode_": "np.str_", "Inf": "np.inf", "Infinity": "np.inf",
    "infty": "np.inf", "NaN": "np.nan", "NAN": "np.nan", "NINF": "-np.inf", "PINF": "np.inf",
    "NZERO": "-0.0", "PZERO": "0.0", "product": "np.prod", "cumproduct": "np.cumprod",
    "alltrue": "np.all", "sometrue": "np.any", "row_stack": "np.vstack",
    "asfarray": "np.asarray(x, dtype=np.float64)", "find_common_type": "np.result_type",
    "cast": "np.asarray(x, dtype=...)", "in1d": "np.isin", "trapz": "np.trapezoid (2.x) or a sum",
    "msort": "np.sort(a, axis=0)", "round_": "np.round", "int0": "np.intp", "uint0": "np.uintp",
    "bool8": "np.bool_", "object0": "np.object_", "str0": "np.str_", "bytes0": "np.bytes_",
    "void0": "np.void", "issubclass_": "issubclass", "issctype": "isinstance(x, type)",
    "obj2sctype": "np.dtype(x).type", "sctype2char": "np.dtype(x).char", "sctypes": "explicit dtypes",
    "maximum_sctype": "an explicit dtype", "set_string_function": "np.set_printoptions",
    "safe_eval": "ast.literal_eval", "recfromcsv": "np.genfromtxt", "recfromtxt": "np.genfromtxt",
    "deprecate": "warnings.warn", "deprecate_with_doc": "warnings.warn", "disp": "print",
    "lookfor": "the docs", "who": "nothing", "source": "inspect.getsource",
    "byte_bounds": "np.lib.array_utils.byte_bounds (2.x)", "tracemalloc_domain": "nothing",
    "mat": "np.asmatrix", "geterrobj": "np.errstate", "seterrobj": "np.errstate",
    "fastCopyAndTranspose": "a.T.copy()", "set_numeric_ops": "nothing", "DataSource": "open()",
    "compare_chararrays": "np.char", "format_parser": "np.rec.format_parser", "compat": "nothing",
    "asscalar": "a.item()", "alen": "len()", "loads": "pickle.loads", "MachAr": "np.finfo",
    "bool": "bool", "int": "int", "float": "float", "complex": "complex", "object": "object",
    "str": "str", "long": "int", "unicode": "str", "core": "numpy's public API (np.core is np._core)",
}
REMOVED_METHODS = {
    "newbyteorder": "a.view(a.dtype.newbyteorder(...))", "itemset": "a[idx] = v",
    "ptp": "np.ptp(a)", "tostring": "a.tobytes()",
}
TORCH_LEGACY = {
    "ByteTensor", "CharTensor", "ShortTensor", "IntTensor", "LongTensor", "HalfTensor", "FloatTensor",
    "DoubleTensor", "BoolTensor", "BFloat16Tensor",
}
TORCH_REMOVED = {
    "_six": "the standard library (torch._six is gone in 2.0)", "lstsq": "torch.linalg.lstsq",
    "symeig": "torch.linalg.eigh", "eig": "torch.linalg.eig", "solve": "torch.linalg.solve",
    "matrix_rank": "torch.linalg.matrix_rank", "chain_matmul": "torch.linalg.multi_dot",
    "set_default_tensor_type": "torch.set_default_dtype / device",
}
DTYPE_CALLS = {"dtype"}  # np.dtype(x).newbyteorder() is the dtype method, kept in 2.0


class _Checker(ast.NodeVisitor):
    def __init__(self, path):
        self.path, self.found = path, []
        self.np, self.torch = set(), set()

    def flag(self, node, msg):
        self.found.append("%s:%d: %s" % (self.path, node.lineno, msg))

    def visit_Import(self, node):
        for a in node.names:
            if a.name == "numpy":
                self.np.add(a.asname or "numpy")
            elif a.name == "torch":
                self.torch.add(a.asname or "torch")
            elif a.name.startswith("torch._six"):
                self.flag(node, "import %s: %s" % (a.name, TORCH_REMOVED["_six"]))
            elif a.name.startswith("numpy.core"):
                self.flag(node, "import %s: %s" % (a.name, REMOVED["core"]))
        self.generic_visit(node)

    def visit_ImportFrom(self, node):
        mod = node.module or ""
        if mod == "numpy":
            for a in node.names:
                if a.name in REMOVED:
                    self.flag(node, "from numpy import %s: removed in NumPy 2.0, use %s"
                              % (a.name, REMOVED[a.name]))
        elif mod.startswith("numpy.core"):
            self.flag(node, "from %s: %s" % (mod, REMOVED["core"]))
        elif mod == "torch._six" or (mod == "torch" and any(a.name == "_six" for a in node.names)):
            self.flag(node, "torch._six: %s" % TORCH_REMOVED["_six"])
        self.generic_visit(node)

    def _is(self, node, aliases):
        return isinstance(node, ast.Name) and node.id in aliases

    def visit_Attribute(self, node):
        if self._is(node.value, self.np) and node.attr in REMOVED:
            self.flag(node, "np.%s: removed in NumPy 2.0, use %s" % (node.attr, REMOVED[node.attr]))
        elif self._is(node.value, self.torch) and node.attr in TORCH_REMOVED:
            self.flag(node, "torch.%s: removed or deprecated in torch 2.x, use %s"
                      % (node.attr, TORCH_REMOVED[node.attr]))
        self.generic_visit(node)

    def visit_Call(self, node):
        f = node.func
        if isinstance(f, ast.Attribute):
            if self._is(f.value, self.np) and f.attr == "array":
                for k in node.keywords:
                    if k.arg == "copy" and isinstance(k.value, ast.Constant) and k.value.value is False:
                        self.flag(node, "np.array(copy=False) means 'never copy' in NumPy 2 (raises "
                                  "where 1.x copied): use np.asarray")
            elif self._is(f.value, self.torch) and f.attr in TORCH_LEGACY:
                self.flag(node, "torch.%s(...): legacy constructor, use torch.tensor/empty(dtype=...)"
                          % f.attr)
            elif f.attr in REMOVED_METHODS and not self._dtype_call(f.value) \
                    and not self._is(f.value, self.np):
                self.flag(node, ".%s(): ndarray method removed in NumPy 2.0, use %s"
                          % (f.attr, REMOVED_METHODS[f.attr]))
            elif f.attr == "storage" and not node.args and not node.keywords:
                self.flag(node, ".storage(): TypedStorage is deprecated in torch 2.x, use "
                          "untyped_storage() (2.x) or data_ptr()/numpy()")
        self.generic_visit(node)

    def _dtype_call(self, node):
        """np.dtype(...), or a .dtype attribute: dtype objects keep newbyteorder."""
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            return node.func.attr in DTYPE_CALLS
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            return node.func.id in DTYPE_CALLS
        return isinstance(node, ast.Attribute) and node.attr == "dtype"


def check_source(text, path="<src>"):
    c = _Checker(path)
    c.visit(ast.parse(text, path))
    return c.found


def python_files(roots):
    for root in roots:
        if os.path.isfile(root):
            yield root
            continue
        for d, dirs, files in os.walk(root):
            dirs[:] = sorted(x for x in dirs if not x.startswith(".") and x != "__pycache__")
            for f in sorted(files):
                if f.endswith(".py"):
                    yield os.path.join(d, f)


SELF_TEST = [
    ("import numpy as np\nx = np.float_(1)\n", 1),
    ("import numpy\nnumpy.NaN + numpy.product([1])\n", 2),
    ("from numpy import alltrue, float64\n", 1),
    ("import numpy as np\na = np.array(b, copy=False)\nc = np.asarray(b)\n", 1),
    ("import numpy as np\na = np.zeros(3)\na.newbyteorder('<')\nnp.dtype('<i4').newbyteorder('>')\n"
     "a.dtype.newbyteorder('>')\n", 1),
    ("import torch\nt = torch.ByteTensor(3)\ns = t.storage()\nimport torch._six\n", 3),
    ("import numpy as np\n# np.float_ in a comment\ns = 'np.NaN in a string'\nnp.float64(1)\n", 0),
    ("from numpy.core.multiarray import normalize_axis_index\n", 1),
]


def self_test():
    bad = 0
    for src, want in SELF_TEST:
        got = check_source(src)
        if len(got) != want:
            print("self-test: %d findings, want %d, in:\n%s%s" % (len(got), want, src, "\n".join(got)))
            bad += 1
    return bad


def tracked_outside(roots):
    """Python files git tracks in SRC that no root covers (so a new .py
    elsewhere, e.g. under tools/, cannot escape the check); [] when SRC is
    not a git checkout (a source tarball)."""
    import subprocess
    try:
        out = subprocess.run(["git", "-C", SRC, "ls-files", "*.py"], capture_output=True, text=True,
                             timeout=30)
    except OSError:
        return []
    if out.returncode != 0:
        return []
    under = [os.path.relpath(r, SRC).rstrip("/") + "/" for r in roots]
    return [f for f in out.stdout.split() if not any(f.startswith(u) for u in under)]


def main(argv):
    if argv[:1] == ["--self-test"]:
        return 1 if self_test() else 0
    if self_test():
        return 1
    roots = argv or [os.path.join(SRC, r) for r in DEFAULT_ROOTS]
    found, n = [], 0
    for path in python_files(roots):
        with open(path, encoding="utf-8") as f:
            text = f.read()
        n += 1
        found += check_source(text, os.path.relpath(path, SRC))
    if not argv:
        found += ["%s: tracked Python outside %s: add its folder to DEFAULT_ROOTS" % (f, DEFAULT_ROOTS)
                  for f in tracked_outside(roots)]
    for line in found:
        print(line)
    print("check_compat_names: %d files, %d findings" % (n, len(found)))
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
