"""The env runner's sampling logic without processes: fragment layout, resets and final
observations, complete-episode padding, env failures, callbacks, seeding, actions; and the
env registry and lookups of rlmesh.env.registry."""

from __future__ import annotations

import asyncio
import sys

import gymnasium as gym
import numpy as np
import pytest
import torch

from rlmesh.algorithms import PPOConfig
from rlmesh.callbacks import Callbacks, load_callbacks, summarize_custom_metrics
from rlmesh.env.registry import (EnvContext, EnvError, actions_for_env, env_registry, make_env,
                                 register_env, space_from_data, space_to_data, spaces_of)
from rlmesh.runtime.import_path import path_of
from rlmesh.rl.distributions import DiagGaussian
from rlmesh.rl.default_model import build_model
from rlmesh.config import AlgorithmConfig
from rlmesh.policy.numpy_mlp import NumpyMLPPolicy
from rlmesh.policy.policy import Policy
from rlmesh.policy.torch_policy import TorchPolicy
from rlmesh.rl.columns import action_dist_columns
from rlmesh.roles.specs import RunnerSpec
from rlmesh.roles.env_runner import EnvRunner, runner_config
from rlmesh.roles.env_sampler import RESEED_STRIDE, EnvSampler
from tests.integration import envs_for_tests
from tests.integration.envs_for_tests import CountEnv, EpisodeCallbacks, make_count_env


@pytest.fixture(autouse=True)
def fresh_env_counts():
    envs_for_tests._instances.clear()  # "the first env made" is per test


class FnPolicy(Policy):
    """The runner side of the contract around ``fn(obs, explore) -> (actions, logp,
    dist_inputs)``."""

    def __init__(self, fn, num_inputs=2):
        super().__init__(None, None, None)
        self.fn = fn
        self.view_requirements = action_dist_columns(num_inputs)

    def compute_actions(self, obs_batch, state_batches=None, prev_action_batch=None,
                        prev_reward_batch=None, explore=None, timestep=None, **kwargs):
        actions, logp, inputs = self.fn(obs_batch, explore)
        return actions, [], {"action_logp": logp, "action_dist_inputs": inputs}


def zero_fn(obs, explore=None):
    n = len(obs)
    return np.zeros(n, np.int64), np.full(n, -0.5, np.float32), np.zeros((n, 2), np.float32)


zero_policy = FnPolicy(zero_fn)


def torch_policy(model, obs_space, action_space, explore=True, **model_config):
    """A TorchPolicy acting with ``model``'s weights."""
    config = AlgorithmConfig().training(model=model_config).env_runners(explore=explore)
    policy = TorchPolicy(obs_space, action_space, config)
    policy.model.load_state_dict(model.state_dict())
    return policy


def sampler(num_envs=2, policy=zero_policy, limit=None, **config):
    """CountEnvs; ``limit(i)`` gives env i's max_episode_steps."""
    def create(i):
        cfg = dict(config)
        if limit is not None:
            cfg["max_episode_steps"] = limit(i)
        return make_count_env(EnvContext(cfg, 1, i))
    return EnvSampler(create, num_envs, policy if isinstance(policy, Policy) else FnPolicy(policy))


def steps(frag):
    """The step-count entry of every obs, [T, B]."""
    return frag["obs"][..., 0]


# --- truncate_episodes ---

def test_fragment_columns_shapes_and_dtypes():
    frag = sampler(3).sample(4)
    expected = {"obs": ((4, 3, 2), np.float32), "actions": ((4, 3), np.int64),
                "action_logp": ((4, 3), np.float32), "action_dist_inputs": ((4, 3, 2), np.float32),
                "rewards": ((4, 3), np.float32), "terminateds": ((4, 3), np.bool_),
                "truncateds": ((4, 3), np.bool_), "mask": ((4, 3), np.bool_),
                "next_obs": ((3, 2), np.float32), "trunc_index": ((0, 2), np.int64),
                "trunc_obs": ((0, 2), np.float32)}
    for key, (shape, dtype) in expected.items():
        assert frag[key].shape == shape and frag[key].dtype == dtype, key
    assert frag["mask"].all() and frag["env_steps"] == 12 and frag["episodes"] == []
    np.testing.assert_array_equal(frag["action_logp"], -0.5)


