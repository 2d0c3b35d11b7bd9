"""Encode Python values as ``[msgpack header, buffer, buffer, ...]`` frames and back.

Arrays and CPU tensors above ``inline_threshold`` bytes travel as their own frames, sent
and received without copying; smaller ones are inlined in the header. Nothing is pickled.
"""

from __future__ import annotations

import math
import sys
import threading
import warnings
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Sequence

import msgpack
import numpy as np

# Ext type codes inside the msgpack header.
_EXT_ARRAY = 1  # numpy array, payload in a separate frame
_EXT_ARRAY_INLINE = 2  # numpy array, payload inline
_EXT_TENSOR = 3  # torch tensor, payload in a separate frame
_EXT_TENSOR_INLINE = 4  # torch tensor, payload inline
_EXT_TUPLE = 5  # a tuple (msgpack alone would turn it into a list)
_EXT_OBJECTS = 6  # an object array: [shape, its entries as msgpack values] (a policy's strings)

# Every numeric dtype and bool, by numpy's byte-order-explicit name. Anything else (str,
# structured, datetime) is refused rather than pickled; an object array travels as its
# entries, each of which must be plain data itself (_EXT_OBJECTS).
ALLOWED_DTYPES = frozenset(
    np.dtype(n).str
    for n in (
        "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
        "float16", "float32", "float64", "complex64", "complex128",
    )
)

TORCH_DTYPE_NAMES = frozenset({
    "bool", "int8", "int16", "int32", "int64", "uint8",
    "float16", "bfloat16", "float32", "float64", "complex64", "complex128",
})


def _torch() -> Any:
    """torch if this process has imported it, else None.

    A value can only be a tensor if torch is loaded, so the codec never imports torch to
    encode: processes that do not use it (slim clients, fast-starting actors) skip its
    import cost entirely.
    """
    return sys.modules.get("torch")


@lru_cache(maxsize=None)
def _torch_dtype(name: str) -> Any:
    import torch

    return getattr(torch, name)

DEFAULT_INLINE_THRESHOLD = 64 * 1024
MAX_TUPLE_DEPTH = 64
DEFAULT_MAX_MESSAGE_BYTES = 1 << 30
DEFAULT_MAX_OBJECTS = 1 << 21


class EncodeError(TypeError):
    """A value that cannot cross the wire (unsupported type or dtype)."""


class DecodeError(ValueError):
    """Frames that do not form a valid message. The text says what was wrong."""


@dataclass(frozen=True)
class Limits:
    """Bounds applied when decoding frames that came from a socket."""

    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES  # header plus all buffers
    max_frames: int = 4096
    max_header_bytes: int = 16 << 20
    # Containers and their elements in a header (a list of n counts n + 1): bytes alone do
    # not bound memory, one byte of msgpack is an empty map of 64 bytes, and two 16 MB
    # headers of them took an env runner to 1.47 GB. See DEFAULT_MAX_OBJECTS.
    max_objects: int = DEFAULT_MAX_OBJECTS
    # Whether tensor-typed arrays are rebuilt as torch tensors. False: refused, and torch
    # is never imported for them (five such messages grew a policy server by 183 MB).
    tensors: bool = True

    @classmethod
    def with_max(cls, max_message_bytes: int) -> "Limits":
        return cls(max_message_bytes=max_message_bytes,
                   max_header_bytes=min(max_message_bytes, 16 << 20))


def encode(obj: Any, inline_threshold: int = DEFAULT_INLINE_THRESHOLD) -> list[Any]:
    """Return ``[header_bytes, *buffers]``; buffers are views, not copies, of the arrays."""
    encoder = getattr(_local, "encoder", None)
    if encoder is None:
        encoder = _local.encoder = _Encoder()
    if encoder.busy:  # re-entered (a value's encoding encodes again): a fresh one
        return _Encoder().encode(obj, inline_threshold)
    return encoder.encode(obj, inline_threshold)


_local = threading.local()


