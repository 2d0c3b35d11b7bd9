"""The Atari vector-env sampler on ale-py's real C++ vector env: fragments laid out as
EnvSampler's (rows aligned with their envs: each frame stack continues the last), episodes
cut by the frame cap reported with their final frames, double buffering, and bad input
refused in one line."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

pytest.importorskip("ale_py.vector_env", reason="ale-py >= 0.10 (rlmesh[envs]) has the vector env")

from rlmesh.callbacks import Callbacks  # noqa: E402
from rlmesh.env.vector import VectorEnvError, make_vector_env, vector_env_factory  # noqa: E402
from rlmesh.policy.policy import Policy  # noqa: E402
from rlmesh.preprocessing import atari_settings  # noqa: E402
from rlmesh.roles.vector_sampler import VectorEnvSampler, VectorSamplerError  # noqa: E402


class UniformPolicy(Policy):
    """Uniform random actions with a log-probability column, as a learner would want."""

    def __init__(self, obs_space, action_space, config=None, seed=0):
        super().__init__(obs_space, action_space, config)
        self.rng = np.random.default_rng(seed)

    def compute_actions(self, obs_batch, state_batches=None, prev_action_batch=None,
                        prev_reward_batch=None, explore=None, timestep=None, **kwargs):
        n = len(obs_batch)
        actions = self.rng.integers(0, self.action_space.n, n)
        return actions, [], {"action_logp": np.full(n, -np.log(self.action_space.n), np.float32)}


def sampler(num_envs=4, splits=1, frames=108000, seed=0, **kwargs):
    _, settings = atari_settings({"atari": {"vector": True}}, "ALE/Pong-v5")
    make = vector_env_factory("ALE/Pong-v5", {"max_num_frames_per_episode": frames,
                                              "repeat_action_probability": 0.0}, settings)
    s = VectorEnvSampler(make, num_envs, splits=splits, seed=seed, **kwargs)
    s.policy = UniformPolicy(s.observation_space, s.action_space)
    return s


def sample(s, *args, **kwargs):
    return asyncio.run(s.sample(*args, **kwargs))


def continues(before: np.ndarray, after: np.ndarray) -> bool:
    """A frame stack ``after`` (H, W, stack) is ``before`` moved on by one frame."""
    return np.array_equal(before[..., 1:], after[..., :-1])


@pytest.mark.parametrize("splits", [1, 2])
def test_rows_stay_with_their_envs(splits):
    s = sampler(num_envs=4, splits=splits)
    try:
        f = sample(s, 12)
        assert f["obs"].shape == (12, 4, 84, 84, 4) and f["obs"].dtype == np.uint8
        assert f["actions"].shape == (12, 4) and f["action_logp"].shape == (12, 4)
        assert f["mask"].all() and f["env_steps"] == 48
        for b in range(4):
            for t in range(11):
                assert continues(f["obs"][t, b], f["obs"][t + 1, b]), (t, b)
            assert continues(f["obs"][11, b], f["next_obs"][b])
        g = sample(s, 5)  # the next fragment goes on where this one stopped
        for b in range(4):
            assert np.array_equal(f["next_obs"][b], g["obs"][0, b])
    finally:
        s.close()


def test_frame_cap_truncates_with_final_frames():
    s = sampler(num_envs=2, frames=160)  # 40 agent steps per episode
    try:
        f = sample(s, 50)
        assert f["truncateds"][39].all() and not f["truncateds"][:39].any()
        assert not f["terminateds"].any()
        assert [e["length"] for e in f["episodes"]] == [40, 40]
        assert sorted(map(tuple, f["trunc_index"])) == [(39, 0), (39, 1)]
        for k, (t, b) in enumerate(f["trunc_index"]):
            assert continues(f["obs"][t, b], f["trunc_obs"][k])
            # the new episode starts from a reset: its first stack does not continue the last
            assert not continues(f["trunc_obs"][k], f["obs"][t + 1, b])
    finally:
        s.close()


def test_complete_episodes_runs_on_to_the_ends():
    s = sampler(num_envs=2, frames=160)
    try:
        f = sample(s, 10, complete_episodes=True)
        assert len(f["obs"]) >= 40 and f["mask"][:40].all()
        assert [e["length"] for e in f["episodes"]] == [40, 40]
        assert f["env_steps"] == 80
    finally:
        s.close()


def test_seeded_runs_repeat():
    a, b = sampler(seed=3), sampler(seed=3)
    try:
        fa, fb = sample(a, 20), sample(b, 20)
        assert np.array_equal(fa["obs"], fb["obs"]) and np.array_equal(fa["actions"], fb["actions"])
    finally:
        a.close()
        b.close()


def test_rewards_clipped_for_learning_raw_in_returns():
    s = sampler(num_envs=2, clip_rewards=True)
    try:
        f = {"episodes": []}
        rewards = []
        while not f["episodes"]:  # a random Pong game: -21 in about 800 steps
            f = sample(s, 200)
            rewards.append(f["rewards"])
        assert set(np.unique(np.concatenate(rewards))) <= {-1.0, 0.0, 1.0}
        assert f["episodes"][0]["return"] <= -15
    finally:
        s.close()


def test_bad_input_is_one_line():
    _, settings = atari_settings({"atari": {"vector": True}}, "ALE/Pong-v5")
    with pytest.raises(VectorEnvError, match="obs_type='ram'"):
        make_vector_env("ALE/Pong-v5", {"obs_type": "ram"}, settings, 1)
    with pytest.raises(VectorEnvError, match="not an ALE id"):
        make_vector_env("CartPole-v1", {}, settings, 1)
    with pytest.raises(VectorEnvError, match=r"\['frame_skipp'\]"):
        make_vector_env("ALE/Pong-v5", {"frame_skipp": 2}, settings, 1)
    with pytest.raises(VectorSamplerError, match="at least 2 envs"):
        sampler(num_envs=1, splits=2)



def test_step_callbacks_run_per_env_and_step():
    """on_episode_step, the one-env path's per-step hook, on the same Episode objects."""
    class StepCounter(Callbacks):
        steps = 0

        def on_episode_start(self, *, episode, **kwargs):
            episode.user_data["steps"] = 0

        def on_episode_step(self, *, episode, **kwargs):
            episode.user_data["steps"] += 1
            StepCounter.steps += 1

    s = sampler(num_envs=2, callbacks=StepCounter())
    try:
        sample(s, 3)
        assert StepCounter.steps == 6
        assert [e.user_data["steps"] for e in s._episodes_of] == [3, 3]
    finally:
        s.close()


