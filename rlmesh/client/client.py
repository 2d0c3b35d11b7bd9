"""PolicyClient: a simulator with its own main loop reports experience to rlmesh and asks
it for actions (RLlib's PolicyClient: over ZeroMQ and msgpack for a tcp:// or ipc:// address,
over HTTP with msgpack bodies for http:// or https://; nothing pickled).

Remote inference needs only pyzmq, msgpack and numpy: every call is a request to the
policy server. Local inference keeps a numpy copy of the policy (the default MLP, or its
LSTM; gymnasium for the spaces, no torch), refreshes its weights when the server has newer
ones (at most every ``update_interval`` seconds), and ships experience in chunks. A
recurrent policy's state is kept per episode in both modes (``Episodes.step_inputs``).
"""

from __future__ import annotations

import itertools
import threading
import time
from typing import Any

import numpy as np
import zmq

from rlmesh.client.episodes import Episodes, as_batch, check_reward
from rlmesh.client.http import HTTP_API_VERSION, HTTPTransport
from rlmesh.client.keys import curve_client_options, default_keys_dir, read_http_token
from rlmesh.wire import codec
from rlmesh.wire import messages as M
from rlmesh.wire.sockets import SpinWait, configure

_call_ids = itertools.count(1)
# A simulator embedding the client never loads torch: weights come as numpy arrays, and a
# tensor in a reply is refused rather than imported for.
REPLY_LIMITS = codec.Limits(tensors=False)
HELLO_RESEND_S = 0.5  # HELLO unanswered this long is sent again (PolicyClient._hello)


class PolicyServerError(RuntimeError):
    """The server refused a call (its message says why); the client can go on."""

    def __init__(self, etype: str, msg: str) -> None:
        super().__init__(f"{etype}: {msg}")
        self.etype = etype


class PolicyServerUnavailable(ConnectionError):
    """No reply from the server in time."""


