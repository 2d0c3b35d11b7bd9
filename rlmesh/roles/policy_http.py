"""The policy server's HTTP front (RLlib's REST PolicyClient protocol): HTTP/1.1 on the
server's own event loop, one request one ``PolicyService`` call, checked by the same table
as the ZeroMQ path; JSON or msgpack bodies, bearer tokens, optional TLS, bounded requests."""

from __future__ import annotations

import asyncio
import hashlib
import http
import ipaddress
import json
import logging
import math
import ssl
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable
from urllib.parse import urlsplit

import msgpack
import numpy as np

from rlmesh.client.episodes import ClientDataError
from rlmesh.client.http import JSON, MSGPACK, MSGPACK_TYPES, REPLY_NAMES, RLMESH_MSGPACK
from rlmesh.client.keys import default_keys_dir, make_http_token, token_names
from rlmesh.runtime.actor import table_of
from rlmesh.runtime.protocol import CALL, CallError
from rlmesh.wire import codec
from rlmesh.wire.logs import log_limited

log = logging.getLogger(__name__)

MAX_HEAD_BYTES = 16 << 10  # request line and headers: a few hundred bytes from any client
# A keep-alive connection idle this long (or a head this slow) is closed, as a CURVE
# handshake is after 10 s: a peer cannot hold a slot for ever by saying nothing.
HEAD_TIMEOUT_S = 30.0
BODY_TIMEOUT_S = 30.0  # for the whole body (16 MiB at 0.5 MB/s)
WRITE_TIMEOUT_S = 30.0  # a client that does not read its reply
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


# --- decisions (no sockets) ---

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


# --- the socket shell ---

class HTTPFront:
    """Serves ``service``'s declared calls as ``POST /<call>`` (and ``GET /server_info``).

    ``tokens``: SHA-256 digest of each admitted bearer token -> the client's name (None:
    no token asked, the client named by its address). ``set_caller``: given the client's
    name for the duration of each call, and None after it (the service's rejection counts and
    per-client caps use it)."""

    def __init__(self, service: Any, set_caller: Callable[[str | None], None], *,
                 tokens: dict[bytes, str] | None, limits: codec.Limits,
                 max_connections: int, ssl_context: ssl.SSLContext | None = None) -> None:
        self.service = service
        self.set_caller = set_caller
        self.table = table_of(type(service))
        self.tokens = tokens
        self.limits = limits
        self.max_connections = max_connections
        self.ssl = ssl_context
        self.idle: dict[asyncio.StreamWriter, bool] = {}  # open connections, least recent first
        self.stats: Counter[str] = Counter()
        self._server: asyncio.base_events.Server | None = None
        self.address = ""

    async def start(self, scheme: str, host: str, port: int) -> str:
        self._server = await asyncio.start_server(
            self._connection, host, port, limit=MAX_HEAD_BYTES, ssl=self.ssl,
            ssl_handshake_timeout=10.0 if self.ssl else None)
        port = self._server.sockets[0].getsockname()[1]
        return f"{scheme}://{host}:{port}"

    def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for writer in list(self.idle):
            writer.close()

    def counts(self) -> dict[str, int]:
        return {f"http_{k}": v for k, v in self.stats.items()}

    def _admit(self, writer: asyncio.StreamWriter) -> bool:
        """Room for a new connection: past the cap the least recently active idle one
        is closed (its client reconnects), so idle keep-alives never lock a client out."""
        if len(self.idle) >= self.max_connections:
            oldest = next((w for w, idle in self.idle.items() if idle), None)
            if oldest is None:
                return False
            self.idle.pop(oldest)
            oldest.close()
            self.stats["connections_shed"] += 1
        self.idle[writer] = True
        return True

    async def _connection(self, reader: asyncio.StreamReader,
                          writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername") or ("?", 0)
        try:
            if not self._admit(writer):
                self.stats["connections_refused"] += 1
                err = HTTPError(503, "Busy", f"the server holds {self.max_connections} busy "
                                            f"connections (policy_server_max_connections); retry")
                await self._send(writer, error_response(err, True))
                return
            while await self._one_request(reader, writer, f"http-{peer[0]}:{peer[1]}"):
                pass
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.TimeoutError, ssl.SSLError):
            pass  # the client went away, or was too slow: nothing to answer
        finally:
            self.idle.pop(writer, None)
            writer.close()

    async def _one_request(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                           peer: str) -> bool:
        """Serve one request; whether the connection stays open for the next."""
        self.idle.pop(writer, None)
        self.idle[writer] = True  # idle again, and now the most recently active
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), HEAD_TIMEOUT_S)
        except asyncio.IncompleteReadError:
            return False  # closed between requests
        except asyncio.LimitOverrunError:
            err = HTTPError(431, "BadRequest", f"the request line and headers exceed "
                                               f"{MAX_HEAD_BYTES} bytes", True)
            return await self._refuse(writer, err, True)
        except asyncio.TimeoutError:
            return False  # an idle keep-alive, or a head sent too slowly
        if writer in self.idle:  # busy: not to be shed while its request is served
            self.idle[writer] = False
        self.stats["requests"] += 1
        request: Request | None = None
        try:
            request = parse_head(head)
            out = await self._serve(reader, writer, request, peer)
        except HTTPError as err:
            return await self._refuse(writer, err, request is None or not request.keep_alive)
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.TimeoutError):
            raise  # the client went away or stalled: nothing to answer
        except Exception as exc:  # a bug of ours: this request fails, the server serves on
            log.exception("policy server: an HTTP request failed")
            return await self._refuse(writer, HTTPError(500, type(exc).__name__, str(exc)), True)
        await self._send(writer, out)
        return request.keep_alive

    async def _refuse(self, writer: asyncio.StreamWriter, err: HTTPError, close: bool) -> bool:
        self.stats[f"status_{err.code}"] += 1
        log_limited(log, "policy_http", "policy server: HTTP %d %s: %.200s", err.code,
                    err.etype, err.text)
        await self._send(writer, error_response(err, close))
        return not (close or err.close)

    async def _send(self, writer: asyncio.StreamWriter, data: bytes) -> None:
        writer.write(data)
        await asyncio.wait_for(writer.drain(), WRITE_TIMEOUT_S)

    def _who(self, request: Request, peer: str) -> str:
        if self.tokens is None:
            return peer
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        if not token or scheme.lower() != "bearer":
            raise HTTPError(401, "Unauthorized", "no bearer token: send 'Authorization: "
                                                 "Bearer TOKEN' (docs/security.md)", True)
        name = self.tokens.get(hashlib.sha256(token.strip().encode()).digest())
        if name is None:
            raise HTTPError(401, "Unauthorized", "the bearer token is not one this server "
                                                 "admits", True)
        return name

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                     request: Request, peer: str) -> bytes:
        """The response to one parsed request, or HTTPError before the body is read."""
        who = self._who(request, peer)
        call = request.path.strip("/")
        if request.method not in ("POST", "GET") or (request.method == "GET"
                                                     and call != "server_info"):
            raise HTTPError(405, "BadRequest", f"{request.method} {request.path}: POST a call "
                                               f"to /<call> (GET only /server_info)", True)
        length = body_length(request, self.limits.max_message_bytes)
        ctype = body_type(request, length)
        if length and "100-continue" in request.headers.get("expect", "").lower():
            await self._send(writer, b"HTTP/1.1 100 Continue\r\n\r\n")
        body = await asyncio.wait_for(reader.readexactly(length), BODY_TIMEOUT_S) if length else b""
        args, kwargs = decode_body(ctype, body, self.limits)
        try:
            value = self.call(call, args, kwargs, who)
        except Exception as exc:
            err = refusal(exc)
            if err.code >= 500:
                log.exception("policy server: %s failed on an HTTP call", call)
            raise err from None
        out_type = reply_type(request, ctype)
        if call in REPLY_NAMES:
            value = {REPLY_NAMES[call]: value}
        elif not isinstance(value, dict):  # log_action, log_returns, end_episode: nothing
            value = {} if value is None else {"result": value}
        try:
            body = encode_reply(value, out_type)
        except (TypeError, ValueError, codec.EncodeError) as exc:
            raise HTTPError(500, "EncodeError", f"the reply cannot be sent as {out_type}: "
                                                f"{exc}") from None
        self.stats["status_200"] += 1
        return response(200, body, out_type, not request.keep_alive)

    def call(self, method: str, args: list[Any], kwargs: dict[str, Any], who: str) -> Any:
        """``method(*args, **kwargs)`` of the service, refused as the ZeroMQ path refuses
        it: an undeclared call, an argument of the wrong type, a missing or unknown one."""
        entry = self.table.resolve(CALL, method)
        why = entry.bad_types(args, kwargs) or entry.bad_arity(args, kwargs)
        if why is not None:
            raise CallError("BadRequest", why)
        self.set_caller(who)
        try:
            return getattr(self.service, entry.name)(*args, **kwargs)
        finally:
            self.set_caller(None)