def test_reset_obs_follows_an_episode_end_and_truncated_final_obs_is_kept():
    s = sampler(2, limit=lambda i: 3)
    frag = s.sample(5)
    # Each row acts on the obs before the step; after step 3 the env is reset (t = 0).
    np.testing.assert_array_equal(steps(frag), [[0, 0], [1, 1], [2, 2], [0, 0], [1, 1]])
    assert frag["truncateds"][2].all() and not frag["truncateds"][[0, 1, 3, 4]].any()
    assert not frag["terminateds"].any()
    np.testing.assert_array_equal(frag["trunc_index"], [[2, 0], [2, 1]])
    np.testing.assert_array_equal(frag["trunc_obs"][:, 0], [3, 3])  # the true final obs
    # The final obs keeps the episode's start value; the reset obs has a new one.
    np.testing.assert_array_equal(frag["trunc_obs"][:, 1], frag["obs"][0, :, 1])
    np.testing.assert_array_equal(frag["next_obs"][:, 0], [2, 2])  # after the last row
    assert [e["length"] for e in frag["episodes"]] == [3, 3]
    assert [e["return"] for e in frag["episodes"]] == [3.0, 3.0]

    frag2 = s.sample(2)  # the episodes go on where they were cut
    np.testing.assert_array_equal(steps(frag2), [[2, 2], [0, 0]])
    assert frag2["trunc_index"].shape == (2, 2)
    assert [e["length"] for e in frag2["episodes"]] == [3, 3]  # counted over both fragments
    assert s.counters == {"num_env_steps_sampled": 14, "num_episodes": 4, "env_errors": 0,
                          "num_nonfinite_steps_skipped": 0}


class ReusedObsEnv(gym.Env):
    """Returns one observation array, overwritten at every step and reset, as envs that
    keep a buffer do: a fragment must hold what each step returned, not the array."""

    observation_space = gym.spaces.Box(-np.inf, np.inf, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self) -> None:
        self.buf = np.zeros(1, np.float32)

    def reset(self, *, seed=None, options=None):
        self.buf[0] = 100.0
        return self.buf, {}

    def step(self, action):
        self.buf[0] += 1
        return self.buf, 1.0, False, bool(self.buf[0] >= 103), {}  # truncated after 3 steps


def test_rows_and_final_observations_keep_the_values_of_an_array_the_env_overwrites():
    s = EnvSampler(lambda i: ReusedObsEnv(), 2, zero_policy)
    frag = s.sample(5)
    np.testing.assert_array_equal(frag["obs"][..., 0], [[100, 100], [101, 101], [102, 102],
                                                        [100, 100], [101, 101]])
    np.testing.assert_array_equal(frag["trunc_index"], [[2, 0], [2, 1]])
    np.testing.assert_array_equal(frag["trunc_obs"][:, 0], [103, 103])  # not the reset's 100
    np.testing.assert_array_equal(frag["next_obs"][:, 0], [102, 102])
    frag2 = s.sample(1)  # the episodes end on the last row: next_obs is the final obs
    np.testing.assert_array_equal(frag2["obs"][..., 0], [[102, 102]])
    assert frag2["truncateds"].all()
    np.testing.assert_array_equal(frag2["next_obs"][:, 0], [103, 103])


def test_truncation_on_the_last_row_goes_to_next_obs():
    s = sampler(1, limit=lambda i: 3)
    frag = s.sample(3)
    assert frag["truncateds"][2, 0] and frag["trunc_index"].shape == (0, 2)
    assert frag["next_obs"][0, 0] == 3  # the final obs, not the reset one
    assert s.sample(1)["obs"][0, 0, 0] == 0  # the env was reset meanwhile


def test_terminated_and_truncated_are_kept_apart():
    frag = sampler(1, terminate_at=2).sample(3)
    np.testing.assert_array_equal(frag["terminateds"][:, 0], [False, True, False])
    assert not frag["truncateds"].any() and frag["trunc_index"].shape == (0, 2)
    # Both flags on the same step: terminated, so no bootstrap obs is needed.
    frag = sampler(1, limit=lambda i: 2, terminate_at=2).sample(4)
    assert frag["terminateds"][1, 0] and frag["truncateds"][1, 0]
    assert frag["trunc_index"].shape == (0, 2)