class PolicyClient:
    """``PolicyClient("tcp://127.0.0.1:9900", inference_mode="remote")``, or
    ``PolicyClient("http://localhost:9900")`` for a server on http:// (RLlib's spelling).

    Thread-safe: calls from several threads are serialised on the one connection (and,
    with local inference, on the one policy and episode book).
    ``curve_server_key`` (the server's public key, z85) and ``curve_keypair`` (this
    client's ``(public, secret)``) encrypt and authenticate a TCP connection (see
    ``curve_client_options``). Without them a tcp:// client takes the ``client`` keys of
    ``default_keys_dir()`` (where a server given no keys made them), unless
    ``insecure_plaintext`` (for a server started with ``policy_server_insecure_plaintext``).

    ``spin_wait_us``: how long a call polls for its reply before it sleeps (default 0:
    it sleeps at once). A caller of ``get_action`` is stalled until the reply anyway;
    polling spares it the wake-up from sleep, at the price of a busy core while it waits,
    and pays where the simulator has a core to itself (on 2 cores shared with the server
    it did not). It spins only while replies come within the budget (``SpinWait``).

    Over http:// or https://, ``token`` is the server's bearer token for this client
    (``read_http_token(DIR, "sim1")``; default: the ``client`` token of
    ``default_keys_dir()``, none with ``insecure_plaintext``), and ``tls_cafile`` the
    certificate (or its CA) an https:// server presents, where the system's CAs do not
    vouch for it. Each call is one request on a kept-alive connection.
    """

    def __init__(self, address: str, inference_mode: str = "remote", update_interval: float = 10.0,
                 timeout: float = 30.0, curve_server_key: bytes | str | None = None,
                 curve_keypair: tuple[bytes | str, bytes | str] | None = None,
                 spin_wait_us: float = 0.0, insecure_plaintext: bool = False,
                 token: str | None = None, tls_cafile: str | None = None) -> None:
        if inference_mode not in ("remote", "local"):
            raise ValueError(f"inference_mode must be 'remote' or 'local', got {inference_mode!r}")
        if not spin_wait_us >= 0:
            raise ValueError(f"spin_wait_us must be >= 0, got {spin_wait_us!r}")
        self._spin = SpinWait(spin_wait_us / 1e6)
        self.address, self.inference_mode = address, inference_mode
        self.update_interval, self.timeout = float(update_interval), float(timeout)
        self._lock = threading.RLock()
        self._waiting: set[int] = set()  # calls sent whose replies are still wanted
        self._replies: dict[int, dict[str, Any]] = {}  # replies received, not yet collected
        self._http: HTTPTransport | None = None
        self._closed = False
        if address.startswith(("http://", "https://")):
            if token is None and not insecure_plaintext:
                try:
                    token = read_http_token(default_keys_dir(), "client")
                except ValueError as exc:
                    raise ValueError(f"{exc}; or pass token=..., or insecure_plaintext=True "
                                     f"for a server started with "
                                     f"policy_server_insecure_plaintext") from None
            self._http = HTTPTransport(address, token, self.timeout, tls_cafile,
                                       PolicyServerUnavailable, REPLY_LIMITS)
            try:
                self.server_info = self._call("server_info")
                if self.server_info.get("http_api") != HTTP_API_VERSION:
                    raise M.VersionMismatch(self.server_info.get("http_api"), HTTP_API_VERSION)
            except BaseException:
                self._http.close()
                raise
        else:
            self._connect(address, curve_server_key, curve_keypair, insecure_plaintext)
        self._local: _LocalInference | None = None
        if inference_mode == "local":
            self._local = _LocalInference(self, self.server_info)

    def _connect(self, address: str, curve_server_key: bytes | str | None,
                 curve_keypair: tuple[bytes | str, bytes | str] | None,
                 insecure_plaintext: bool) -> None:
        """The ZeroMQ connection (CURVE on tcp://), checked with HELLO and server_info."""
        self._ctx = zmq.Context.instance()
        self._sock = configure(self._ctx.socket(zmq.DEALER))
        if curve_server_key is None and address.startswith("tcp://") and not insecure_plaintext:
            try:
                curve_server_key, curve_keypair = curve_client_options(default_keys_dir()).values()
            except ValueError as exc:
                self._sock.close(0)
                raise ValueError(f"{exc}; or pass insecure_plaintext=True for a server "
                                 f"started with policy_server_insecure_plaintext") from None
        if curve_server_key is not None:
            if curve_keypair is None:
                curve_keypair = zmq.curve_keypair()
            self._sock.curve_serverkey = _key(curve_server_key)
            self._sock.curve_publickey, self._sock.curve_secretkey = map(_key, curve_keypair)
        self._sock.connect(address)
        try:
            self._result(self._hello())
            self.server_info = self._call("server_info")
        except BaseException:
            self._sock.close(0)
            raise

    # --- RLlib's PolicyClient API ---

    def start_episode(self, episode_id: str | None = None, training_enabled: bool = True) -> str:
        if self._local is not None:
            with self._lock:
                return self._local.episodes.start(episode_id, training_enabled)
        return self._call("start_episode", episode_id, training_enabled)

    def get_action(self, episode_id: str, observation: Any) -> Any:
        if self._local is not None:
            with self._lock:
                return self._local.get_action(episode_id, observation)
        return self._call("get_action", episode_id, observation)

    def log_action(self, episode_id: str, observation: Any, action: Any) -> None:
        if self._local is not None:
            with self._lock:
                return self._local.log_action(episode_id, observation, action)
        self._call("log_action", episode_id, observation, action)

    def log_returns(self, episode_id: str, reward: float, info: dict | None = None) -> None:
        if self._local is not None:
            with self._lock:
                return self._local.episodes.reward(episode_id, check_reward(reward))
        self._call("log_returns", episode_id, reward, info)

    def end_episode(self, episode_id: str, observation: Any, truncated: bool = False) -> None:
        """Close the episode with its final observation; ``truncated``: it was cut short
        (a time limit), not ended by the task, so its value is bootstrapped."""
        if self._local is not None:
            with self._lock:
                return self._local.end_episode(episode_id, observation, truncated)
        self._call("end_episode", episode_id, observation, truncated)

    def close(self) -> None:
        """Ship what local inference still holds, then close the connection."""
        if self._closed:
            return
        try:
            if self._local is not None:
                with self._lock:
                    self._local.flush()
        except (PolicyServerError, PolicyServerUnavailable):
            pass  # the server is gone or refuses: nothing left to deliver to
        finally:
            with self._lock:
                self._closed = True
                if self._http is not None:
                    self._http.close()
                else:
                    self._sock.close(0)

    def __enter__(self) -> "PolicyClient":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # --- requests ---

    def _call(self, method: str, *args: Any) -> Any:
        return self._result(self._request(self._send_call(method, args)))

    def _send_call(self, method: str, args: tuple[Any, ...]) -> int:
        """Send a call without waiting; its reply is collected by ``_request(id)``."""
        msg = M.make(M.CALL, id=next(_call_ids), m=method, a=list(args), k={})
        if self._http is not None:  # answered now: the reply waits for ``_request``
            with self._lock:
                if self._closed:
                    raise RuntimeError("PolicyClient is closed")
                self._replies[msg["id"]] = self._http.call(method, args, msg["id"])
                return msg["id"]
        frames = codec.encode(msg)
        with self._lock:
            if self._closed:
                raise RuntimeError("PolicyClient is closed")
            self._sock.send_multipart(frames, copy=False)
            self._waiting.add(msg["id"])
        return msg["id"]

    def _hello(self) -> dict[str, Any]:
        """HELLO's reply, HELLO sent again every ``HELLO_RESEND_S`` until it comes: a busy
        server may shed a new connection before reading it (it reconnects, but what was
        sent on it is lost), and HELLO changes nothing, so sending it twice is harmless."""
        hello = M.make(M.HELLO, id=next(_call_ids))
        frames, deadline = codec.encode(hello), time.monotonic() + self.timeout
        with self._lock:
            self._waiting.add(hello["id"])
            try:
                while hello["id"] not in self._replies:
                    try:  # no wait for room: a refused handshake leaves no pipe to queue in
                        self._sock.send_multipart(frames, flags=zmq.NOBLOCK, copy=False)
                    except zmq.Again:
                        pass
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise self._unavailable()
                    if self._sock.poll(min(left, HELLO_RESEND_S) * 1000):
                        self._receive()
                return self._replies.pop(hello["id"])
            finally:
                self._waiting.discard(hello["id"])

    def _unavailable(self) -> PolicyServerUnavailable:
        return PolicyServerUnavailable(
            f"no reply from the policy server at {self.address} within {self.timeout:g} s "
            f"(is it running, and is this the right address?)")

    def _receive(self) -> None:
        reply = M.validate(codec.decode(self._sock.recv_multipart(copy=False), REPLY_LIMITS))
        if reply.get("id") in self._waiting:  # else: late, its call timed out
            self._replies[reply["id"]] = reply

    def _request(self, call_id: int) -> dict[str, Any]:
        """The reply to call ``call_id`` (sent by ``_send_call``)."""
        with self._lock:
            deadline = time.monotonic() + self.timeout
            try:
                while call_id not in self._replies:
                    left = deadline - time.monotonic()
                    if left <= 0 or not (self._spin.wait(self._sock)
                                         or self._sock.poll(left * 1000)):
                        raise self._unavailable()
                    self._receive()
                return self._replies.pop(call_id)
            finally:
                self._waiting.discard(call_id)

    @staticmethod
    def _result(reply: dict[str, Any]) -> Any:
        if reply["t"] == M.ERROR:
            if reply["etype"] == "VersionMismatch":
                raise M.VersionMismatch(None, text=reply["msg"])
            raise PolicyServerError(reply["etype"], reply["msg"])
        return reply.get("r")


