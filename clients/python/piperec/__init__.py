"""piperec — trainer-side Python package for piperec's trainer stream.

``piperec.TrainerClient`` is the standard-library + numpy client of
``docs/trainer-protocol.md`` (the same code as the single-file
``piperec_client`` module, which stays importable on its own).
``piperec.torch`` adds the PyTorch side (import it explicitly; it needs
torch): ``StreamDataset``, ``StreamDataLoader``, ``grow_embeddings``.
"""

from piperec.client import (PROTOCOL_VERSION, Batch, ServerError, TrainerClient,  # noqa: F401
                            RecycledTracker, decode_batch, ConnectionClosed, decode_raw)

__all__ = ["TrainerClient", "Batch", "ServerError", "PROTOCOL_VERSION", "decode_batch",
           "RecycledTracker", "ConnectionClosed", "decode_raw"]
__version__ = "0.1.0"