# --- complete_episodes ---

def test_complete_episodes_pads_and_stops_stepping_finished_envs():
    s = sampler(3, limit=lambda i: 2 + 2 * i)  # episodes of 2, 4 and 6 steps
    frag = s.sample(3, complete_episodes=True)
    assert frag["obs"].shape[:2] == (6, 3)
    mask = frag["mask"]
    np.testing.assert_array_equal(mask.sum(0), [4, 4, 6])
    assert mask[:4].all() and not mask[4:, :2].any()
    for b in range(3):  # every column's last valid step ends an episode
        last = np.flatnonzero(mask[:, b])[-1]
        assert frag["truncateds"][last, b] or frag["terminateds"][last, b]
    padding = ~mask
    assert not frag["obs"][padding].any() and not frag["rewards"][padding].any()
    assert not (frag["truncateds"] | frag["terminateds"])[padding].any()
    assert [env.unwrapped.total_steps for env in s.envs] == [4, 4, 6]  # padding is not stepped
    # Truncated before the last row: trunc_obs; on the last row: next_obs.
    np.testing.assert_array_equal(frag["trunc_index"], [[1, 0], [3, 0], [3, 1]])
    np.testing.assert_array_equal(frag["trunc_obs"][:, 0], [2, 2, 4])
    assert frag["next_obs"][2, 0] == 6
    assert frag["env_steps"] == 14 and len(frag["episodes"]) == 4
    frag2 = s.sample(3, complete_episodes=True)  # every env starts a fresh episode
    np.testing.assert_array_equal(frag2["obs"][0, :, 0], [0, 0, 0])


def test_complete_episodes_with_an_episode_ending_on_the_last_row():
    frag = sampler(2, limit=lambda i: 3).sample(3, complete_episodes=True)
    assert frag["obs"].shape[0] == 3 and frag["mask"].all()


# --- env failures ---

def test_failing_step_discards_the_unfinished_episode_and_recreates_the_env(caplog):
    s = sampler(2, fail_at=4)  # every env's first instance raises on step 4
    first = s.envs[1]
    with caplog.at_level("ERROR"):
        frag = s.sample(6)
    assert "raised in step()" in caplog.text and "failing at step 4" in caplog.text
    np.testing.assert_array_equal(frag["mask"][:, 0], [False] * 4 + [True] * 2)
    np.testing.assert_array_equal(steps(frag)[4:], [[0, 0], [1, 1]])  # fresh episodes
    assert s.envs[1] is not first and first.unwrapped.total_steps == 3
    assert frag["env_steps"] == 4 and frag["episodes"] == []
    assert s.counters["env_errors"] == 2
    assert not (frag["terminateds"] | frag["truncateds"]).any()
    frag2 = s.sample(2)  # the new envs carry on
    assert frag2["mask"].all()
    np.testing.assert_array_equal(steps(frag2), [[2, 2], [3, 3]])


def test_failure_discards_only_rows_of_the_unfinished_episode():
    s = sampler(1, terminate_at=2, fail_at=2)  # the first episode fails on its step 2
    frag = s.sample(5)
    # Rows 0-1: the failed episode (discarded); rows 2-3: a full episode; row 4: the next.
    np.testing.assert_array_equal(frag["mask"][:, 0], [False, False, True, True, True])
    assert frag["terminateds"][3, 0] and len(frag["episodes"]) == 1

    envs_for_tests._instances.clear()
    s = sampler(1, terminate_at=2, fail_at=1, fail_episode=1)  # fails on the second episode
    frag = s.sample(5)
    np.testing.assert_array_equal(frag["mask"][:, 0], [True, True, False, True, True])
    assert frag["terminateds"][[1, 4], 0].all() and len(frag["episodes"]) == 2

    envs_for_tests._instances.clear()
    s = sampler(1, fail_at=3)
    s.sample(1)  # the episode begins in an earlier fragment
    frag = s.sample(3)  # fails on row 1 (its step 3): rows 0 and 1 go
    np.testing.assert_array_equal(frag["mask"][:, 0], [False, False, True])


