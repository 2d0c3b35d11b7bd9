"""The wire codec: what round-trips, what is refused, what stays zero-copy, and that any
bytes a peer can send only ever end in a value or a DecodeError."""

from __future__ import annotations

import math
import random
import subprocess
import sys

import msgpack
import numpy as np
import pytest
import torch
import zmq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from rlmesh.wire import codec
from rlmesh.wire.codec import ALLOWED_DTYPES, TORCH_DTYPE_NAMES, DecodeError, EncodeError, Limits

DTYPES = sorted(ALLOWED_DTYPES)
THRESHOLD = codec.DEFAULT_INLINE_THRESHOLD


# --- helpers ---

def same(a, b) -> bool:
    """Equal values of exactly the same types (1 != 1.0 != True, tuple != list)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) == math.copysign(1, b))
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, np.ndarray):
        return same_array(a, b)
    return a == b


def same_array(a: np.ndarray, b: np.ndarray) -> bool:
    # Bytes, not values: NaN payloads and -0.0 must survive too.
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def roundtrip(value, **kw):
    return codec.decode(codec.encode(value, **kw))


def ext(code: int, meta) -> msgpack.ExtType:
    return msgpack.ExtType(code, msgpack.packb(meta, use_bin_type=True))


def header(obj) -> bytes:
    return msgpack.packb(obj, use_bin_type=True)


def tensor_of(name: str, shape=(3, 4)) -> torch.Tensor:
    dtype = getattr(torch, name)
    n = int(np.prod(shape))
    if name == "bool":
        return (torch.arange(n) % 3 == 0).reshape(shape)
    if dtype.is_complex:
        return torch.complex(torch.arange(n, dtype=torch.float32),
                             -torch.arange(n, dtype=torch.float32)).to(dtype).reshape(shape)
    return (torch.arange(n) % 100).to(dtype).reshape(shape)


def assert_same_tensor(got, want: torch.Tensor) -> None:
    assert isinstance(got, torch.Tensor)
    assert got.dtype == want.dtype and got.shape == want.shape
    assert torch.equal(got, want.detach())


# --- plain data ---

scalars = st.one_of(
    st.none(), st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**64 - 1),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20), st.binary(max_size=20),
)
plain = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=5),
        st.lists(inner, max_size=5).map(tuple),
        st.dictionaries(st.one_of(st.text(max_size=8), st.integers(-5, 5)), inner, max_size=5),
    ),
    max_leaves=30,
)


@settings(max_examples=300, deadline=None)
@given(plain)
def test_plain_data_roundtrips_with_types_kept(value):
    frames = codec.encode(value)
    assert len(frames) == 1, "plain data needs no buffer frames"
    assert same(codec.decode(frames), value)


def test_tuples_stay_tuples_and_lists_stay_lists():
    value = {"t": (1, (2, [3, (4,)]), ()), "l": [(), [()]], (1, "a"): "tuple key"}
    got = roundtrip(value)
    assert same(got, value)
    assert type(got["t"][1]) is tuple and type(got["t"][1][1]) is list
    assert (1, "a") in got


def test_numpy_scalars_become_python_scalars():
    got = roundtrip([np.float32(1.5), np.int64(-3), np.bool_(True), np.uint64(2**64 - 1)])
    assert same(got, [1.5, -3, True, 2**64 - 1])


# --- numpy arrays ---

@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(DTYPES).flatmap(lambda dt: hnp.arrays(
    np.dtype(dt), hnp.array_shapes(min_dims=1, max_dims=6, min_side=0, max_side=6))),
    st.sampled_from([1, 64, THRESHOLD]))
def test_arrays_of_every_dtype_and_shape_roundtrip(arr, threshold):
    got = roundtrip({"x": [arr]}, inline_threshold=threshold)["x"][0]
    assert isinstance(got, np.ndarray)
    assert same_array(got, arr)


@pytest.mark.parametrize("threshold", [0, THRESHOLD], ids=["out_of_band", "inline"])
def test_zero_dim_arrays_keep_their_shape(threshold):
    for dtype in DTYPES:
        arr = np.ones((), dtype=dtype)
        got = roundtrip(arr, inline_threshold=threshold)
        assert got.shape == () and same_array(got, arr), dtype


@pytest.mark.parametrize("dtype", DTYPES)
def test_empty_and_high_dim_arrays(dtype):
    # Threshold 1: every non-empty array travels out of band, empty ones inline.
    for shape in [(0,), (3, 0, 2), (0, 0), (1,) * 32, (2,) * 12, (1,) * 64]:
        arr = np.zeros(shape, dtype=dtype)
        for threshold in (1, THRESHOLD):
            got = roundtrip(arr, inline_threshold=threshold)
            assert same_array(got, arr), (shape, threshold)


@pytest.mark.parametrize("shape", [(0, 0), (3, 0, 2)])
def test_empty_multi_dim_array_out_of_band(shape):
    arr = np.zeros(shape, dtype=np.float32)
    assert same_array(roundtrip(arr, inline_threshold=0), arr)


def _non_contiguous(dtype: str) -> dict[str, np.ndarray]:
    base = (np.arange(40 * 30) % 97).astype(dtype).reshape(40, 30)
    return {
        "slice": base[::3, 1::2],
        "transpose": base.T,
        "negative_stride": base[::-1, ::-2],
        "fortran": np.asfortranarray(base),
        "column": base[:, 5],
        "broadcast": np.broadcast_to(base[0], (4, 30)),
    }


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("threshold", [0, THRESHOLD], ids=["out_of_band", "inline"])
def test_non_contiguous_arrays_roundtrip(dtype, threshold):
    for kind, arr in _non_contiguous(dtype).items():
        got = roundtrip(arr, inline_threshold=threshold)
        assert same_array(got, np.ascontiguousarray(arr)), kind
        assert got.flags.c_contiguous


def test_inline_threshold_decides_which_arrays_get_their_own_frame():
    small = np.zeros(THRESHOLD - 1, dtype=np.uint8)
    exact = np.zeros(THRESHOLD, dtype=np.uint8)
    big = np.arange(THRESHOLD, dtype=np.float64)
    assert len(codec.encode({"a": small})) == 1
    assert len(codec.encode({"a": exact})) == 2
    frames = codec.encode({"s": small, "b": [big, (big[::2],)], "e": exact})
    assert len(frames) == 4  # header + the three large ones
    assert sorted(memoryview(f).nbytes for f in frames[1:]) == sorted(
        [exact.nbytes, big.nbytes, big.nbytes // 2])
    got = codec.decode(frames)
    assert same_array(got["b"][0], big) and same_array(got["b"][1][0], big[::2].copy())
    assert same_array(got["s"], small) and same_array(got["e"], exact)


def test_out_of_band_buffer_shares_memory_with_the_array():
    arr = np.random.default_rng(0).standard_normal((256, 512)).astype(np.float32)
    frames = codec.encode({"obs": arr})
    assert len(frames) == 2
    buf = np.frombuffer(frames[1], dtype=np.uint8)
    assert np.shares_memory(buf, arr)
    assert buf.ctypes.data == arr.ctypes.data and buf.nbytes == arr.nbytes


def test_inline_array_is_a_copy():
    arr = np.arange(10, dtype=np.int32)
    got = roundtrip(arr)
    assert not np.shares_memory(got, arr)


@pytest.fixture
def pair():
    ctx = zmq.Context()
    a, b = ctx.socket(zmq.PAIR), ctx.socket(zmq.PAIR)
    a.bind("inproc://codec-test")
    b.connect("inproc://codec-test")
    yield a, b
    a.close(0)
    b.close(0)
    ctx.term()


def _over_zmq(pair, value):
    a, b = pair
    a.send_multipart(codec.encode(value), copy=False)
    frames = b.recv_multipart(copy=False)
    return frames, codec.decode(frames)


def test_decode_from_zmq_frames_does_not_copy(pair):
    arr = np.arange(200_000, dtype=np.float64).reshape(400, 500)
    frames, got = _over_zmq(pair, {"x": arr, "t": torch.arange(100_000, dtype=torch.int64)})
    assert len(frames) == 3
    x, t = got["x"], got["t"]
    assert same_array(x, arr)
    # The decoded array lives in the received frame's memory.
    assert x.ctypes.data == np.frombuffer(frames[1].buffer, dtype=np.uint8).ctypes.data
    assert t.data_ptr() == np.frombuffer(frames[2].buffer, dtype=np.uint8).ctypes.data
    assert torch.equal(t, torch.arange(100_000, dtype=torch.int64))


def test_arrays_decoded_from_zmq_frames_are_read_only(pair):
    arr = np.arange(100_000, dtype=np.float32)
    _, got = _over_zmq(pair, arr)
    assert not got.flags.writeable
    with pytest.raises(ValueError):
        got[0] = 42.0
    assert arr[0] == 0.0


def test_inline_decoded_arrays_are_read_only():
    got = roundtrip(np.arange(10, dtype=np.int16))
    assert not got.flags.writeable


# --- torch tensors ---

@pytest.mark.parametrize("name", sorted(TORCH_DTYPE_NAMES))
@pytest.mark.parametrize("threshold", [0, THRESHOLD], ids=["out_of_band", "inline"])
def test_tensors_of_every_dtype_roundtrip(name, threshold):
    t = tensor_of(name)
    frames = codec.encode({"t": t}, inline_threshold=threshold)
    assert len(frames) == (2 if threshold == 0 else 1)
    assert_same_tensor(codec.decode(frames)["t"], t)


@pytest.mark.parametrize("name", sorted(TORCH_DTYPE_NAMES))
def test_non_contiguous_and_special_shape_tensors_roundtrip(name):
    t = tensor_of(name, (6, 8))
    cases = [t.t(), t[::2, 1::3], t[:, 3], t.expand(2, 6, 8), tensor_of(name, ()),
             tensor_of(name, (0, 3)), tensor_of(name, (1,) * 20)]
    for case in cases:
        for threshold in (0, THRESHOLD):
            assert_same_tensor(roundtrip([case], inline_threshold=threshold)[0], case)


def test_tensor_requiring_grad_is_sent_detached():
    t = torch.randn(5, requires_grad=True) * 2
    got = roundtrip(t)
    assert not got.requires_grad and torch.equal(got, t.detach())


def test_big_tensor_buffer_shares_memory_with_the_tensor():
    t = torch.randn(300, 300)
    frames = codec.encode(t)
    assert len(frames) == 2
    assert np.frombuffer(frames[1], dtype=np.uint8).ctypes.data == t.data_ptr()


def test_bfloat16_keeps_its_bits():
    t = torch.tensor([1.0, -0.0, float("inf"), float("nan"), 3.140625, 1e-38], dtype=torch.bfloat16)
    got = roundtrip(t, inline_threshold=0)
    assert got.dtype == torch.bfloat16
    assert torch.equal(got.view(torch.int16), t.view(torch.int16))


def test_conjugate_view_tensor_encodes():
    t = torch.complex(torch.arange(4.0), torch.ones(4)).conj()
    assert_same_tensor(roundtrip(t), t.resolve_conj())


def test_sparse_tensor_is_refused_with_encode_error():
    with pytest.raises(EncodeError, match="sparse"):
        codec.encode(torch.zeros(3).to_sparse())


@pytest.mark.parametrize("value", [np.complex64(1 + 2j), np.complex128(-1j)])
def test_numpy_complex_scalar_roundtrips_or_is_refused_cleanly(value):
    try:
        got = roundtrip([value])
    except EncodeError:
        return
    assert got[0] == value


# --- refusals ---

class Sneaky:
    reduced = False

    def __reduce__(self):
        Sneaky.reduced = True
        return (print, ("pickled!",))


@pytest.mark.parametrize("value,named", [
    (Sneaky(), "Sneaky"),
    ({1, 2}, "set"),
    (frozenset(), "frozenset"),
    (object(), "object"),
    (len, "builtin_function_or_method"),
    (lambda: 0, "function"),
    (np.dtype("f4"), "Float32DType"),
    (1 + 2j, "complex"),
    (np.array([1, object()], dtype=object), "object"),  # an entry that is not plain data
    (np.array(["ab"]), "<U2"),
    (np.array([b"ab"]), "S2"),
    (np.zeros(2, dtype=[("a", "i4")]), "('a', '<i4')"),
    (np.array(["2020-01-01"], dtype="datetime64[D]"), "datetime64"),
    (np.str_("x"), "<U1"),
    (torch.zeros(3, dtype=torch.float8_e4m3fn), "float8_e4m3fn"),
    (torch.empty(3, device="meta"), "meta"),
])
def test_refuses_what_it_cannot_send_and_names_it(value, named):
    with pytest.raises(EncodeError) as info:
        codec.encode({"deep": [(value,)]})
    assert named in str(info.value)
    assert not Sneaky.reduced


def test_refuses_dict_subclasses_rather_than_guessing():
    from collections import OrderedDict
    with pytest.raises(EncodeError, match="OrderedDict"):
        codec.encode(OrderedDict(a=1))


def test_refuses_out_of_range_integers():
    for n in (2**64, -(2**63) - 1):
        with pytest.raises(EncodeError):
            codec.encode([n])


# --- decode: limits and malformed input ---

def test_empty_message_is_refused():
    with pytest.raises(DecodeError, match="empty"):
        codec.decode([])


def test_too_many_frames():
    frames = codec.encode([np.zeros(10), np.zeros(10), np.zeros(10)], inline_threshold=0)
    assert len(frames) == 4
    assert codec.decode(frames, Limits(max_frames=4)) is not None
    with pytest.raises(DecodeError, match="4 frames, limit is 3"):
        codec.decode(frames, Limits(max_frames=3))


def test_too_many_bytes_counts_header_and_buffers():
    frames = codec.encode([np.zeros(100, np.uint8), np.zeros(100, np.uint8)], inline_threshold=0)
    total = sum(memoryview(f).nbytes for f in frames)
    assert codec.decode(frames, Limits.with_max(total)) is not None
    with pytest.raises(DecodeError, match=f"{total} bytes exceeds the limit of {total - 1}"):
        codec.decode(frames, Limits.with_max(total - 1))


def test_header_too_big():
    frames = codec.encode({"s": "x" * 500})
    with pytest.raises(DecodeError, match="header of"):
        codec.decode(frames, Limits(max_header_bytes=100))


def test_unreferenced_extra_frame():
    frames = codec.encode({"a": 1})
    with pytest.raises(DecodeError, match="not referenced"):
        codec.decode([*frames, b"stray"])


def test_frame_referenced_twice():
    meta = ["<f4", [2], 0]
    frames = [header([ext(1, meta), ext(1, meta)]), np.zeros(2, np.float32).tobytes()]
    with pytest.raises(DecodeError, match="referenced twice"):
        codec.decode(frames)


@pytest.mark.parametrize("code,payload", [(1, b"\0" * 39), (1, b"\0" * 41), (2, b"\0" * 7)])
def test_wrong_byte_count_for_shape(code, payload):
    meta = ["<f4", [10], 0 if code == 1 else payload]
    frames = [header(ext(code, meta))] + ([payload] if code == 1 else [])
    with pytest.raises(DecodeError, match="needs 40 bytes"):
        codec.decode(frames)


@pytest.mark.parametrize("dtype", ["|O", "<U3", "|S3", "object", ">f4", "<M8[D]", "V8", 5, None])
def test_disallowed_array_dtype(dtype):
    with pytest.raises(DecodeError, match="not allowed"):
        codec.decode([header(ext(2, [dtype, [1], b"\0" * 8]))])


@pytest.mark.parametrize("dtype", ["uint16", "float8_e4m3fn", "qint8", "Tensor", "<f4", 3])
def test_disallowed_tensor_dtype(dtype):
    with pytest.raises(DecodeError, match="not allowed"):
        codec.decode([header(ext(4, [dtype, [1], b"\0" * 8]))])


MALFORMED_EXT = {
    "meta not a list": [header(msgpack.ExtType(1, msgpack.packb({"a": 1})))],
    "meta too short": [header(ext(1, ["<f4", [1]])), b"\0" * 4],
    "meta too long": [header(ext(2, ["<f4", [1], b"\0" * 4, 1]))],
    "meta garbage": [header(msgpack.ExtType(1, b"\xc1\xc1"))],
    "meta truncated": [header(msgpack.ExtType(1, msgpack.packb(["<f4", [1], 0])[:-2]))],
    "index negative": [header(ext(1, ["<f4", [1], -1])), b"\0" * 4],
    "index out of range": [header(ext(1, ["<f4", [1], 1])), b"\0" * 4],
    "index a string": [header(ext(1, ["<f4", [1], "0"])), b"\0" * 4],
    "index a float": [header(ext(3, ["float32", [1], 0.0])), b"\0" * 4],
    "inline payload not bytes": [header(ext(2, ["<f4", [1], "abcd"]))],
    "inline tensor payload not bytes": [header(ext(4, ["float32", [1], [1, 2, 3, 4]]))],
    "shape not a list": [header(ext(2, ["<f4", 1, b"\0" * 4]))],
    "shape negative": [header(ext(2, ["<f4", [-1], b""]))],
    "shape of floats": [header(ext(2, ["<f4", [1.0], b"\0" * 4]))],
    "shape of 65 dims": [header(ext(2, ["|u1", [1] * 65, b"\0"]))],
    "shape huge": [header(ext(2, ["|u1", [2**64 - 1], b""]))],
    "shape overflowing int64": [header(ext(2, ["|u1", [2**63 - 1, 2**63 - 1], b"\0"]))],
    "unknown ext code": [header(msgpack.ExtType(9, msgpack.packb(["<f4", [1], b"\0" * 4])))],
    "tuple payload garbage": [header(msgpack.ExtType(5, b"\x93\x01"))],
    "header truncated": [codec.encode({"a": [1, 2, 3], "b": "text"})[0][:-3]],
    "header with trailing bytes": [codec.encode({"a": 1})[0] + b"\x01"],
    "header random bytes": [bytes(random.Random(7).randrange(256) for _ in range(64))],
    "not a buffer": [12345],
    "empty header": [b""],
}


@pytest.mark.parametrize("frames", MALFORMED_EXT.values(), ids=MALFORMED_EXT.keys())
def test_malformed_input_is_a_decode_error(frames):
    with pytest.raises(DecodeError):
        codec.decode(frames)


@pytest.mark.parametrize("meta", [
    ["uint8", [2**63 - 1, 2**63 - 1], b"\0"],  # count wraps to 1
    ["uint8", [2**32, 2**32], b""],  # count wraps to 0
    ["int8", [2**63 - 1, 3, 0], b""],  # no elements, but torch.empty overflows on the dims
], ids=["wraps_to_1", "wraps_to_0", "empty_with_huge_dims"])
def test_tensor_shape_overflow_is_a_decode_error(meta):
    with pytest.raises(DecodeError):
        codec.decode([header(ext(4, meta))])


_NESTED_TUPLES = """
import msgpack
from rlmesh.wire import codec
inner = msgpack.packb([])
for _ in range({depth}):
    inner = msgpack.packb([msgpack.ExtType(5, inner)])