class _Encoder:
    """One thread's msgpack packers, kept across messages: ``msgpack.packb`` builds a new
    Packer on every call, and that was most of the time a small message took to encode."""

    def __init__(self) -> None:
        self.buffers: list[Any] = []
        self.inline_threshold = DEFAULT_INLINE_THRESHOLD
        self.busy = False
        self.header = msgpack.Packer(default=self.default, strict_types=True, use_bin_type=True)
        self.meta = msgpack.Packer(use_bin_type=True)  # array descriptors: plain data only

    def encode(self, obj: Any, inline_threshold: int) -> list[Any]:
        self.busy, self.buffers, self.inline_threshold = True, [], inline_threshold
        try:
            header = self.header.pack(obj)
        except (OverflowError, ValueError) as exc:
            raise EncodeError(str(exc)) from exc
        finally:
            self.busy = False
            self.header.reset()  # a failed pack leaves a partial message behind
        buffers, self.buffers = self.buffers, []
        return [header, *buffers]

    def default(self, value: Any) -> Any:
        if isinstance(value, np.ndarray) and value.dtype == object:
            return msgpack.ExtType(_EXT_OBJECTS, _pack([list(value.shape), list(value.reshape(-1))],
                                                       self.default))
        if isinstance(value, np.ndarray):
            return _encode_array(value, self.buffers, self.inline_threshold, self.meta.pack)
        if isinstance(value, tuple):
            return msgpack.ExtType(_EXT_TUPLE, _pack(list(value), self.default))
        torch = _torch()
        if torch is not None and isinstance(value, torch.Tensor):
            return _encode_tensor(value, self.buffers, self.inline_threshold)
        if isinstance(value, np.generic):
            if value.dtype.str not in ALLOWED_DTYPES or value.dtype.kind == "c":
                raise EncodeError(f"cannot encode a numpy {value.dtype} scalar: send a "
                                  "0-d array (np.asarray(x)) instead")
            return value.item()
        if isinstance(value, int):
            raise EncodeError(f"integer {value} does not fit in 64 bits")
        raise EncodeError(
            f"cannot encode a {type(value).__module__}.{type(value).__qualname__}: "
            "send plain data (dict, list, tuple, str, bytes, numbers, numpy arrays, tensors)"
        )


def _pack(obj: Any, default: Any) -> bytes:
    try:
        return msgpack.packb(obj, default=default, strict_types=True, use_bin_type=True)
    except (OverflowError, ValueError) as exc:
        raise EncodeError(str(exc)) from exc


def _encode_array(arr: np.ndarray, buffers: list[Any], inline_threshold: int,
                  pack: Any = msgpack.packb) -> msgpack.ExtType:
    dtype = arr.dtype.str
    if dtype not in ALLOWED_DTYPES:
        raise EncodeError(f"cannot encode array of dtype {arr.dtype}: only numeric and bool")
    if not arr.flags.c_contiguous:
        arr = np.ascontiguousarray(arr).reshape(arr.shape)  # (ascontiguousarray makes 0-d 1-d)
    meta: list[Any] = [dtype, list(arr.shape)]
    if arr.nbytes < inline_threshold:
        meta.append(arr.tobytes())
        return msgpack.ExtType(_EXT_ARRAY_INLINE, pack(meta))
    meta.append(len(buffers))
    buffers.append(arr.reshape(-1).data)
    return msgpack.ExtType(_EXT_ARRAY, pack(meta))


def _encode_tensor(t: Any, buffers: list[Any], inline_threshold: int) -> msgpack.ExtType:
    if t.device.type != "cpu":
        raise EncodeError(f"cannot encode a tensor on {t.device}: move it to the CPU first")
    name = str(t.dtype).removeprefix("torch.")
    if name not in TORCH_DTYPE_NAMES:
        raise EncodeError(f"cannot encode tensor of dtype {t.dtype}")
    if t.layout != _torch().strided:
        raise EncodeError(f"cannot encode a {t.layout} tensor: send t.to_dense()")
    t = t.detach().resolve_conj().resolve_neg().contiguous()
    # bfloat16 has no numpy twin: ship its bits as int16.
    raw = t.view(_torch_dtype("int16")) if name == "bfloat16" else t
    arr = raw.numpy()
    meta: list[Any] = [name, list(t.shape)]
    if arr.nbytes < inline_threshold:
        meta.append(arr.tobytes())
        return msgpack.ExtType(_EXT_TENSOR_INLINE, msgpack.packb(meta))
    meta.append(len(buffers))
    buffers.append(arr.reshape(-1).data)
    return msgpack.ExtType(_EXT_TENSOR, msgpack.packb(meta))