def test_failing_env_in_complete_episodes_mode_ends_its_column():
    s = sampler(2, limit=lambda i: 5, fail_at=4)
    frag = s.sample(3, complete_episodes=True)
    mask = frag["mask"]
    assert not mask[:, 0].any() and not mask[:, 1].any()  # both failed mid-episode
    assert frag["obs"].shape[0] == 4  # nothing stepped after the failures
    assert s.counters["env_errors"] == 2


def test_failing_reset_recreates_the_env(caplog):
    s = sampler(2, fail_reset=True)
    with caplog.at_level("ERROR"):
        frag = s.sample(2)
    assert frag["mask"].all() and s.counters["env_errors"] == 2
    assert "raised in reset()" in caplog.text


def test_env_that_never_resets_raises():
    class Broken(CountEnv):
        def reset(self, *, seed=None, options=None):
            raise OSError("simulator down")

    s = EnvSampler(lambda i: Broken(), 1, zero_policy)
    with pytest.raises(RuntimeError, match="failed to reset 3 times"):
        s.sample(1)


# --- callbacks and seeds ---

def test_callbacks_see_each_episode_and_report_custom_metrics():
    s = EnvSampler(lambda i: make_count_env(EnvContext({"max_episode_steps": 2 + i}, 1, i)),
                   2, zero_policy, callbacks=load_callbacks(EpisodeCallbacks))
    frag = s.sample(6)
    got = sorted((e["length"], e["custom_metrics"]["steps_seen"], e["custom_metrics"]["env_index"])
                 for e in frag["episodes"])
    assert got == [(2, 2, 0)] * 3 + [(3, 3, 1)] * 2
    summary = summarize_custom_metrics([e["custom_metrics"] for e in frag["episodes"]])
    assert summary["steps_seen_min"] == 2 and summary["steps_seen_max"] == 3
    assert summary["steps_seen_mean"] == pytest.approx(12 / 5)


def test_summarize_custom_metrics_over_episodes_that_lack_a_name():
    out = summarize_custom_metrics([{"a": 1, "b": 4}, {"a": 3}, {"b": float("nan")}])
    assert out == {"a_mean": 2.0, "a_min": 1.0, "a_max": 3.0, "b_mean": 4.0, "b_min": 4.0, "b_max": 4.0}
    assert summarize_custom_metrics([]) == {}


def test_load_callbacks_refuses_what_is_not_a_callbacks_class():
    assert isinstance(load_callbacks("tests.integration.envs_for_tests:EpisodeCallbacks"), Callbacks)
    assert load_callbacks(None) is None
    with pytest.raises(TypeError, match="not a subclass"):
        load_callbacks("tests.integration.envs_for_tests:CountEnv")


def test_seeds_make_first_resets_reproducible_and_recreated_envs_reseeded():
    def first_obs(seeds, **config):
        envs_for_tests._instances.clear()
        s = EnvSampler(lambda i: CountEnv(EnvContext(config, 1, i)), 2, zero_policy, seeds=seeds)
        return s, s.sample(1)["obs"][0, :, 1]

    _, a = first_obs([5, 6])
    _, b = first_obs([5, 6])
    _, c = first_obs([7, 8])
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c) and a[0] != a[1]
    s, _ = first_obs([5, 6], fail_at=2)
    frag = s.sample(1)  # env 0 fails and is recreated, reset with a seed of its own
    expected = CountEnv().reset(seed=5 + RESEED_STRIDE)[0][1]
    assert frag["next_obs"][0, 1] == expected


# --- the torch policy and Box actions ---

class RecordingBoxEnv(gym.Env):
    observation_space = gym.spaces.Box(-1, 1, (3,), np.float32)
    action_space = gym.spaces.Box(-2.0, 2.0, (1,), np.float32)

    def __init__(self):
        self.received = []

    def reset(self, *, seed=None, options=None):
        return np.zeros(3, np.float32), {}

    def step(self, action):
        self.received.append(np.array(action))
        return np.zeros(3, np.float32), 0.0, False, False, {}


