"""How the policy server's HTTP front reads a request and writes a reply, without sockets:
the head, the body's length and encoding (JSON or msgpack), the call's arguments, the reply's
encoding, the status and one line of a refusal, and where it may bind (roles/policy_http.py)."""

from __future__ import annotations

import http
import ipaddress
import json
import math
import ssl
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import msgpack
import numpy as np

from rlmesh.client.episodes import ClientDataError
from rlmesh.client.http import JSON, MSGPACK, MSGPACK_TYPES, RLMESH_MSGPACK
from rlmesh.runtime.protocol import CallError
from rlmesh.wire import codec

MAX_ERROR_CHARS = 500
STATUS_OF = {"UnknownCall": 404, "BadRequest": 400}


class HTTPError(Exception):
    """A request refused with ``code``; ``text`` (one line) says what is wrong."""

    def __init__(self, code: int, etype: str, text: str, close: bool = False) -> None:
        super().__init__(text)
        self.code, self.etype, self.text, self.close = code, etype, text, close


@dataclass
class Request:
    method: str
    path: str
    version: str
    headers: dict[str, str] = field(default_factory=dict)

    @property
    def keep_alive(self) -> bool:
        conn = self.headers.get("connection", "").lower()
        return "close" not in conn and (self.version == "HTTP/1.1" or "keep-alive" in conn)



def parse_head(head: bytes) -> Request:
    """The request line and headers (``head`` ends with the blank line)."""
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/"):
        raise HTTPError(400, "BadRequest", f"malformed request line {lines[0]!r:.80}", True)
    method, target, version = parts
    if version not in ("HTTP/1.1", "HTTP/1.0"):
        raise HTTPError(400, "BadRequest", f"{version!r:.20} is not served: speak HTTP/1.1",
                        True)
    request = Request(method.upper(), target.split("?", 1)[0], version)
    for line in lines[1:]:
        if not line:
            continue
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip() or line[0] in " \t":
            raise HTTPError(400, "BadRequest", f"malformed header line {line!r:.80}", True)
        name = name.lower()
        value = value.strip()
        if name in request.headers and name in ("content-length", "authorization", "host"):
            if request.headers[name] != value:
                raise HTTPError(400, "BadRequest", f"two different {name} headers", True)
        request.headers[name] = value
    return request


def body_length(request: Request, max_body: int) -> int:
    """The body's length from Content-Length, within ``max_body``."""
    if "transfer-encoding" in request.headers:
        raise HTTPError(411, "BadRequest", "send the body with a Content-Length (chunked "
                                           "transfer encoding is not taken)", True)
    text = request.headers.get("content-length", "0")
    if not (text.isascii() and text.isdigit()) or len(text) > 18:  # not "²"
        raise HTTPError(400, "BadRequest", f"Content-Length must be a number of bytes, got "
                                           f"{text!r:.40}", True)
    if int(text) > max_body:
        raise HTTPError(413, "BadRequest", f"a body of {int(text)} bytes is more than this "
                                           f"server takes ({max_body}; "
                                           f"policy_server_max_message_mb)", True)
    return int(text)


def media_type(value: str | None) -> str:
    return (value or "").split(";", 1)[0].strip().lower()


def body_type(request: Request, length: int) -> str:
    ctype = media_type(request.headers.get("content-type"))
    if length == 0 or ctype == JSON or ctype in MSGPACK_TYPES:
        return ctype or JSON
    raise HTTPError(415, "BadRequest", f"Content-Type {ctype or 'missing'}: send "
                                       f"{JSON} or {MSGPACK}", True)


def reply_type(request: Request, sent: str) -> str:
    """JSON or msgpack as the Accept header asks, else as the request was sent."""
    accept = request.headers.get("accept", "").lower()
    for wanted in (RLMESH_MSGPACK, MSGPACK, "application/x-msgpack", JSON):
        if wanted in accept:
            return MSGPACK if wanted == "application/x-msgpack" else wanted
    return RLMESH_MSGPACK if sent == RLMESH_MSGPACK else MSGPACK if sent in MSGPACK_TYPES else JSON


def decode_body(ctype: str, body: bytes, limits: codec.Limits) -> tuple[list[Any], dict[str, Any]]:
    """A call's arguments: a JSON object or msgpack map by name, or an array in order."""
    if not body:
        return [], {}
    if ctype == JSON:
        # Lists and objects, and their elements, as the codec bounds msgpack's: a body of
        # "[]," repeated is millions of lists (counting separators is an upper bound).
        objects = body.count(b"[") + body.count(b"{") + body.count(b",")
        if objects > limits.max_objects:
            raise HTTPError(400, "BadRequest", f"the JSON body holds more than "
                                               f"{limits.max_objects} values and containers")
        try:
            value = json.loads(body)
        except (ValueError, RecursionError) as exc:
            raise HTTPError(400, "BadRequest", f"malformed JSON body: {exc}") from None
    else:
        try:
            value = codec.decode([body], limits)
        except codec.DecodeError as exc:
            raise HTTPError(400, "BadRequest", f"malformed msgpack body: {exc}") from None
    if isinstance(value, dict):
        return [], value
    if isinstance(value, list):
        return value, {}
    raise HTTPError(400, "BadRequest", f"the body must be an object of the call's arguments "
                                       f"by name (or an array of them in order), got "
                                       f"{type(value).__name__}")