def decode(frames: Sequence[Any], limits: Limits = Limits()) -> Any:
    """Rebuild the value from ``[header, *buffers]``.

    Frames may be bytes, memoryviews or ``zmq.Frame``s. Out-of-band arrays are read-only
    views over their frame (no copy); decoded tensors share the frame's memory too.
    Raises DecodeError on anything malformed; never executes or unpickles anything.
    """
    if not frames:
        raise DecodeError("empty message")
    if len(frames) > limits.max_frames:
        raise DecodeError(f"message has {len(frames)} frames, limit is {limits.max_frames}")
    header = _as_buffer(frames[0])
    buffers = [_as_buffer(f) for f in frames[1:]]
    total = header.nbytes
    for view in buffers:
        total += view.nbytes
    if total > limits.max_message_bytes:
        raise DecodeError(
            f"message of {total} bytes exceeds the limit of {limits.max_message_bytes} bytes"
        )
    if header.nbytes > limits.max_header_bytes:
        raise DecodeError(f"header of {header.nbytes} bytes exceeds {limits.max_header_bytes}")
    hook = _ExtHook(buffers, limits)
    # Each object takes a byte at least and is counted at most twice (as an element, and
    # as a list or map itself): a header of up to max_objects / 2 bytes cannot exceed the
    # count, and skips the hook (a Python call per list and map: +25% on a small call).
    if 2 * header.nbytes <= limits.max_objects:
        hook.counter = None
    value = _unpack(header, hook, limits, hook.counter)
    if hook.unused:
        raise DecodeError(f"{hook.unused} buffer frame(s) not referenced by the header")
    return value


class _ExtHook:
    """msgpack's ext_hook for one message: rebuilds arrays, tensors and tuples, checks
    that each buffer frame is referenced exactly once, and counts the header's objects
    (``count``, msgpack's hook for every list and map it builds)."""

    __slots__ = ("buffers", "limits", "used", "unused", "depth", "objects", "counter")

    def __init__(self, buffers: list[memoryview], limits: Limits) -> None:
        self.buffers = buffers
        self.limits = limits
        self.used: list[bool] | None = None  # made on the first out-of-band array
        self.unused = len(buffers)
        self.depth = 0
        self.objects = limits.max_objects  # left to build
        self.counter: Any = self.count

    def count(self, container: Any) -> Any:
        self.objects -= len(container) + 1
        if self.objects < 0:
            raise DecodeError(f"header holds more than {self.limits.max_objects} objects "
                              f"(lists and maps, and their elements)")
        return container

    def __call__(self, code: int, data: bytes) -> Any:
        if code in (_EXT_TUPLE, _EXT_OBJECTS):
            # Each level re-enters the unpacker: bound it before the C stack is.
            if self.depth >= MAX_TUPLE_DEPTH:
                raise DecodeError(f"tuples nested deeper than {MAX_TUPLE_DEPTH} levels")
            self.depth += 1
            try:
                value = _unpack(data, self, self.limits, self.counter)
            finally:
                self.depth -= 1
            return tuple(value) if code == _EXT_TUPLE else _build_objects(value)
        if code in (_EXT_TENSOR, _EXT_TENSOR_INLINE) and not self.limits.tensors:
            raise DecodeError("a torch tensor was sent, and this process takes numpy arrays "
                              "only: send np.asarray(tensor)")
        meta = _unpack(data, None, self.limits, self.counter)
        if not isinstance(meta, list) or len(meta) != 3:
            raise DecodeError(f"malformed array descriptor (ext {code})")
        if code in (_EXT_ARRAY, _EXT_TENSOR):
            payload: Any = self._take(meta[2])
        elif code in (_EXT_ARRAY_INLINE, _EXT_TENSOR_INLINE):
            payload = meta[2]
            if not isinstance(payload, bytes):
                raise DecodeError("inline array payload is not bytes")
        else:
            raise DecodeError(f"unknown extension type {code}")
        if code in (_EXT_ARRAY, _EXT_ARRAY_INLINE):
            return _build_array(meta[0], meta[1], payload)
        return _build_tensor(meta[0], meta[1], payload)

    def _take(self, index: Any) -> memoryview:
        buffers = self.buffers
        if not isinstance(index, int) or not 0 <= index < len(buffers):
            raise DecodeError(f"array refers to frame {index!r}, message has {len(buffers)}")
        if self.used is None:
            self.used = [False] * len(buffers)
        if self.used[index]:
            raise DecodeError(f"frame {index} referenced twice")
        self.used[index] = True
        self.unused -= 1
        return buffers[index]


