"""The package installs offline with Debian's pip (no index, no build
isolation) and keeps the single-file client importable."""

import os
import shutil
import subprocess
import sys

SRC = os.environ.get("PR_SOURCE_DIR", os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))


def test_pip_install_offline(tmp_path):
    src = tmp_path / "src"
    shutil.copytree(os.path.join(SRC, "clients", "python"), src,
                    ignore=shutil.ignore_patterns("__pycache__", "build", "*.egg-info"))
    site = tmp_path / "site"
    p = subprocess.run([sys.executable, "-m", "pip", "install", "--no-build-isolation", "--no-index",
                        "--no-deps", "--quiet", "--target", str(site), str(src)],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    code = ("import sys; sys.path.insert(0, %r)\n"
            "import piperec, piperec_client, piperec.client\n"
            "assert piperec.TrainerClient is piperec_client.TrainerClient\n"
            "assert piperec.__file__.startswith(%r)\n"
            "try:\n    import torch\nexcept ImportError:\n    torch = None\n"
            "if torch is not None:\n"
            "    import piperec.torch as pt\n"
            "    assert pt.StreamDataset and pt.grow_embeddings\n"
            "print('ok')\n") % (str(site), str(site))
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=str(tmp_path),
                       env=env)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stdout + r.stderr


def test_single_file_client_still_importable():
    sys.path.insert(0, os.path.join(SRC, "clients", "python"))
    import piperec_client
    assert hasattr(piperec_client, "TrainerClient") and hasattr(piperec_client, "decode_batch")