def test_envpool_backend_masks_its_reset_steps():
    """EnvPool resets on the step after an episode ends: that step is masked out, the
    episode's length and final frame are the ale-py backend's."""
    pytest.importorskip("envpool", reason="EnvPool (rlmesh[envpool]) has no wheel here")
    _, settings = atari_settings({"atari": {"vector": "envpool"}}, "ALE/Pong-v5")
    make = vector_env_factory("ALE/Pong-v5", {"max_num_frames_per_episode": 160}, settings)
    s = VectorEnvSampler(make, 2, seed=1)
    s.policy = UniformPolicy(s.observation_space, s.action_space)
    try:
        f = sample(s, 50)
        assert f["obs"].shape == (50, 2, 84, 84, 4) and f["obs"].dtype == np.uint8
        assert f["truncateds"][39].all() and not f["mask"][40].any() and f["mask"][41:].all()
        assert [e["length"] for e in f["episodes"]] == [40, 40]
        for b in range(2):
            for t in range(39):
                assert continues(f["obs"][t, b], f["obs"][t + 1, b]), (t, b)
            assert continues(f["obs"][39, b], f["obs"][40, b])  # the last frame, then reset
            assert not continues(f["obs"][40, b], f["obs"][41, b])
    finally:
        s.close()


def test_a_missing_ale_py_names_the_extra(monkeypatch):
    import sys

    from rlmesh.env.registry import make_env

    monkeypatch.setitem(sys.modules, "ale_py", None)  # import ale_py raises ImportError
    monkeypatch.setitem(sys.modules, "ale_py.vector_env", None)
    with pytest.raises(Exception, match=r"rlmesh\[envs\]") as info:
        make_env("ALE/Pong-v5", {"atari": {"vector": True}})
    assert "\n" not in str(info.value)