async def serve_http(service: Any, cfg: Any, address: str, limits: codec.Limits) -> HTTPFront:
    """Start the HTTP front of ``service`` at ``address`` as the policy server's config
    says (``policy_server_http_tokens``, ``policy_server_tls_*``,
    ``policy_server_insecure_plaintext``, ``policy_server_max_connections``)."""
    certfile, keyfile = cfg.policy_server_tls_certfile, cfg.policy_server_tls_keyfile
    if bool(certfile) != bool(keyfile):
        raise ValueError("policy_server_tls_certfile and policy_server_tls_keyfile go together")
    scheme, host, port = bind_address(address, cfg.policy_server_insecure_plaintext,
                                      bool(certfile))
    if certfile and scheme == "http":
        raise ValueError(f"policy_server_address {address!r}: with a TLS certificate, write "
                         f"https://")
    tokens = None
    if not cfg.policy_server_insecure_plaintext:
        keys = cfg.policy_server_http_tokens
        if keys is None:
            keys = default_keys_dir()
            make_http_token(keys, "client")
            log.info("policy server: HTTP clients need a token of %s/tokens "
                     "(rlmesh.client.read_http_token)", keys)
        tokens = token_names(keys)
        if not tokens:
            raise ValueError(f"policy_server_http_tokens {str(keys)!r} holds no "
                             f"tokens/<name>.token (make them with "
                             f"rlmesh.client.make_http_token)")
    front = HTTPFront(service, lambda who: setattr(service, "http_caller", who),
                      tokens=tokens, limits=limits,
                      max_connections=cfg.policy_server_max_connections,
                      ssl_context=tls_context(certfile, keyfile) if certfile else None)
    front.address = await front.start(scheme, host, port)
    return front
