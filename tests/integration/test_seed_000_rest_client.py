"""Seed 000's REST API: a simulator speaks plain HTTP (the standard library's urllib and
http.client here, not rlmesh's client) to a policy server on http://127.0.0.1, plays whole
episodes, and PPO trains on them; every kind of bad request gets a 4xx of one line and the
server serves on; ``PolicyClient("http://localhost:PORT")`` as RLlib users write it; TLS."""

from __future__ import annotations

import argparse
import http.client
import json
import os
import signal
import ssl
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from contextlib import contextmanager

import gymnasium as gym
import msgpack
import numpy as np
import pytest
import uvloop

from rlmesh.algorithms.ppo import PPOConfig
from rlmesh.cli.serve import add_arguments, main as serve_main
from rlmesh.client import PolicyServerError, make_http_token, read_http_token
from rlmesh.client.keys import default_keys_dir
from rlmesh.runtime import Job

pytestmark = pytest.mark.timeout(120)
SERVER = "rlmesh.roles.policy_server:PolicyServerRunner"
CARTPOLE = gym.make("CartPole-v1")


def http_config(address: str = "http://127.0.0.1:0", **env_runners) -> PPOConfig:
    return (PPOConfig()
            .environment(observation_space=CARTPOLE.observation_space,
                         action_space=CARTPOLE.action_space)
            .env_runners(**{"policy_server_address": address, "num_env_runners": 1,
                            "policy_server_idle_timeout_s": 5.0, **env_runners})
            .training(train_batch_size=256, minibatch_size=128, num_epochs=2, lr=1e-3,
                      model={"fcnet_hiddens": [32]})
            .debugging(seed=0))


@contextmanager
def http_runner(address: str = "http://127.0.0.1:0", **env_runners):
    """A policy server runner in a process of its own (no learner): yields (run, handle,
    address)."""
    config = {**http_config(address, policy_server_idle_timeout_s=1.0, **env_runners).to_dict(),
              "_env_registry": {}}
    loop = uvloop.new_event_loop()
    job = loop.run_until_complete(Job("ipc").start())
    try:
        runner = loop.run_until_complete(job.spawn(SERVER, config=config, worker_index=1,
                                                   param_server=None))
        address = loop.run_until_complete(runner.call("get_address"))
        yield (lambda coro: loop.run_until_complete(coro)), runner, address
    finally:
        loop.run_until_complete(job.shutdown())
        loop.close()


class PlainSimulator:
    """A simulator with nothing but urllib: JSON (or plain msgpack) bodies, a bearer token."""

    def __init__(self, address: str, token: str, body: str = "json") -> None:
        self.address, self.token, self.body = address, token, body

    def post(self, call: str, **args):
        data = json.dumps(args).encode() if self.body == "json" else msgpack.packb(args)
        request = urllib.request.Request(
            f"{self.address}/{call}", data=data, method="POST",
            headers={"Content-Type": f"application/{self.body}",
                     "Authorization": f"Bearer {self.token}"})
        with urllib.request.urlopen(request, timeout=30) as response:
            raw = response.read()
            assert response.headers["Content-Type"] == f"application/{self.body}"
        return json.loads(raw) if self.body == "json" else msgpack.unpackb(raw)

    def play(self, seed: int, log_actions: bool = False) -> float:
        """One whole CartPole episode; the policy acts, or (``log_actions``) the simulator
        does and tells the server (RLlib's log_action)."""
        env = gym.make("CartPole-v1")
        episode_id = self.post("start_episode")["episode_id"]
        obs, _ = env.reset(seed=seed)
        total, done = 0.0, False
        while not done:
            if log_actions:
                action = int(env.action_space.sample())
                self.post("log_action", episode_id=episode_id, observation=obs.tolist(),
                          action=action)
            else:
                action = self.post("get_action", episode_id=episode_id,
                                   observation=obs.tolist())["action"]
            obs, reward, terminated, truncated, _ = env.step(action)
            self.post("log_returns", episode_id=episode_id, reward=float(reward))
            total += reward
            done = terminated or truncated
        self.post("end_episode", episode_id=episode_id, observation=obs.tolist(),
                  truncated=bool(truncated and not terminated))
        return total


@pytest.fixture(scope="module")
def algo(tmp_path_factory):
    # The module's own keys (conftest's per-test folder would change under the server).
    keys = tmp_path_factory.mktemp("keys")
    make_http_token(keys, "client")
    make_http_token(keys, "sim2")
    algo = http_config(policy_server_http_tokens=str(keys)).build()
    algo.keys = keys
    algo.address = algo.env_runners.foreach_env_runner("get_address")[0]
    yield algo
    algo.stop()