def _as_buffer(frame: Any) -> memoryview:
    buf = getattr(frame, "buffer", frame)  # zmq.Frame exposes .buffer without copying
    try:
        view = memoryview(buf)
    except TypeError as exc:
        raise DecodeError(f"frame of type {type(frame).__name__} is not a buffer") from exc
    if view.ndim != 1 or view.format != "B":
        try:
            view = view.cast("B")
        except TypeError as exc:
            raise DecodeError(f"frame is not a contiguous buffer: {exc}") from None
    # Decoded arrays are views of this memory: read-only, so a receiver cannot write into
    # a buffer it does not own (over inproc, the sender's own array).
    return view.toreadonly()


def _unpack(data: Any, ext_hook: Any, limits: Limits, count: Any) -> Any:
    n = limits.max_header_bytes
    # msgpack allocates a list (or map) of the length its header states before reading
    # any element: the length is bounded by the objects allowed, not only by the bytes.
    m = min(n, limits.max_objects)
    try:
        return msgpack.unpackb(
            data, raw=False, use_list=True, strict_map_key=False,
            ext_hook=ext_hook if ext_hook is not None else msgpack.ExtType,
            object_hook=count, list_hook=count,
            max_str_len=n, max_bin_len=n,
            max_array_len=m, max_map_len=m // 2, max_ext_len=n,
        )
    except DecodeError:
        raise
    except (ValueError, TypeError, msgpack.UnpackException, RecursionError) as exc:
        raise DecodeError(f"malformed msgpack header: {exc}") from None


def _check_shape(shape: Any) -> tuple[int, ...]:
    if not isinstance(shape, list) or not all(isinstance(d, int) and d >= 0 for d in shape):
        raise DecodeError(f"malformed array shape {shape!r}")
    if len(shape) > 64:
        raise DecodeError(f"array of {len(shape)} dimensions")
    return tuple(shape)


def _build_array(dtype: Any, shape: Any, payload: Any) -> np.ndarray:
    if not isinstance(dtype, str) or dtype not in ALLOWED_DTYPES:
        raise DecodeError(f"array dtype {dtype!r} is not allowed")
    dt = np.dtype(dtype)
    shape_t = _check_shape(shape)
    count = math.prod(shape_t)  # exact: np.prod would wrap around on a hostile shape
    if count * dt.itemsize != len(payload):
        raise DecodeError(
            f"array of shape {shape_t} and dtype {dtype} needs {count * dt.itemsize} bytes, "
            f"frame has {len(payload)}"
        )
    return np.frombuffer(payload, dtype=dt, count=count).reshape(shape_t)


def _build_objects(value: Any) -> np.ndarray:
    """An object array from ``[shape, entries]`` (entries set one by one: numpy would read
    a list entry as another dimension)."""
    if not (isinstance(value, list) and len(value) == 2 and isinstance(value[1], list)):
        raise DecodeError("malformed object array")
    shape = _check_shape(value[0])
    if math.prod(shape) != len(value[1]):
        raise DecodeError(f"object array of shape {shape} has {len(value[1])} entries")
    out = np.empty(len(value[1]), dtype=object)
    for i, entry in enumerate(value[1]):
        out[i] = entry
    return out.reshape(shape)


def _build_tensor(dtype: Any, shape: Any, payload: Any) -> Any:
    if not isinstance(dtype, str) or dtype not in TORCH_DTYPE_NAMES:
        raise DecodeError(f"tensor dtype {dtype!r} is not allowed")
    try:
        import torch
    except ImportError:
        raise DecodeError("received a torch tensor but torch is not installed here") from None
    tdtype = _torch_dtype(dtype)
    shape_t = _check_shape(shape)
    itemsize = torch.empty((), dtype=tdtype).element_size()
    count = math.prod(shape_t)
    if count * itemsize != len(payload):
        raise DecodeError(
            f"tensor of shape {shape_t} and dtype {dtype} needs {count * itemsize} bytes, "
            f"frame has {len(payload)}"
        )
    if isinstance(payload, bytes):
        payload = bytearray(payload)  # inline: never let a tensor write into a bytes object
    try:
        if count == 0:
            return torch.empty(shape_t, dtype=tdtype)
        with warnings.catch_warnings():
            # torch has no read-only tensors and warns about the read-only view: the
            # memory is this message's own (sockets copy over inproc, see AsyncSocket).
            warnings.simplefilter("ignore", UserWarning)
            flat = torch.frombuffer(payload, dtype=tdtype, count=count)
        return flat.reshape(shape_t)
    except RuntimeError as exc:
        raise DecodeError(f"tensor of shape {shape_t}: {exc}") from None