class _LocalInference:
    """The client's own policy and episodes: actions computed here, chunks shipped."""

    def __init__(self, client: PolicyClient, info: dict[str, Any]) -> None:
        from rlmesh.env.registry import actions_for_env, space_from_data
        from rlmesh.rl.numpy_policy import NumpyPolicy

        self.client = client
        self.obs_space = space_from_data(info["observation_space"])
        self.action_space = space_from_data(info["action_space"])
        model = info["model"]
        from rlmesh.rl.numpy_lstm import NumpyLSTMPolicy
        from rlmesh.rl.spec import numpy_fast_path

        # The default MLP, or the LSTM over it (use_lstm), on a flat observation.
        if not numpy_fast_path(self.obs_space, self.action_space, {**model, "use_lstm": False}):
            raise ValueError("inference_mode='local' computes the default MLP (or its LSTM) in "
                             "numpy; this server's model (a custom_model, a conv net or nested "
                             "spaces) needs torch: use inference_mode='remote'")
        self.recurrent = bool(model.get("use_lstm"))
        self.policy = (NumpyLSTMPolicy if self.recurrent else NumpyPolicy)(
            self.obs_space, self.action_space, model, info["explore"])
        self.normalize = info["normalize_actions"]
        from rlmesh.rl.filters import make_filter

        # The server's global statistics, refreshed with the weights, applied unchanged.
        self.obs_filter = make_filter(info.get("observation_filter", "NoFilter"), self.obs_space)
        self._to_env = actions_for_env
        self.episodes = Episodes(info["chunk_len"], **self._memory_options())
        self.version = -1
        self._in_flight: int | None = None  # the report_chunks call whose reply is due
        self._checked = -float("inf")
        self._refresh(force=True)

    def _memory_options(self) -> dict[str, Any]:
        """A recurrent policy's state, kept per episode by ``Episodes`` and recorded with
        each step (``state_in``/``state_out``, prev action/reward), as runners record it."""
        if not self.recurrent:
            return {}
        p = self.policy
        zero_action = np.zeros(p.prev_action_shape, p.action_dtype) if p.use_prev_action else None
        return {"initial_state": p.get_initial_state(), "prev_action": zero_action,
                "prev_reward": p.use_prev_reward}

    def _refresh(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._checked < self.client.update_interval:
            return
        self._checked = now
        got = self.client._call("get_weights", self.version)
        if got is not None:
            self.version, weights = got[:2]
            self.policy.set_weights(weights)
            if len(got) > 2:
                self.obs_filter.set_state(got[2])

    def _obs(self, observation: Any) -> Any:
        from rlmesh.rl.spec import check_observation  # gymnasium: local inference only

        return self.obs_filter(check_observation(self.obs_space, observation), update=False)

    def get_action(self, episode_id: str, observation: Any) -> Any:
        # The episode's own recurrent state (unknown ids fail here, before any work).
        memory = self.episodes.step_inputs(episode_id)
        self._refresh()
        obs = self._obs(observation)
        state_out: list[Any] = []
        if memory:
            actions, logp, inputs, state_out = self.policy.step(obs[None], *as_batch(memory))
        else:
            actions, logp, inputs = self.policy(obs[None])
        self.episodes.act(episode_id, obs, actions[0], logp[0], inputs[0], memory,
                          [s[0] for s in state_out])
        self._ship(enough=True)
        return _plain(self._to_env(actions[0], self.action_space, self.normalize))

    def log_action(self, episode_id: str, observation: Any, action: Any) -> None:
        from rlmesh.rl.spec import check_action

        memory = self.episodes.step_inputs(episode_id)
        obs = self._obs(observation)
        action = check_action(self.action_space, action, self.policy.action_dtype)
        state_out: list[Any] = []
        if memory:  # scored from the episode's state, which the logged action advances
            inputs, state_out = self.policy.recurrent_inputs(obs[None], *as_batch(memory))
        else:
            inputs = self.policy.dist_inputs(obs[None])
        logp = self.policy.logp(inputs, action[None])
        self.episodes.act(episode_id, obs, action, logp[0], inputs[0], memory,
                          [s[0] for s in state_out])
        self._ship(enough=True)

    def end_episode(self, episode_id: str, observation: Any, truncated: bool) -> None:
        self.episodes.end(episode_id, self._obs(observation), truncated)
        self._ship(enough=False)

    def _ship(self, enough: bool) -> None:
        """Send the chunks cut so far (at once after an episode ends, else once a chunk's
        worth of steps is waiting) without waiting for the server's check of them: its
        reply, an error included, is collected at the next ship, so one shipment at most
        is in flight and the simulator steps on meanwhile."""
        if not self.episodes.chunks:
            return
        if enough and self.episodes.steps_ready() < self.episodes.chunk_len:
            return
        self._collect()
        self._in_flight = self.client._send_call("report_chunks",
                                                 (self.episodes.take_chunks(), self.version))

    def _collect(self) -> None:
        call_id, self._in_flight = self._in_flight, None
        if call_id is not None:
            self.client._result(self.client._request(call_id))

    def flush(self) -> None:
        self._ship(enough=False)
        self._collect()


def _plain(action: Any) -> Any:
    """An action as the simulator wants it: a Python int for Discrete, else an array."""
    return int(action) if getattr(action, "ndim", 1) == 0 else action


def _key(key: bytes | str) -> bytes:
    return key.encode("ascii") if isinstance(key, str) else key