@pytest.mark.parametrize("normalize", [False, True])
def test_box_actions_stepped_clipped_or_rescaled_while_stored_unclipped(normalize):
    torch.manual_seed(0)
    space = RecordingBoxEnv.action_space
    model = build_model(RecordingBoxEnv.observation_space, space, {"fcnet_hiddens": [8]})
    with torch.no_grad():
        model.pi_head.bias[1] = 1.5  # log_std 1.5: samples far outside [-2, 2]
    s = EnvSampler(lambda i: RecordingBoxEnv(), 2,
                   torch_policy(model, RecordingBoxEnv.observation_space, space, fcnet_hiddens=[8]),
                   normalize_actions=normalize)
    frag = s.sample(50)
    stored = frag["actions"]
    assert stored.shape == (50, 2, 1) and stored.dtype == np.float32
    assert np.abs(stored).max() > 2.0  # unclipped
    received = np.stack([np.stack(env.received) for env in s.envs], axis=1)
    np.testing.assert_allclose(received, actions_for_env(stored, space, normalize), rtol=1e-6)
    assert np.abs(received).max() <= 2.0
    dist = DiagGaussian(torch.as_tensor(frag["action_dist_inputs"]))
    np.testing.assert_allclose(dist.logp(torch.as_tensor(stored)).numpy(), frag["action_logp"],
                               rtol=1e-5, atol=1e-5)


def make_recording_box_env(env_config):
    return RecordingBoxEnv()


@pytest.mark.parametrize("squash", [False, True])
def test_runner_steps_squashed_actions_as_drawn_and_others_clipped_or_rescaled(squash):
    register_env("unit-recording-box", make_recording_box_env)
    config = PPOConfig().environment("unit-recording-box").env_runners(num_envs_per_env_runner=2)
    config = config.training(model={"fcnet_hiddens": [8], "squash_actions": squash}).debugging(seed=1)
    runner = EnvRunner(RunnerSpec(config.to_dict(), env_registry=env_registry(), param_server=None).to_data())
    assert isinstance(runner.policy, NumpyMLPPolicy)
    weights = runner.get_weights()
    weights["pi_head.bias"] = np.array([0.5, 1.5], np.float32)  # wide: many draws beyond [-2, 2]
    runner.set_weights(1, weights)
    frag = asyncio.run(runner.sample())
    stored = frag["actions"]
    received = np.stack([np.stack(env.received) for env in runner.envs], axis=1)
    if squash:  # in the bounds as drawn: stepped as stored
        assert np.abs(stored).max() <= 2.0
        np.testing.assert_array_equal(received, stored)
    else:  # normalize_actions (the default): clipped to [-1, 1], rescaled to the bounds
        assert np.abs(stored).max() > 2.0
        np.testing.assert_allclose(received, actions_for_env(stored, RecordingBoxEnv.action_space, True))


def test_actions_for_env():
    box = gym.spaces.Box(np.array([0.0, -4.0], np.float32), np.array([10.0, 4.0], np.float32))
    a = np.array([[-3.0, 0.5], [1.0, 9.0]], np.float32)
    np.testing.assert_allclose(actions_for_env(a, box, False), [[0.0, 0.5], [1.0, 4.0]])
    np.testing.assert_allclose(actions_for_env(a, box, True), [[0.0, 2.0], [10.0, 4.0]])
    unbounded = gym.spaces.Box(-np.inf, np.inf, (1,), np.float32)
    np.testing.assert_array_equal(actions_for_env(np.array([7.0]), unbounded, True), [7.0])
    discrete = np.array([1, 0])
    assert actions_for_env(discrete, gym.spaces.Discrete(2)) is discrete
    # clip_actions=False (and no rescaling): the env gets the action as sampled.
    np.testing.assert_array_equal(actions_for_env(a, box, False, clip=False), a)


def test_a_sampler_with_clip_actions_off_steps_the_raw_sample():
    torch.manual_seed(0)
    space = RecordingBoxEnv.action_space
    model = build_model(RecordingBoxEnv.observation_space, space, {"fcnet_hiddens": [8]})
    with torch.no_grad():
        model.pi_head.bias[1] = 1.5  # wide: samples beyond [-2, 2]
    s = EnvSampler(lambda i: RecordingBoxEnv(), 1,
                   torch_policy(model, RecordingBoxEnv.observation_space, space, fcnet_hiddens=[8]),
                   normalize_actions=False, clip_actions=False)
    frag = s.sample(30)
    received = np.stack(s.envs[0].received)
    np.testing.assert_allclose(received, frag["actions"][:, 0], rtol=1e-6)
    assert np.abs(received).max() > 2.0