try:
    codec.decode([msgpack.packb(msgpack.ExtType(5, inner))])
    print("decoded")
except codec.DecodeError:
    print("DecodeError")
"""


def _decode_nested_tuples_in_child(depth: int) -> tuple[int, str]:
    # A child process: a crash must fail this test, not take pytest down with it.
    proc = subprocess.run([sys.executable, "-c", _NESTED_TUPLES.format(depth=depth)],
                          capture_output=True, text=True, timeout=60)
    return proc.returncode, proc.stdout.strip()


def test_moderately_nested_tuples_roundtrip():
    value: object = ()
    for _ in range(20):  # deeper than real data nests; a depth limit may sit above this
        value = (value, [1])
    assert roundtrip(value) == value


@pytest.mark.parametrize("depth", [300, 5000])
def test_deeply_nested_tuples_are_a_decode_error_not_a_crash(depth):
    assert _decode_nested_tuples_in_child(depth) == (0, "DecodeError")


# --- fuzz: anything off the wire ends in a value or a DecodeError ---

def _decode_or_decode_error(frames, limits: Limits = Limits()) -> None:
    try:
        codec.decode(frames, limits)
    except DecodeError:
        pass


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=512))
def test_fuzz_random_header_bytes(data):
    _decode_or_decode_error([data])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.binary(max_size=256), min_size=0, max_size=8),
       st.sampled_from([Limits(), Limits(max_frames=3), Limits.with_max(300)]))
def test_fuzz_random_frame_lists(frames, limits):
    _decode_or_decode_error(frames, limits)


def _valid_messages() -> list[list[bytes]]:
    arrays = [(np.arange(12) % 3).astype(dt).reshape(3, 4) for dt in ("<f4", "<i8", "|u1", "<c8", "|b1")]
    out = []
    for threshold in (0, THRESHOLD):
        out.append(codec.encode({"v": 1, "t": "call", "id": 7, "m": "echo",
                                 "a": [arrays, (1, "x", None)], "k": {"y": 2.5}},
                                inline_threshold=threshold))
    return [[bytes(f) for f in frames] for frames in out]


VALID = _valid_messages()


@settings(max_examples=500, deadline=None)
@given(st.sampled_from(VALID), st.data())
def test_fuzz_mutated_valid_messages(frames, data):
    frames = list(frames)
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(frames) - 1))
        frame = bytearray(frames[i])
        op = data.draw(st.sampled_from(["flip", "truncate", "insert", "drop_frame", "dup_frame"]))
        if op == "flip" and frame:
            j = data.draw(st.integers(0, len(frame) - 1))
            frame[j] = data.draw(st.integers(0, 255))
        elif op == "truncate":
            del frame[data.draw(st.integers(0, len(frame))):]
        elif op == "insert":
            j = data.draw(st.integers(0, len(frame)))
            frame[j:j] = data.draw(st.binary(min_size=1, max_size=9))
        elif op == "drop_frame" and len(frames) > 1:
            del frames[i]
            continue
        elif op == "dup_frame":
            frames.insert(i, bytes(frame))
        frames[i] = bytes(frame)
    _decode_or_decode_error(frames)


def test_tensor_frames_are_refused_without_importing_torch_where_not_taken():
    """A process that declared no tensors (the policy server, clients) refuses them before
    torch is imported: five such messages loaded torch into a server for its life."""
    script = (
        "import sys, msgpack\n"
        "from rlmesh.wire import codec\n"
        "meta = msgpack.packb(['float32', [4], bytes(16)])\n"
        "header = msgpack.packb({'x': msgpack.ExtType(4, meta)})\n"
        "try:\n"
        "    codec.decode([header], codec.Limits(tensors=False))\n"
        "except codec.DecodeError as exc:\n"
        "    print(exc)\n"
        "print('torch' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         check=True).stdout.splitlines()
    assert out == ["a torch tensor was sent, and this process takes numpy arrays only: "
                   "send np.asarray(tensor)", "False"]


def test_headers_are_bounded_in_objects_not_only_bytes():
    limits = codec.Limits(max_objects=1000)
    # a list of 999 elements is 1,000 objects; maps count their entries
    assert len(codec.decode([msgpack.packb([0] * 999)], limits)) == 999
    with pytest.raises(codec.DecodeError, match="more than 1000 objects"):
        codec.decode([msgpack.packb([{}] * 600)], limits)
    # a length msgpack would allocate before reading any element is refused at once
    with pytest.raises(codec.DecodeError, match="exceeds max_array_len"):
        codec.decode([b"\xdd" + (1 << 24).to_bytes(4, "big")], limits)
    # objects inside tuples and array descriptors count too
    with pytest.raises(codec.DecodeError, match="objects"):
        codec.decode(codec.encode(tuple([0] * 600) + (np.zeros(3),) * 200), limits)
    # a message as large as real ones is far inside the default
    weights = {f"layer{i}.weight": np.zeros((64, 64), np.float32) for i in range(200)}
    episodes = [{"return": 1.0, "length": 5, "custom_metrics": {}} for _ in range(10_000)]
    assert len(codec.decode(codec.encode({"w": weights, "episodes": episodes}))["episodes"]) \
        == 10_000
