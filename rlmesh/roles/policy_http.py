"""The policy server's HTTP front (RLlib's REST PolicyClient protocol): HTTP/1.1 on the
server's own event loop, one request one ``PolicyService`` call, checked by the same table
as the ZeroMQ path; bearer tokens, optional TLS, bounded requests. What a request and a
reply look like is ``policy_http_wire``'s."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import ssl
from collections import Counter
from typing import Any, Callable

from rlmesh.client.http import REPLY_NAMES
from rlmesh.client.keys import default_keys_dir, make_http_token, token_names
from rlmesh.roles.policy_http_wire import (HTTPError, Request, bind_address, body_length,
                                           body_type, decode_body, encode_reply,
                                           error_response, parse_head, refusal, reply_type,
                                           response, tls_context)
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
