"""The HTTP front's decisions without sockets: where it may bind, how a head and a body are
read, what a reply looks like in each encoding (roles/policy_http_wire.py)."""

from __future__ import annotations

import json

import msgpack
import numpy as np
import pytest

from rlmesh.client.http import RLMESH_MSGPACK
from rlmesh.roles.policy_http_wire import (HTTPError, Request, bind_address, body_length,
                                           decode_body, encode_reply, error_response,
                                           parse_head, reply_type)
from rlmesh.wire import codec

LIMITS = codec.Limits(max_message_bytes=1 << 20, max_header_bytes=1 << 20, max_objects=1000,
                      tensors=False)


def test_binding_is_loopback_unless_tls_or_an_explicit_opt_in():
    assert bind_address("http://localhost:9900", False, False) == ("http", "127.0.0.1", 9900)
    assert bind_address("http://127.0.0.1:0", False, False) == ("http", "127.0.0.1", 0)
    with pytest.raises(ValueError, match="plain http off loopback"):
        bind_address("http://0.0.0.0:9900", False, False)
    assert bind_address("http://10.1.2.3:9900", True, False)[1] == "10.1.2.3"
    assert bind_address("https://10.1.2.3:9900", False, True)[0] == "https"
    with pytest.raises(ValueError, match="needs policy_server_tls_certfile"):
        bind_address("https://127.0.0.1:9900", False, False)
    for bad in ("http://127.0.0.1", "http://example.com:80", "ftp://127.0.0.1:1",
                "http://127.0.0.1:9900/api", "http://127.0.0.1:99999"):
        with pytest.raises(ValueError, match="policy_server_address"):
            bind_address(bad, False, False)


def test_a_head_is_parsed_and_a_malformed_one_refused():
    req = parse_head(b"POST /get_action?x=1 HTTP/1.1\r\nContent-Type: application/json\r\n"
                     b"Connection: close\r\n\r\n")
    assert (req.method, req.path, req.headers["content-type"]) == (
        "POST", "/get_action", "application/json")
    assert not req.keep_alive and not Request("GET", "/", "HTTP/1.0").keep_alive
    for head, says in [(b"POST /x\r\n\r\n", "malformed request line"),
                       (b"POST /x HTTP/2\r\n\r\n", "speak HTTP/1.1"),
                       (b"POST /x HTTP/1.1\r\nno colon\r\n\r\n", "malformed header"),
                       (b"POST /x HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
                        "two different content-length")]:
        with pytest.raises(HTTPError, match=says) as exc:
            parse_head(head)
        assert exc.value.code == 400 and exc.value.close


def test_a_body_length_is_ascii_digits_within_the_limit():
    def length(value):
        return body_length(Request("POST", "/x", "HTTP/1.1", {"content-length": value}), 100)

    assert length("100") == 100
    for value, code in [("\u00b2", 400), ("-1", 400), ("1e3", 400), ("101", 413)]:
        with pytest.raises(HTTPError) as exc:
            length(value)
        assert exc.value.code == code and exc.value.close
    with pytest.raises(HTTPError, match="chunked") as exc:
        body_length(Request("POST", "/x", "HTTP/1.1", {"transfer-encoding": "chunked"}), 100)
    assert exc.value.code == 411


def test_bodies_by_name_or_in_order_and_bounded():
    assert decode_body("application/json", b'{"episode_id": "e"}', LIMITS) == (
        [], {"episode_id": "e"})
    assert decode_body("application/json", b'["e", [1, 2]]', LIMITS) == (["e", [1, 2]], {})
    assert decode_body("application/msgpack", msgpack.packb({"a": 1}), LIMITS) == ([], {"a": 1})
    # rlmesh's array extension: an observation as raw float32 bytes.
    args, _ = decode_body(RLMESH_MSGPACK, bytes(codec.encode(
        [np.arange(4, dtype=np.float32)], inline_threshold=1 << 62)[0]), LIMITS)
    assert args[0].dtype == np.float32 and args[0].tolist() == [0, 1, 2, 3]
    for body, says in [(b"[" * 5000 + b"]" * 5000, "more than 1000 values"),
                       (b"[[]" + b",[]" * 600 + b"]", "more than 1000 values"),
                       (b"{", "malformed JSON"), (b"7", "must be an object")]:
        with pytest.raises(HTTPError, match=says):
            decode_body("application/json", body, LIMITS)
    with pytest.raises(HTTPError, match="malformed msgpack"):
        decode_body("application/msgpack", b"\x91", LIMITS)


def test_replies_follow_accept_then_the_request_and_errors_are_one_line():
    req = Request("POST", "/get_action", "HTTP/1.1", {"accept": "application/msgpack"})
    assert reply_type(req, "application/json") == "application/msgpack"
    assert reply_type(Request("POST", "/", "HTTP/1.1"), "application/x-msgpack") == \
        "application/msgpack"
    assert reply_type(Request("POST", "/", "HTTP/1.1"), "application/json") == "application/json"
    value = {"action": np.array([0.5, -1.0], np.float32), "n": np.int64(3)}
    assert json.loads(encode_reply(value, "application/json")) == {"action": [0.5, -1.0], "n": 3}
    # Strict JSON: an unbounded Box's bounds as strings any parser reads.
    box = {"low": np.array([-np.inf, 0.0]), "high": [np.inf, float("nan")]}
    strict = encode_reply(box, "application/json").decode()
    assert json.loads(strict, parse_constant=lambda c: pytest.fail(f"bare {c}")) == {
        "low": ["-Infinity", 0.0], "high": ["Infinity", "NaN"]}
    assert msgpack.unpackb(encode_reply(value, "application/msgpack"))["action"] == [0.5, -1.0]
    assert codec.decode([encode_reply(value, RLMESH_MSGPACK)])["action"].dtype == np.float32
    out = error_response(HTTPError(400, "ClientDataError", "observation:\nbad\n shape"), False)
    head, _, body = out.partition(b"\r\n\r\n")
    assert b"HTTP/1.1 400 Bad Request" in head and b"X-Rlmesh-Error: ClientDataError" in head
    assert body == b"ClientDataError: observation: bad shape\n"
