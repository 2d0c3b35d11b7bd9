"""Fuzzing the policy server's HTTP front (the sibling of test_fuzz_policy_server.py): while
an honest client plays CartPole over HTTP, hypothesis sends hostile requests (calls with
junk arguments, wrong types and tokens, raw and mangled bytes) to the same server. Every
answer is a 4xx of one line (or a 200 for a request that happened to be valid), never a 5xx
or a hang; the honest client is never refused; refusals are counted for the fuzzer's token;
idle connections past the cap are shed so a client still gets in."""

from __future__ import annotations

import json
import socket
import threading
import time

import gymnasium as gym
import msgpack
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from rlmesh.client import PolicyClient, make_http_token, read_http_token
from rlmesh.client.keys import default_keys_dir

from .test_seed_000_rest_client import http_runner

pytestmark = pytest.mark.timeout(180)
CALLS = ["server_info", "start_episode", "start_agent", "get_action", "log_action",
         "log_returns", "end_episode", "get_weights", "report_chunks", "sample", "set_weights",
         "_refused", "", "get_action/x", "%00"]
ARGS = ["episode_id", "observation", "action", "reward", "info", "truncated",
        "training_enabled", "agent_id", "have_version", "chunks", "policy_version"]
values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=6) | st.dictionaries(
        st.sampled_from(ARGS) | st.text(max_size=8), inner, max_size=5),
    max_leaves=30)
# The arguments of the calls that reach the service's own checks (values, episodes).
PARAMS = {"start_episode": ["episode_id"], "get_action": ["episode_id", "observation"],
          "log_action": ["episode_id", "observation", "action"],
          "log_returns": ["episode_id", "reward"], "end_episode": ["episode_id", "observation"],
          "get_weights": ["have_version"]}
observations = st.one_of(
    st.lists(st.floats(width=32), min_size=4, max_size=4), st.lists(st.floats(), max_size=6),
    values)


def exchange(port: int, data: bytes, timeout: float = 10.0) -> bytes:
    """Send ``data``, end the request side, and read what comes back until the server
    closes (an incomplete request is closed unanswered)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        try:
            sock.sendall(data)
            sock.shutdown(socket.SHUT_WR)
        except OSError:  # refused and closed before all was sent (a 4xx already written)
            pass
        out = b""
        try:
            while chunk := sock.recv(65536):
                out += chunk
        except ConnectionResetError:
            pass
    return out


def check_answers(raw: bytes, statuses: list[int]) -> None:
    """Each response in ``raw``: 200, or a 4xx whose body is one line."""
    while raw:
        head, _, rest = raw.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        assert lines[0].startswith("HTTP/1.1 "), raw[:200]
        status = int(lines[0].split(" ")[1])
        length = next(int(h.split(":")[1]) for h in lines[1:]
                      if h.lower().startswith("content-length"))
        body, raw = rest[:length], rest[length:]
        assert status == 200 or 400 <= status < 500, (status, body)
        if status != 200:
            text = body.decode()
            assert text.endswith("\n") and "\n" not in text[:-1], text
        statuses.append(status)


def call_bytes(call: str, body: bytes, ctype: str, token: str | None, method: str,
               keep_alive: bool) -> bytes:
    auth = "" if token is None else f"Authorization: Bearer {token}\r\n"
    conn = "" if keep_alive else "Connection: close\r\n"
    return (f"{method} /{call} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: {ctype}\r\n"
            f"{auth}{conn}Content-Length: {len(body)}\r\n\r\n").encode() + body


class Honest(threading.Thread):
    """rlmesh's client over HTTP playing episodes until told to stop."""

    def __init__(self, address: str) -> None:
        super().__init__(daemon=True)
        self.address, self.stop, self.episodes, self.failure = address, threading.Event(), 0, None

    def run(self) -> None:
        env = gym.make("CartPole-v1")
        try:
            with PolicyClient(self.address) as client:
                while not self.stop.is_set():
                    episode_id = client.start_episode()
                    obs, _ = env.reset(seed=self.episodes)
                    done = False
                    while not done:
                        obs, r, term, trunc, _ = env.step(client.get_action(episode_id, obs))
                        client.log_returns(episode_id, r)
                        done = term or trunc
                    client.end_episode(episode_id, obs)
                    self.episodes += 1
        except BaseException as exc:  # reported by the test
            self.failure = exc


