"""Fuzzing during a learning run (issue 15): while PPO learns CartPole from the example
simulator through a policy server, a fuzzer sends 10,000+ malformed and hostile-but-valid
messages to the policy server's public socket and to the runner's own actor socket.
Training still reaches its threshold, no process is lost or restarted, and every refusal is
counted for the fuzzer, none for the honest simulator."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import threading

import msgpack
import numpy as np
import pytest
import zmq

from rlmesh.client import curve_client_options, make_curve_keys
from rlmesh.client.keys import default_keys_dir
from rlmesh.wire import codec, messages as M

from .test_bad_input import _fuzz_corpus
from .test_policy_client import EXAMPLE, server_config

pytestmark = pytest.mark.timeout(300)
THRESHOLD = 80.0  # mean return; a random policy gets ~22
SEED = int(os.environ.get("RLMESH_FUZZ_SEED", "15"))


def hostile_call(rng: random.Random, eids: list[str]) -> list[bytes]:
    """A well-formed call to the policy service with content meant to hurt."""
    eid = rng.choice(eids) if eids and rng.random() < 0.8 else rng.choice(["nope", "", 7, None])
    obs = rng.choice([np.full(4, np.nan), np.full(4, np.inf), np.full(4, 1e39), np.zeros(3),
                      np.zeros((4, 4)), "left", [1, 2, 3, 4], np.zeros(4, np.float32)])
    n = rng.choice([1, 4, 7])
    chunk = {"obs": np.zeros((n, 4), np.float32), "next_obs": np.zeros(4, np.float32),
             "actions": np.zeros(n, np.int64), "action_logp": np.full(n, -0.7, np.float32),
             "action_dist_inputs": np.zeros((n, 2), np.float32),
             "rewards": np.ones(n, np.float32), "terminated": True, "truncated": False,
             "episode": {"return": 1e300, "length": n},
             "episode_id": rng.choice(["fz", 7, None, "e" * 300])}
    poison = rng.choice(["actions", "rewards", "action_logp", "obs", "episode", "drop"])
    chunk[poison] = {"actions": np.full(n, 7), "rewards": np.full(n, 1e300),
                     "action_logp": np.full(n, -1e30), "obs": np.full((n, 4), 1e39),
                     "episode": {"return": float("nan"), "length": -1},
                     "drop": None}[poison]
    if poison == "drop":
        del chunk["drop"], chunk["rewards"]
    method, args = rng.choice([
        ("start_episode", [rng.choice([None, f"fz{rng.randrange(10**6)}", 5, "x" * 1000])]),
        ("get_action", [eid, obs]), ("log_action", [eid, obs, rng.choice([0, 7, -1, 0.5])]),
        ("log_returns", [eid, rng.choice([1e300, 1e39, float("nan"), "x", 1.0])]),
        ("end_episode", [eid, obs]), ("report_chunks", [[chunk], 0]),
        ("report_chunks", [rng.choice([chunk, [chunk] * 3, "x", [1, 2]]), "v"]),
        ("get_weights", [rng.choice([-1, 10**9, "x"])]), ("server_info", []),
        ("no_such_method", [1]), ("sample", []), ("_refused", ["x", None]),
    ])
    return [bytes(f) for f in codec.encode(M.make(M.CALL, id=rng.randrange(1, 10**9), m=method,
                                                  a=args, k={}))]


def malformed(rng: random.Random) -> list[bytes]:
    roll = rng.random()
    if roll < 0.4:
        return [rng.randbytes(rng.choice([0, 1, 5, 64, 700]))]
    if roll < 0.7:
        frames = hostile_call(rng, [])
        f = bytearray(frames[0])
        for _ in range(rng.randint(1, 4)):
            f[rng.randrange(len(f))] = rng.randrange(256)
        return [bytes(f), *frames[1:]]
    return [msgpack.packb(rng.choice([{"v": 2, "t": "call", "id": 1}, {"v": 1, "t": "credit"},
                                      [1, 2], {"v": 1, "t": "call", "id": 1, "m": 5, "a": {}}]))]


class Fuzzer(threading.Thread):
    """Sends ``n`` messages to each socket, in batches, reading the replies as they come."""

    def __init__(self, server: str, actor: str, n: int) -> None:
        super().__init__(daemon=True)
        self.server, self.actor, self.n = server, actor, n
        self.sent = {"server": 0, "actor": 0}
        self.replies = 0
        self.failure: BaseException | None = None

    def run(self) -> None:
        try:
            self._run()
        except BaseException as exc:  # reported by the test
            self.failure = exc

    def _run(self) -> None:
        rng = random.Random(SEED)
        ctx = zmq.Context.instance()
        server = ctx.socket(zmq.DEALER)
        keys = curve_client_options(default_keys_dir(), "fuzzer")
        server.curve_serverkey = keys["curve_server_key"]
        server.curve_publickey, server.curve_secretkey = keys["curve_keypair"]
        actor = ctx.socket(zmq.DEALER)
        corpus = _fuzz_corpus(SEED, 500)
        eids: list[str] = []
        try:
            for sock, address in ((server, self.server), (actor, self.actor)):
                sock.linger = 0
                sock.connect(address)
            while min(self.sent.values()) < self.n:
                for _ in range(100):
                    frames = (hostile_call(rng, eids) if rng.random() < 0.6 else malformed(rng))
                    server.send_multipart(frames)
                    actor.send_multipart(rng.choice(corpus) if rng.random() < 0.7 else malformed(rng))
                self.sent["server"] += 100
                self.sent["actor"] += 100
                for sock in (server, actor):
                    while sock.poll(100 if sock is server else 0):
                        reply = codec.decode(sock.recv_multipart())
                        self.replies += 1
                        if sock is server and isinstance(reply.get("r"), str) and len(eids) < 50:
                            eids.append(reply["r"])  # an episode the fuzzer may now abuse
        finally:
            server.close()
            actor.close()


def test_training_survives_10000_hostile_messages_to_the_policy_server_and_an_actor():
    make_curve_keys(default_keys_dir(), clients=("client", "fuzzer"))
    # The fuzzer's verified junk episodes hold its share of the reported ones while it is
    # active (policy_quotas.EpisodeShare): it counts as gone 5 s after its last episode.
    config = server_config(num_env_runners=1, policy_server_idle_timeout_s=5.0,
                           policy_server_episode_timeout_s=5.0)
    with config.build() as algo:
        address = algo.env_runners.foreach_env_runner("get_address")[0]
        runner = algo.mesh.runners[0]  # its socket address, for the fuzzer
        pid = algo.env_runners.foreach_env_runner("pid")[0]
        sim = subprocess.Popen([sys.executable, str(EXAMPLE), "--address", address],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        fuzzer = Fuzzer(address, runner.address, 10_000)
        try:
            results = [algo.train()]
            fuzzer.start()
            while len(results) < 60 and (fuzzer.is_alive() or
                                         results[-1]["episode_reward_mean"] < THRESHOLD):
                results.append(algo.train())
            fuzzer.join(60)
            assert sim.poll() is None, sim.stderr.read().decode()[-2000:]
            assert algo.env_runners.foreach_env_runner("pid") == [pid]
        finally:
            sim.terminate()
            sim.wait(10)
    last = results[-1]
    assert fuzzer.failure is None, fuzzer.failure
    assert min(fuzzer.sent.values()) >= 10_000 and not fuzzer.is_alive()
    assert last["episode_reward_mean"] >= THRESHOLD, [r["episode_reward_mean"] for r in results]
    assert last["num_env_runner_restarts"] == 0 and last["num_healthy_env_runners"] == 1
    refused = last["client_rejections"]
    assert sum(refused["fuzzer"].values()) > 2_000 and "client" not in refused, refused
