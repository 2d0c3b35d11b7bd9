"""rlmesh.wire: the msgpack-plus-raw-frames codec, the message types, and sockets.

Knows nothing about RL or actors.
"""

from .codec import DecodeError, EncodeError, Limits, decode, encode
from .messages import PROTOCOL_VERSION, ProtocolError, VersionMismatch

__all__ = [
    "DecodeError", "EncodeError", "Limits", "decode", "encode",
    "PROTOCOL_VERSION", "ProtocolError", "VersionMismatch",
]