def _plain(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"cannot send a {type(value).__name__}")


def _strict_json(value: Any) -> Any:
    """``value`` with NaN and infinities as the strings "NaN", "Infinity", "-Infinity"
    (which JavaScript's Number() and Python's float() read): JSON has no such numbers, and
    a space's unbounded Box written as Python's bare Infinity breaks strict parsers."""
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value).replace("inf", "Infinity").replace(
            "nan", "NaN")
    if isinstance(value, dict):
        return {k: _strict_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_strict_json(v) for v in value]
    if isinstance(value, (np.ndarray, np.generic)):
        return _strict_json(_plain(value))
    return value


def encode_reply(value: Any, ctype: str) -> bytes:
    if ctype == RLMESH_MSGPACK:
        return bytes(codec.encode(value, inline_threshold=1 << 62)[0])
    if ctype == MSGPACK:
        return msgpack.packb(value, default=_plain, use_bin_type=True)
    return json.dumps(_strict_json(value), allow_nan=False).encode()


def refusal(exc: Exception) -> HTTPError:
    """The status and line of a call the service refused (as its error reply would say)."""
    if isinstance(exc, HTTPError):
        return exc
    if isinstance(exc, CallError):
        return HTTPError(STATUS_OF.get(exc.etype, 400), exc.etype, str(exc))
    if isinstance(exc, KeyError):  # an unknown episode id (etype as the ZeroMQ path's)
        return HTTPError(404, "KeyError", str(exc.args[0]) if exc.args else "unknown key")
    if isinstance(exc, (ClientDataError, ValueError, TypeError)):
        return HTTPError(400, type(exc).__name__, str(exc))
    return HTTPError(500, type(exc).__name__, f"the server failed on this call: {exc}")


def response(code: int, body: bytes, ctype: str, close: bool, etype: str = "") -> bytes:
    head = [f"HTTP/1.1 {code} {http.HTTPStatus(code).phrase}", f"Content-Type: {ctype}",
            f"Content-Length: {len(body)}", f"Connection: {'close' if close else 'keep-alive'}"]
    if etype:
        head.append(f"X-Rlmesh-Error: {etype}")
    if code == 401:
        head.append('WWW-Authenticate: Bearer realm="rlmesh policy server"')
    return ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body


def error_response(err: HTTPError, close: bool) -> bytes:
    line = " ".join(f"{err.etype}: {err.text}".split())[:MAX_ERROR_CHARS]
    return response(err.code, (line + "\n").encode(), "text/plain; charset=utf-8",
                    close or err.close, err.etype)


def bind_address(address: str, insecure_plaintext: bool, tls: bool) -> tuple[str, str, int]:
    """(scheme, host, port) of an ``http://`` or ``https://`` address. ``localhost`` is
    127.0.0.1; a plain http:// address off loopback needs ``insecure_plaintext`` (its
    tokens would cross the network in the clear)."""
    url = urlsplit(address)
    try:
        host, port = url.hostname, url.port
    except ValueError as exc:
        raise ValueError(f"policy_server_address {address!r}: {exc}") from None
    if url.scheme not in ("http", "https") or not host or port is None or url.path not in ("", "/"):
        raise ValueError(f"policy_server_address {address!r}: write http://HOST:PORT (or "
                         f"https://), e.g. http://127.0.0.1:9900")
    host = "127.0.0.1" if host == "localhost" else host
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        raise ValueError(f"policy_server_address {address!r}: the host must be an IP address "
                         f"of this machine (or localhost)") from None
    if url.scheme == "https" and not tls:
        raise ValueError("an https:// policy server needs policy_server_tls_certfile and "
                         "policy_server_tls_keyfile")
    if url.scheme == "http" and not ip.is_loopback and not insecure_plaintext:
        raise ValueError(f"policy_server_address {address!r}: plain http off loopback would "
                         f"send the bearer tokens in the clear; serve https:// (with "
                         f"policy_server_tls_certfile/keyfile), or set "
                         f"policy_server_insecure_plaintext")
    return url.scheme, host, port


def tls_context(certfile: str, keyfile: str) -> ssl.SSLContext:
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(certfile, keyfile)
    return ctx
