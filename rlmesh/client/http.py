"""PolicyClient over HTTP (``http://`` and ``https://`` addresses, RLlib's REST client): each
call one POST to a policy server's HTTP front, on one kept-alive connection, standard library
only. Also the HTTP API's names, which the server's front (roles/policy_http.py) imports."""

from __future__ import annotations

import http.client
import ssl
from typing import Any
from urllib.parse import urlsplit

from rlmesh.wire import codec
from rlmesh.wire import messages as M

HTTP_API_VERSION = 1  # server_info's "http_api"; a client checks it at connect
JSON = "application/json"
MSGPACK = "application/msgpack"
# msgpack with rlmesh's array extension types (wire/codec.py): arrays as raw bytes, dtype
# and shape, where plain msgpack and JSON carry nested lists.
RLMESH_MSGPACK = "application/vnd.rlmesh.msgpack"
MSGPACK_TYPES = (MSGPACK, "application/x-msgpack", "application/vnd.msgpack", RLMESH_MSGPACK)
# The key of a call's one value in its reply object; calls returning a dict send it whole,
# calls returning nothing send {}.
REPLY_NAMES = {"start_episode": "episode_id", "start_agent": "episode_id",
               "get_action": "action", "report_chunks": "steps", "get_weights": "weights"}


class HTTPTransport:
    """Sends a call, returns the reply as a wire message (``M.REPLY`` or ``M.ERROR``);
    ``Unavailable`` (the client's ``PolicyServerUnavailable``) when no answer comes."""

    def __init__(self, address: str, token: str | None, timeout: float,
                 tls_cafile: str | None, unavailable: type[Exception],
                 limits: codec.Limits) -> None:
        url = urlsplit(address)
        try:
            port = url.port
        except ValueError:
            port = None
        if url.scheme not in ("http", "https") or not url.hostname or port is None:
            raise ValueError(f"PolicyClient address {address!r}: write http://HOST:PORT or "
                             f"https://HOST:PORT, e.g. http://127.0.0.1:9900")
        if tls_cafile is not None and url.scheme != "https":
            raise ValueError("tls_cafile is for an https:// address")
        # localhost is the server's 127.0.0.1 (it binds no ::1): no refused attempt first.
        self.host = "127.0.0.1" if url.hostname == "localhost" else url.hostname
        self.port, self.address, self.timeout = port, address, timeout
        self.context = (ssl.create_default_context(cafile=tls_cafile)
                        if url.scheme == "https" else None)
        self.unavailable, self.limits = unavailable, limits
        self.headers = {"Content-Type": RLMESH_MSGPACK, "Accept": RLMESH_MSGPACK}
        if token is not None:
            self.headers["Authorization"] = f"Bearer {token}"
        self._conn: http.client.HTTPConnection | None = None

    def _connection(self) -> tuple[http.client.HTTPConnection, bool]:
        """The open connection, or a new one (and whether it is new)."""
        if self._conn is not None:
            return self._conn, False
        if self.context is not None:
            self._conn = http.client.HTTPSConnection(self.host, self.port, timeout=self.timeout,
                                                     context=self.context)
        else:
            self._conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
        return self._conn, True

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def call(self, method: str, args: tuple[Any, ...], call_id: int) -> dict[str, Any]:
        body = bytes(codec.encode(list(args), inline_threshold=1 << 62)[0])
        while True:
            conn, new = self._connection()
            try:
                conn.request("POST", f"/{method}", body, self.headers)
                response = conn.getresponse()
                data = response.read()
                break
            except (ConnectionError, http.client.HTTPException, OSError) as exc:
                self.close()
                # A kept-alive connection the server closed while idle (it sheds idle ones
                # past its cap, or after 30 s): it read nothing of this call, so send again.
                if new or isinstance(exc, TimeoutError):
                    raise self.unavailable(
                        f"no reply from the policy server at {self.address} within "
                        f"{self.timeout:g} s ({type(exc).__name__}: {exc}; is it running, and "
                        f"is this the right address?)") from None
        if response.will_close:
            self.close()
        if response.status == 200:
            value = codec.decode([data], self.limits)
            if method in REPLY_NAMES:
                value = value[REPLY_NAMES[method]]
            elif value == {}:
                value = None
            return M.make(M.REPLY, id=call_id, r=value)
        text = data.decode("utf-8", "replace").strip()
        etype = response.getheader("X-Rlmesh-Error") or f"HTTP {response.status}"
        return M.make(M.ERROR, id=call_id, etype=etype, msg=text.removeprefix(f"{etype}: "),
                      tb="")