def test_hostile_http_requests_get_4xx_and_an_honest_client_plays_on():
    make_http_token(default_keys_dir(), "fuzzer")  # before the server reads its tokens
    with http_runner(policy_server_max_connections=64) as (run, runner, address):
        port = int(address.rsplit(":", 1)[1])
        pid = run(runner.call("pid"))
        fuzz_token = read_http_token(default_keys_dir(), "fuzzer")
        honest = Honest(address)
        honest.start()
        statuses: list[int] = []
        episode_ids: list[str] = []

        @settings(max_examples=150, deadline=None, derandomize=True,
                  suppress_health_check=list(HealthCheck))
        @given(call=st.sampled_from(CALLS), args=st.dictionaries(st.sampled_from(ARGS), values),
               obs=observations, encoding=st.sampled_from(["json", "msgpack", "text/plain"]),
               token=st.sampled_from(["fuzzer", "fuzzer", "fuzzer", "none", "bad"]),
               method=st.sampled_from(["POST"] * 8 + ["GET", "PUT"]), keep=st.booleans(),
               typed=st.sampled_from(list(PARAMS) + [None] * 3), number=values | st.floats())
        def structured(call, args, obs, encoding, token, method, keep, typed, number):
            if typed is not None:  # the right call and names, hostile values
                call = typed
                given = {"episode_id": episode_ids[-1] if episode_ids else "nope",
                         "observation": obs, "action": number, "reward": number,
                         "have_version": number}
                args = {k: given[k] for k in PARAMS[typed]}
                if typed == "start_episode" and keep:
                    args = {}  # a new episode, for the calls after it to abuse
            else:
                args.setdefault("observation", obs)
            try:
                body = (json.dumps(args).encode() if encoding != "msgpack"
                        else msgpack.packb(args, use_bin_type=True))
            except (OverflowError, ValueError):
                body = repr(args).encode()
            ctype = {"json": "application/json", "msgpack": "application/msgpack"}.get(
                encoding, encoding)
            secret = {"fuzzer": fuzz_token, "none": None, "bad": fuzz_token[::-1]}[token]
            raw = exchange(port, call_bytes(call, body, ctype, secret, method, keep))
            check_answers(raw, statuses)
            if call == "start_episode" and statuses[-1] == 200 and encoding == "json":
                episode_ids.append(json.loads(raw.partition(b"\r\n\r\n")[2])["episode_id"])

        @settings(max_examples=100, deadline=None, derandomize=True,
                  suppress_health_check=list(HealthCheck))
        @given(data=st.binary(max_size=300), flips=st.lists(st.integers(0, 10**6), max_size=4),
               prefix=st.booleans())
        def mangled(data, flips, prefix):
            good = bytearray(call_bytes("get_action", b'{"episode_id": "x", "observation": '
                                        b'[0, 0, 0, 0]}', "application/json", fuzz_token,
                                        "POST", False))
            for i in flips:
                good[i % len(good)] = i % 256
            raw = exchange(port, bytes(good) + data if prefix else data)
            check_answers(raw, statuses)

        try:
            structured()
            mangled()
        finally:
            honest.stop.set()
            honest.join(30)
        assert honest.failure is None, honest.failure
        assert honest.episodes >= 1
        metrics = run(runner.call("metrics"))
        assert run(runner.call("pid")) == pid
    refused = metrics["client_rejections"]
    assert "client" not in refused and sum(refused["fuzzer"].values()) > 20, refused
    codes = set(statuses)
    assert {200, 400, 401, 404, 405, 415} <= codes, codes
    assert not [k for k in metrics if k.startswith("http_status_5")], metrics


def test_idle_connections_past_the_cap_are_shed_and_a_client_gets_in():
    with http_runner(policy_server_max_connections=8) as (run, runner, address):
        port = int(address.rsplit(":", 1)[1])
        idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(20)]
        try:
            with PolicyClient(address, timeout=10) as client:
                episode_id = client.start_episode()
                assert client.get_action(episode_id, [0.0, 0.0, 0.0, 0.0]) in (0, 1)
            metrics = run(runner.call("metrics"))
            # Connections are shed as newer ones come in; 8 at most stay open.
            assert metrics["http_connections_shed"] >= 12, metrics
            time.sleep(0.2)  # for the closed ones' FIN to arrive
            closed = 0
            for sock in idle:
                sock.setblocking(False)
                try:
                    closed += sock.recv(1) == b""
                except BlockingIOError:
                    pass  # still open
                except ConnectionResetError:
                    closed += 1
            assert 12 <= closed <= 20, closed
        finally:
            for sock in idle:
                sock.close()
