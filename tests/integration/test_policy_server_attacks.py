"""Attacks on a running policy server over loopback (issue 15, points 1, 2, 3 and 6): values
outside the spaces, non-finite and huge values, fake returns, floods of open episodes, and
connections without the server's keys. Each is refused with an error naming the field,
counted for its client, and training goes on."""

from __future__ import annotations

import asyncio
import stat
import threading

import numpy as np
import pytest

from rlmesh.client import PolicyClient, PolicyServerError, PolicyServerUnavailable, make_curve_keys
from rlmesh.client.keys import default_keys_dir

from .test_policy_client import play_episode, runner_process, server_config

pytestmark = pytest.mark.timeout(240)


def chunk(n=4, actions=None, rewards=1.0, logp=-0.7, obs=0.01, episode=None, episode_id="e1"):
    """A well-formed CartPole chunk of ``n`` steps, as a local-inference client ships it."""
    return {"episode_id": episode_id, "obs": np.full((n, 4), obs), "next_obs": np.zeros(4, np.float32),
            "actions": np.asarray(actions if actions is not None else [0, 1] * (n // 2), np.int64),
            "action_logp": np.full(n, logp), "action_dist_inputs": np.zeros((n, 2), np.float32),
            "rewards": np.full(n, rewards), "terminated": True, "truncated": False,
            "episode": episode if episode is not None else {"return": float(n), "length": n}}


class GoodClient:
    """A simulator playing CartPole episodes in a thread until stopped."""

    def __init__(self, address: str) -> None:
        self.client = PolicyClient(address)
        self.stop = threading.Event()
        self.episodes = 0
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        seed = 0
        while not self.stop.is_set():
            self.episodes += play_episode(self.client, seed=seed)[1]
            seed += 1

    def close(self) -> None:
        self.stop.set()
        self.thread.join(30)
        self.client.close()


def train_beside_an_attacker(attack, iterations=2):
    """Build PPO on a policy server, let a good client play and ``attack(client)`` strike;
    the results of ``iterations`` train() calls after the attack."""
    config = server_config(num_env_runners=0, policy_server_idle_timeout_s=3.0)
    with config.build() as algo:
        address = algo.env_runners.foreach_env_runner("get_address")[0]
        good = GoodClient(address)
        try:
            with PolicyClient(address, timeout=10) as attacker:
                attack(attacker)
            results = [algo.train() for _ in range(iterations)]
        finally:
            good.close()
    return results


def test_actions_outside_the_space_are_refused_and_cannot_crash_training():
    """Point 1: actions [0, 1, 7, -3] on Discrete(2) crashed the driver's loss."""
    def attack(client):
        with pytest.raises(PolicyServerError, match=r"actions: \[7, -3\] outside the action space"):
            client._call("report_chunks", [chunk(actions=[0, 1, 7, -3])], 0)

    results = train_beside_an_attacker(attack)
    assert all(r["timesteps_total"] > 0 for r in results)
    (counts,) = [c for c in results[-1]["client_rejections"].values()]
    assert counts == {"actions": 1}


def test_a_fake_return_is_refused_and_cannot_end_training_as_a_success():
    """Point 3: a reported return of 1e300 became the mean and 'stopped: >= 450'."""
    def attack(client):
        fake = {"rewards": np.zeros(0, np.float32), "episode": {"return": 1e300, "length": 1},
                "episode_id": "e1"}
        with pytest.raises(PolicyServerError, match="episode.return"):
            client._call("report_chunks", [fake], 0)
        with pytest.raises(PolicyServerError, match="rewards"):
            client._call("report_chunks", [chunk(rewards=1e300)], 0)
        eid = client.start_episode()
        client.get_action(eid, np.zeros(4, np.float32))
        with pytest.raises(PolicyServerError, match="reward"):
            client.log_returns(eid, 1e7)  # past policy_server_max_abs_reward
        client.end_episode(eid, np.zeros(4, np.float32))

    results = train_beside_an_attacker(attack)
    assert all(np.isfinite(r["episode_reward_mean"]) and r["episode_reward_mean"] <= 500
               for r in results), [r["episode_reward_mean"] for r in results]
    (counts,) = results[-1]["client_rejections"].values()
    assert counts == {"episode.return": 1, "rewards": 1, "reward": 1}


def test_non_finite_and_float32_overflowing_values_are_refused_by_field():
    """Point 2 at the policy server: NaN observations, log_returns(1e308) or (1e39, inf as
    float32), rewards 1e300 and logp -1e30 in chunks poisoned training silently."""
    with runner_process() as (run, runner, address):
        with PolicyClient(address, timeout=10) as bad:
            eid = bad.start_episode()
            for obs in ([np.nan, 0, 0, 0], [np.inf, 0, 0, 0], [1e39, 0, 0, 0]):
                with pytest.raises(PolicyServerError, match="observation: has NaN or infinite"):
                    bad.get_action(eid, np.array(obs))
            bad.get_action(eid, np.zeros(4, np.float32))
            for reward in (1e308, 1e39, float("nan")):
                with pytest.raises(PolicyServerError, match="reward: "):
                    bad.log_returns(eid, reward)
            cases = [(chunk(rewards=1e300), "rewards: "), (chunk(logp=-1e30), "action_logp: "),
                     (chunk(obs=1e39), "obs: ")]
            for bad_chunk, field in cases:
                with pytest.raises(PolicyServerError, match=field):
                    bad._call("report_chunks", [bad_chunk], 0)
            assert bad._call("report_chunks", [chunk()], 0) == 4  # a good one still goes in
        with PolicyClient(address) as good:
            assert play_episode(good)[1]
        frag = run(runner.call("sample"))
        metrics = run(runner.call("metrics"))
    assert np.all(np.isfinite(frag["rewards"])) and np.all(np.isfinite(frag["action_logp"]))
    (counts,) = metrics["client_rejections"].values()
    assert counts == {"observation": 3, "reward": 3, "rewards": 1, "action_logp": 1, "obs": 1}


def test_a_flood_of_open_episodes_locks_no_client_out_and_drags_no_mean():
    """Point 3: 10,000 open episodes locked new clients out, and their expiry dragged the
    mean return to 0."""
    def flood(address):
        with PolicyClient(address, timeout=30) as client:
            for i in range(10_000):
                eid = client.start_episode()
                if i % 1000 == 0:  # some with a step: they train as truncated, no end counted
                    client.get_action(eid, np.zeros(4, np.float32))

    with runner_process(rollout_fragment_length=100_000) as (run, runner, address):
        run(asyncio.to_thread(flood, address))  # the job's loop runs on: heartbeats
        with PolicyClient(address, timeout=10) as newcomer:
            assert play_episode(newcomer, seed=1)[1] and play_episode(newcomer, seed=2)[1]
        frag = run(runner.call("sample"))
        metrics = run(runner.call("metrics"))
    assert len(frag["episodes"]) == 2 and min(e["length"] for e in frag["episodes"]) > 5
    # policy_server_max_open_episodes_per_client (both clients hold the one default key)
    assert metrics["episodes_evicted"] >= 10_000 - 1_000 and metrics["open_episodes"] <= 1_000


def test_tcp_servers_require_curve_keys_by_default_and_plaintext_is_an_explicit_opt_in(tmp_path):
    """Point 6: a tcp server admitted anyone, and the client secret key files were 0644."""
    with runner_process() as (run, runner, address):
        with pytest.raises(PolicyServerUnavailable):
            PolicyClient(address, timeout=1.0, insecure_plaintext=True)
        with PolicyClient(address) as c:  # the keys the server made, for the same user
            assert play_episode(c)[1]
        keys = default_keys_dir()
    with runner_process(policy_server_insecure_plaintext=True) as (run, runner, address):
        with PolicyClient(address, insecure_plaintext=True) as c:
            assert play_episode(c)[1]
    made = make_curve_keys(tmp_path / "keys", clients=("a", "b"))
    for root in (keys, made):
        for path in [root, *root.rglob("*")]:
            mode = stat.S_IMODE(path.stat().st_mode)
            assert mode == (0o700 if path.is_dir() else 0o600), f"{path}: {oct(mode)}"


def test_error_replies_carry_one_line_and_the_traceback_stays_in_the_servers_log(runs_root):
    """(Issue 48, point 7.) A refused call's reply carried the server's traceback, ~1.3 KB
    of its paths and source lines, to any client holding a key."""
    import msgpack

    from rlmesh.wire import codec
    from rlmesh.wire import messages as M

    from .test_wire_limits import curve_dealer, reply

    with runner_process() as (run, runner, address):
        sock = curve_dealer(address)
        try:
            for i, (method, args) in enumerate([("log_returns", ["no-such-episode", 1.0]),
                                                ("log_returns", ["no-such-episode", "x"]),
                                                ("report_chunks", [[chunk(rewards=np.nan)], 0])]):
                sock.send_multipart(codec.encode(M.make(M.CALL, id=i + 1, m=method, a=args, k={})))
                frames = sock.recv_multipart() if sock.poll(10_000) else None
                assert frames is not None, f"{method}: no reply"
                raw = msgpack.unpackb(frames[0], raw=False, strict_map_key=False)
                got = codec.decode(frames)
                assert got["t"] == M.ERROR and got["etype"], got
                assert not got.get("tb"), f"{method}: a traceback went to the client"
                assert "\n" not in got["msg"] and len(got["msg"]) <= 500, got["msg"]
                assert sum(len(f) for f in frames) < 700, raw
        finally:
            sock.close()
    logs = "".join(p.read_text() for p in runs_root.rglob("logs/*.log"))
    assert "Traceback" in logs and "no-such-episode" in logs  # the details, for the operator
