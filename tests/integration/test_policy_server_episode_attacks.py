"""Fake episodes against a running PPO job on a policy server (issue 36, point 3): a 4-step
chunk claiming a return of 1e9 ended a run with "stopped: episode_reward_mean = 1.19e+07 >=
450". An episode's return and length are the server's sums of the steps a client sent, by
every path a client reports an episode: local inference (report_chunks), remote inference
(log_returns, end_episode)."""

from __future__ import annotations

import numpy as np
import pytest

from rlmesh.client import PolicyClient, PolicyServerError

from .test_policy_client import server_config
from .test_policy_server_attacks import GoodClient, chunk

pytestmark = pytest.mark.timeout(240)
OBS = np.zeros(4, np.float32)


def fake_episodes(client: PolicyClient) -> list[str]:
    """Every way a client might claim an episode its steps do not back; the refusals."""
    refused = []

    def attempt(fn, *args):
        try:
            fn(*args)
        except PolicyServerError as exc:
            refused.append(str(exc).split(": ", 1)[1].split(":")[0])  # the field

    # Claims of 1e5: within the bound on a return (1.0 a step x 100,000 steps), as the
    # issue's 1e9 was within the default one.
    # local inference: 4 steps of reward 1, claiming 1e5 (the attack)
    attempt(client._call, "report_chunks",
            [chunk(n=4, episode={"return": 1e5, "length": 4}, episode_id="fake-1")], 0)
    # an end whose steps never came: a claim with nothing behind it
    attempt(client._call, "report_chunks", [{"rewards": np.zeros(0, np.float32), "episode_id":
                                             "ghost", "episode": {"return": 1e5, "length": 1000}}], 0)
    # two chunks of one episode: the end claims more than both carry
    first = {**chunk(n=4, episode_id="two"), "episode": None, "terminated": False}
    attempt(client._call, "report_chunks",
            [first, chunk(n=2, episode_id="two", episode={"return": 1e5, "length": 6})], 0)
    # remote inference: one step, its reward logged a thousand times
    eid = client.start_episode()
    client.get_action(eid, OBS)
    for _ in range(1000):
        attempt(client.log_returns, eid, 1.0)
    client.end_episode(eid, OBS)
    return refused


def test_a_claimed_return_never_moves_the_mean_only_the_steps_sent_do():
    # CartPole's scale, as docs/security.md says to set it: +-1 a step, 500 steps at most
    config = server_config(num_env_runners=0, policy_server_idle_timeout_s=3.0,
                           policy_server_max_abs_reward=1.0)
    with config.build() as algo:
        address = algo.env_runners.foreach_env_runner("get_address")[0]
        good = GoodClient(address)
        try:
            with PolicyClient(address, timeout=10) as attacker:
                refused = fake_episodes(attacker)
            results = [algo.train() for _ in range(2)]
        finally:
            good.close()
    assert all(r["episode_reward_max"] <= 500 for r in results), \
        f"an episode returned {max(r['episode_reward_max'] for r in results):g}"
    assert all(r["episode_reward_mean"] <= 500 for r in results)
    # the claims were refused naming the field; the steps of the one-step episode count once
    assert refused.count("episode.return") == 2 and refused.count("reward") == 999, refused
    (counts,) = results[-1]["client_rejections"].values()
    assert counts == {"episode.return": 2, "reward": 999}
