"""piperec — trainer-side Python package for piperec's trainer stream.

``piperec.TrainerClient`` is the standard-library + numpy client of
``docs/trainer-protocol.md`` (the same code as the single-file
``piperec_client`` module, which stays importable on its own).
``piperec.torch`` adds the PyTorch side (import it explicitly; it needs
torch): ``StreamDataset``, ``StreamDataLoader``, ``grow_embeddings``.
``piperec.FileDataset`` (piperec.files, needs torch; imported on first use,
so ``import piperec`` stays numpy-only) reads ``piperec process`` /
``piperec consume --output`` directories and files-sink rolls as the same
batches.
"""

from piperec.client import (PROTOCOL_VERSION, Batch, ServerError, TrainerClient,  # noqa: F401
                            RecycledTracker, decode_batch, ConnectionClosed, decode_raw,
                            dense_slices)

__all__ = ["TrainerClient", "Batch", "ServerError", "PROTOCOL_VERSION", "decode_batch",
           "RecycledTracker", "ConnectionClosed", "decode_raw", "dense_slices"]
__version__ = "0.1.0"


def __getattr__(name):  # PEP 562: FileDataset needs torch, imported only when asked for
    if name == "FileDataset":
        from piperec.files import FileDataset
        return FileDataset
    raise AttributeError("module 'piperec' has no attribute %r" % (name,))
