"""piperec.client — the trainer-stream client (numpy, zero copy).

The implementation lives in the top-level module ``piperec_client`` (one
file that trainers may also copy on its own); this module re-exports it so
the package has one import path: ``from piperec.client import TrainerClient``.
"""

from piperec_client import (PROTOCOL_VERSION, Batch, ServerError, TrainerClient,  # noqa: F401
                            decode_batch, main, RecycledTracker, ConnectionClosed, decode_raw,
                            LAYOUT_PROTOBUF, LAYOUT_RAW, dense_slices, UnknownFeature)

__all__ = ["TrainerClient", "Batch", "ServerError", "PROTOCOL_VERSION", "decode_batch", "main", "RecycledTracker",
           "ConnectionClosed", "decode_raw", "LAYOUT_PROTOBUF", "LAYOUT_RAW", "dense_slices",
           "UnknownFeature"]