def test_explore_false_takes_the_likeliest_action():
    torch.manual_seed(0)
    model = build_model(CountEnv.observation_space, CountEnv.action_space, {"fcnet_hiddens": [8]})
    with torch.no_grad():
        model.pi_head.bias[:] = torch.tensor([0.0, 2.0])
    policy = torch_policy(model, CountEnv.observation_space, CountEnv.action_space, fcnet_hiddens=[8])
    s = EnvSampler(lambda i: CountEnv(), 4, policy)
    assert (s.sample(20, explore=False)["actions"] == 1).all()
    assert (s.sample(20)["actions"] == 0).any()  # p(0) ~ 12% per draw


def test_runner_config_keeps_the_shared_settings_of_an_algorithm_config():
    d = PPOConfig().environment("CartPole-v1").env_runners(num_envs_per_env_runner=3).to_dict()
    cfg, specs, registry = runner_config({**d, "lambda": 0.9})
    assert specs is None and registry == {}
    assert cfg.num_envs_per_env_runner == 3 and cfg.env == "CartPole-v1"
    assert cfg.get_rollout_fragment_length(1) == 2048 // (2 * 3) + 1


# --- rlmesh.env.registry ---

def module_level_creator(env_config):
    return CountEnv(env_config)


def test_register_env_names_module_level_creators_by_path_and_lambdas_by_token():
    register_env("unit-count-env", module_level_creator)
    assert env_registry()["unit-count-env"] == f"{__name__}:module_level_creator"

    def nested(env_config):
        return CountEnv(env_config)

    for local in (lambda cfg: CountEnv(cfg), nested):
        register_env("local", local)  # handed to this machine's runners (runtime/handed.py)
        token = env_registry()["local"]
        assert token.startswith("<local ") and __file__ in token
        env = make_env("local", {"max_episode_steps": 2})
        assert isinstance(env.unwrapped, CountEnv)


def test_make_env_by_name_path_and_gymnasium_id():
    registry = {"counter": "tests.integration.envs_for_tests:make_count_env"}
    env = make_env("counter", EnvContext({"max_episode_steps": 2}, 3, 1), registry)
    assert isinstance(env, gym.wrappers.TimeLimit) and isinstance(env.unwrapped, CountEnv)
    assert isinstance(make_env("tests.integration.envs_for_tests:CountEnv", {}), CountEnv)
    env = make_env("CartPole-v1", {"max_episode_steps": 7})
    assert env.spec.max_episode_steps == 7
    obs_space, act_space = spaces_of("CartPole-v1")
    assert obs_space.shape == (4,) and act_space.n == 2


def test_make_env_errors_say_what_was_tried():
    with pytest.raises(ValueError, match=r"not found.*Did you mean 'CartPole-v1'"):
        make_env("CartPole-v9")
    with pytest.raises(ValueError, match="registered: \\['mine'\\]"):
        make_env("NoSuchEnvAtAll", {}, {"mine": "x:y"})
    with pytest.raises(EnvError, match="needs the module 'no_such_module', which is not installed"):
        make_env("no_such_module:make")
    with pytest.raises(ValueError, match="has no callable 'nope'"):
        make_env("tests.integration.envs_for_tests:nope")
    with pytest.raises(TypeError, match="not a gymnasium.Env"):
        make_env("builtins:dict", {})
    with pytest.raises(ValueError, match="no env configured"):
        make_env(None)


def test_lunarlander_without_box2d_names_the_extra(monkeypatch):
    # Box2D absent, as in an install without rlmesh[envs]: gymnasium's lunar_lander module
    # imports it when LunarLander is first made, so drop any copy already imported.
    monkeypatch.setitem(sys.modules, "Box2D", None)
    for name in [m for m in sys.modules if m.startswith("gymnasium.envs.box2d")]:
        monkeypatch.delitem(sys.modules, name)
    with pytest.raises(ValueError) as info:
        make_env("LunarLander-v3")
    message = str(info.value)
    assert "\n" not in message and "'LunarLander-v3'" in message
    assert message.endswith("pip install 'rlmesh[envs]'") and "not found" not in message