def test_a_plain_http_simulator_plays_whole_episodes_and_ppo_trains_on_them(algo):
    assert algo.address.startswith("http://127.0.0.1:")
    sims = [PlainSimulator(algo.address, read_http_token(algo.keys, "client"), "json"),
            PlainSimulator(algo.address, read_http_token(algo.keys, "sim2"), "msgpack")]
    before = {k: v.copy() for k, v in algo.get_policy().get_weights().items()}
    version_before = sims[0].post("server_info")["policy_version"]
    returns, failures, stop = [], [], threading.Event()

    def simulate(sim, first_seed):
        try:
            seed = first_seed
            while not stop.is_set():
                returns.append(sim.play(seed, log_actions=seed % 3 == 0))
                seed += 2
        except BaseException as exc:  # reported below
            failures.append(exc)
            stop.set()

    threads = [threading.Thread(target=simulate, args=(s, i)) for i, s in enumerate(sims)]
    for t in threads:
        t.start()
    try:
        results = [algo.train() for _ in range(2)]
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    assert not failures, failures
    last = results[-1]
    assert all(r["num_env_steps_trained"] > 0 and not r["idle_iteration"] for r in results)
    assert last["episodes_total"] > 0 and np.isfinite(last["episode_reward_mean"])
    stats = last["info"]["learner"]["default_policy"]
    assert np.isfinite(stats["total_loss"]), stats
    after = algo.get_policy().get_weights()
    assert any(not np.array_equal(before[k], after[k]) for k in before)
    # The server itself acts with the new weights: its version moved on.
    assert sims[0].post("server_info")["policy_version"] > version_before
    assert len(returns) >= 2 and last["client_rejections"] == {}


def raw_request(address: str, head: bytes, body: bytes = b"") -> tuple[int, bytes]:
    """Send bytes as they are; the status and body of the answer."""
    host, port = address.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=15)
    try:
        conn.connect()
        conn.sock.sendall(head + body)
        response = http.client.HTTPResponse(conn.sock, method="POST")
        response.begin()
        return response.status, response.read()
    finally:
        conn.close()


def request(call: str, body: bytes, token: str | None, ctype: str = "application/json",
            extra: str = "", method: str = "POST") -> bytes:
    auth = "" if token is None else f"Authorization: Bearer {token}\r\n"
    return (f"{method} /{call} HTTP/1.1\r\nHost: x\r\nContent-Type: {ctype}\r\n{auth}"
            f"Content-Length: {len(body)}\r\n{extra}\r\n").encode() + body