def test_script_function_is_named_by_its_file(tmp_path, monkeypatch):
    monkeypatch.delitem(sys.modules, "__mp_main__", raising=False)
    script = tmp_path / "train_script.py"
    script.write_text("from tests.integration.envs_for_tests import CountEnv\n"
                      "def make(cfg):\n    return CountEnv(cfg)\n"
                      "if __name__ == '__main__':\n    raise SystemExit('must not run')\n")
    env = make_env(f"{script}:make", {})
    assert type(env).__name__ == "CountEnv"
    sys.modules.pop("__mp_main__")
    assert path_of(make_count_env) == "tests.integration.envs_for_tests:make_count_env"


@pytest.mark.parametrize("space", [
    gym.spaces.Discrete(5, start=2), gym.spaces.Box(-1.0, 2.0, (3, 2), np.float32),
    gym.spaces.MultiDiscrete([3, 4]), gym.spaces.MultiBinary(3),
    gym.spaces.Dict({"a": gym.spaces.Discrete(2), "b": gym.spaces.Tuple([gym.spaces.Discrete(3)])}),
])
def test_spaces_as_plain_data(space):
    assert space_from_data(space_to_data(space)) == space


def test_torch_policy_scores_actions_as_it_draws_them():
    """A policy server asks any runner policy for dist_inputs and logp (log_action)."""
    torch.manual_seed(0)
    space = RecordingBoxEnv.action_space
    policy = torch_policy(build_model(RecordingBoxEnv.observation_space, space,
                                      {"fcnet_hiddens": [8]}),
                          RecordingBoxEnv.observation_space, space, fcnet_hiddens=[8])
    obs = np.random.default_rng(0).uniform(-1, 1, (6, 3)).astype(np.float32)
    actions, _, extras = policy.compute_actions(obs)
    scored = policy.score_actions(obs, actions)
    np.testing.assert_allclose(scored["action_dist_inputs"], extras["action_dist_inputs"], rtol=1e-6)
    np.testing.assert_allclose(scored["action_logp"], extras["action_logp"], rtol=1e-5)


class CountingStatePolicy(Policy):
    """A recurrent policy whose state counts the steps of the episode, with an extra output
    and the optional per-episode columns declared."""

    view_requirements = {"t": None, "eps_id": None, "prev_rewards": None}

    def __init__(self):
        super().__init__(None, None, None)

    def get_initial_state(self):
        return [np.zeros(1, np.float32)]

    def compute_actions(self, obs_batch, state_batches=None, prev_action_batch=None,
                        prev_reward_batch=None, explore=None, timestep=None, **kwargs):
        n = len(obs_batch)
        return (np.zeros(n, np.int64), [state_batches[0] + 1],
                {"some_value": np.full(n, 7.0, np.float32), "prev_seen": prev_reward_batch})


def test_sampler_carries_recurrent_state_extra_outputs_and_episode_columns():
    s = sampler(2, CountingStatePolicy(), limit=lambda i: 3 + i)
    frag = s.sample(8)
    mask = frag["mask"]
    for b in range(2):
        t_col, s_in, s_out = frag["t"][:, b], frag["state_in_0"][:, b, 0], frag["state_out_0"][:, b, 0]
        np.testing.assert_array_equal(s_in, t_col)  # the state counts steps since the reset
        np.testing.assert_array_equal(s_out, t_col + 1)
        ends = np.flatnonzero(frag["terminateds"][:, b] | frag["truncateds"][:, b])
        assert len(ends) >= 1 and (t_col[ends[0] + 1] == 0)  # reset with the episode
        assert frag["eps_id"][ends[0] + 1, b] != frag["eps_id"][ends[0], b]
        assert frag["prev_rewards"][0, b] == 0 and frag["prev_rewards"][1, b] == frag["rewards"][0, b]
    assert (frag["some_value"][mask] == 7.0).all() and frag["some_value"].dtype == np.float32