BAD = {  # case -> (request from a token, the status, what the one line says)
    "malformed JSON": (lambda t: request("start_episode", b'{"episode_id": ', t), 400,
                       "malformed JSON"),
    "malformed msgpack": (lambda t: request("start_episode", b"\xc1\xc1", t,
                                            "application/msgpack"), 400, "malformed msgpack"),
    "not an object": (lambda t: request("start_episode", b'"hello"', t), 400,
                      "the body must be an object"),
    "unknown call": (lambda t: request("get_actoin", b"{}", t), 404,
                     "serves no call 'get_actoin'"),
    "missing field": (lambda t: request("get_action", b'{"episode_id": "e"}', t), 400,
                      "missing a required argument: 'observation'"),
    "unknown field": (lambda t: request("start_episode", b'{"episode": "e"}', t), 400,
                      "unexpected keyword argument 'episode'"),
    "wrong type": (lambda t: request("get_action", b'{"episode_id": 7, "observation": 1}', t),
                   400, "'episode_id' must be str"),
    "wrong episode id": (lambda t: request(
        "get_action", b'{"episode_id": "never-started", "observation": [0, 0, 0, 0]}', t),
        404, "unknown episode id"),
    "too large": (lambda t: request("start_episode", b"", t).replace(
        b"Content-Length: 0", b"Content-Length: 99999999"), 413, "more than this server takes"),
    "no token": (lambda t: request("server_info", b"", None), 401, "no bearer token"),
    "bad token": (lambda t: request("server_info", b"", "x" * 43), 401, "not one this server"),
    "form body": (lambda t: request("start_episode", b"a=b", t,
                                    "application/x-www-form-urlencoded"), 415,
                  "send application/json"),
    "chunked": (lambda t: request("start_episode", b"", t, extra="Transfer-Encoding: chunked\r\n"),
                411, "Content-Length"),
    "huge headers": (lambda t: request("start_episode", b"", t,
                                       extra=f"X-Junk: {'j' * 20000}\r\n"), 431, "exceed"),
    "GET a call": (lambda t: request("get_action", b"", t, method="GET"), 405, "POST a call"),
    "garbage line": (lambda t: b"\x00\x01 nonsense\r\n\r\n", 400, "malformed request line"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_requests_get_a_4xx_of_one_line_and_the_server_serves_on(algo, case):
    token = read_http_token(algo.keys, "client")
    make, status, says = BAD[case]
    got, body = raw_request(algo.address, make(token))
    text = body.decode()
    assert got == status, text
    assert text.endswith("\n") and "\n" not in text[:-1] and says in text, text
    # The next request, on a new connection, is served.
    good = PlainSimulator(algo.address, token)
    episode_id = good.post("start_episode")["episode_id"]
    action = good.post("get_action", episode_id=episode_id, observation=[0, 0, 0, 0])["action"]
    assert action in (0, 1)


def test_an_rllib_users_policy_client_on_http_localhost(algo, monkeypatch):
    # RLlib's spelling: PolicyClient("http://localhost:9900"), imported from the seed's path.
    from rlmesh.utils.policy_client import PolicyClient

    monkeypatch.setenv("RLMESH_POLICY_SERVER_KEYS", str(algo.keys))  # finds its token there
    port = algo.address.rsplit(":", 1)[1]
    env = gym.make("CartPole-v1")
    for mode in ("remote", "local"):
        with PolicyClient(f"http://localhost:{port}", inference_mode=mode) as client:
            episode_id = client.start_episode()
            obs, _ = env.reset(seed=1)
            for _ in range(500):
                obs, reward, terminated, truncated, _ = env.step(client.get_action(episode_id, obs))
                client.log_returns(episode_id, reward)
                if terminated or truncated:
                    break
            client.end_episode(episode_id, obs)
            # Remote: the server's 404, as the error it raised; local: the client's own book.
            with pytest.raises(PolicyServerError if mode == "remote" else KeyError,
                               match="unknown episode id"):
                client.get_action("never-started", obs)
    with pytest.raises(ValueError, match="cannot read the policy server token"):
        monkeypatch.setenv("RLMESH_POLICY_SERVER_KEYS", str(algo.keys / "none"))
        PolicyClient(f"http://localhost:{port}")


def test_https_with_a_token_and_plain_http_refused_off_loopback(tmp_path):
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:prime256v1", "-nodes", "-days", "1", "-subj", "/CN=rlmesh",
                    "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key),
                    "-out", str(cert)], check=True, capture_output=True)
    with http_runner("https://127.0.0.1:0", policy_server_tls_certfile=str(cert),
                     policy_server_tls_keyfile=str(key)) as (run, runner, address):
        assert address.startswith("https://127.0.0.1:")
        token = read_http_token(default_keys_dir(), "client")  # made by the server
        context = ssl.create_default_context(cafile=str(cert))
        req = urllib.request.Request(f"{address}/server_info",
                                     headers={"Authorization": f"Bearer {token}"})
        with urllib.request.urlopen(req, context=context, timeout=10) as response:
            assert json.loads(response.read())["action_space"]["n"] == 2
        with pytest.raises(urllib.error.URLError, match="CERTIFICATE_VERIFY_FAILED"):
            urllib.request.urlopen(req, timeout=10)  # the system CAs do not vouch for it
        from rlmesh.client import PolicyClient

        with PolicyClient(address, tls_cafile=str(cert)) as client:
            episode_id = client.start_episode()
            assert client.get_action(episode_id, np.zeros(4, np.float32)) in (0, 1)
    # A token over plain http off loopback would cross the network in the clear.
    with pytest.raises(Exception, match="plain http off loopback"):
        with http_runner("http://10.255.255.1:0"):
            pass


def test_rlmesh_serve_a_checkpoint_over_http(algo, tmp_path, capsys):
    checkpoint = algo.save(tmp_path / "ckpt")
    observations = [[0.01 * i, 0.0, 0.02, 0.0] for i in range(5)]
    expected = [algo.compute_single_action(np.array(o, np.float32), explore=False)
                for o in observations]
    proc = subprocess.Popen([sys.executable, "-m", "rlmesh.cli.main", "serve", checkpoint,
                             "--address", "http://127.0.0.1:0", "--http-tokens", str(algo.keys)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        line = proc.stdout.readline()
        assert line.startswith("serving "), line + proc.stderr.read()
        sim = PlainSimulator(line.split(" on ")[1].split()[0], read_http_token(algo.keys, "sim2"))
        episode_id = sim.post("start_episode")["episode_id"]
        got = [sim.post("get_action", episode_id=episode_id, observation=o)["action"]
               for o in observations]
        proc.send_signal(signal.SIGINT)
        assert proc.wait(15) == 0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert got == expected  # the checkpoint's policy, its likeliest actions
    # Plain http off loopback: one line, exit 2 (the command's main, in this process).
    args = argparse.ArgumentParser()
    add_arguments(args)
    assert serve_main(args.parse_args([checkpoint, "--address", "http://0.0.0.0:9900"])) == 2
    err = capsys.readouterr().err
    assert "rlmesh serve: " in err and "plain http off loopback" in err, err
    assert len(err.strip().splitlines()) == 1, err
