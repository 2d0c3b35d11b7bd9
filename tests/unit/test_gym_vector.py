"""Any gymnasium VectorEnv through the vector sampler: which configs get one (auto, True,
sync, envpool, a creator's own), the two autoreset modes laid out as the one-env path lays
out episodes (truncation's final observations kept, next-step reset rows masked out),
continuous actions rescaled, filters and reward normalization over the batch, callbacks per
episode, and bad input refused in one line naming the env, the option or the field."""

from __future__ import annotations

import asyncio

import gymnasium as gym
import numpy as np
import pytest

from rlmesh.algorithms.ppo import PPOConfig
from rlmesh.callbacks import Callbacks
from rlmesh.env.gym_vector import AUTO_MIN_ENVS, GymVector, gym_vector_maker
from rlmesh.env.registry import make_env
from rlmesh.env.vector import VectorEnvError
from rlmesh.rl.filters import MeanStdFilter, ReturnNormalizer
from rlmesh.rl.numpy_policy import NumpyPolicy
from rlmesh.roles.vector_sampler import VectorEnvSampler


class CountingEnv(gym.Env):
    """A user's env: the observation is [steps taken, env seed]; it ends (terminated) after
    ``length`` steps; reward = the action. Deterministic, so rows can be checked exactly."""

    observation_space = gym.spaces.Box(-1e6, 1e6, (2,), np.float32)
    action_space = gym.spaces.Discrete(3)

    def __init__(self, length=4, truncate=False):
        self.length, self.truncate, self.t, self.tag = length, truncate, 0, 0.0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        if seed is not None:
            self.tag = float(seed)
        self.t = 0
        return np.array([0.0, self.tag], np.float32), {}

    def step(self, action):
        self.t += 1
        end = self.t >= self.length
        obs = np.array([self.t, self.tag], np.float32)
        return obs, float(action), end and not self.truncate, end and self.truncate, {}


class Greedy:
    """A policy that always takes action 1 (logp 0), for exact rows."""

    view_requirements: dict = {}

    def get_initial_state(self):
        return []

    def compute_actions(self, obs, state_batches=None, prev_action_batch=None,
                        prev_reward_batch=None, explore=None, **kwargs):
        return np.ones(len(obs), np.int64), [], {"action_logp": np.zeros(len(obs), np.float32)}


def config(env="CartPole-v1", n=AUTO_MIN_ENVS, **env_config):
    return PPOConfig().environment(env, env_config=env_config).env_runners(
        num_envs_per_env_runner=n)


def sampler_for(cfg, policy=None, **kwargs):
    make = gym_vector_maker(cfg, {})
    assert make is not None
    s = VectorEnvSampler(make, cfg.num_envs_per_env_runner, seed=0, **kwargs)
    s.policy = policy or NumpyPolicyAdapter(s, cfg)
    return s


class NumpyPolicyAdapter:
    """The runners' numpy policy (the default model) behind compute_actions."""

    view_requirements: dict = {}

    def __init__(self, s, cfg):
        self.net = NumpyPolicy(s.observation_space, s.action_space, cfg.model, seed=0)

    def get_initial_state(self):
        return []

    def compute_actions(self, obs, state_batches=None, prev_action_batch=None,
                        prev_reward_batch=None, explore=None, **kwargs):
        actions, logp, inputs = self.net(obs, explore)
        return actions, [], {"action_logp": logp, "action_dist_inputs": inputs}


def sample(s, *args, **kwargs):
    return asyncio.run(s.sample(*args, **kwargs))


# --- which configs step a vector env ---

def test_auto_picks_the_vector_entry_point_for_many_envs_only():
    assert gym_vector_maker(config(n=AUTO_MIN_ENVS), {}) is not None
    assert gym_vector_maker(config(n=8), {}) is None  # few envs: the one-env path
    assert gym_vector_maker(config(n=256, vector=False), {}) is None
    assert gym_vector_maker(config("Acrobot-v1", n=256), {}) is None  # no vector entry point
    assert gym_vector_maker(config(n=8, vector=True), {}) is not None  # asked: any count


def test_auto_leaves_per_env_wrappers_on_the_one_env_path():
    cfg = config(n=256)
    cfg.horizon = 100  # RLlib's old horizon: a time limit wrapped around each env
    assert gym_vector_maker(cfg, {}) is None
    cfg.env_config = {"vector": True}
    with pytest.raises(VectorEnvError, match="vector=True: horizon"):
        gym_vector_maker(cfg, {})


def test_an_env_without_vector_entry_point_asked_as_vector_is_one_line():
    with pytest.raises(VectorEnvError) as err:
        gym_vector_maker(config("Acrobot-v1", vector=True), {})
    line = str(err.value)
    assert "\n" not in line and "'Acrobot-v1'" in line
    for option in ("'envpool'", "'sync'", "'async'", "False"):
        assert option in line


def test_an_unknown_vector_setting_names_the_choices():
    with pytest.raises(VectorEnvError, match="vector='fast'.*'sync'.*'envpool'"):
        gym_vector_maker(config(vector="fast"), {})


def test_the_single_env_of_a_vector_config_is_made_without_the_vector_key():
    env = make_env("CartPole-v1", {"vector": True})  # the driver's probe, evaluation
    assert env.observation_space.shape == (4,)


def test_env_config_reaches_the_vector_env():
    s = sampler_for(config(max_episode_steps=5), Greedy())
    try:
        f = sample(s, 12)
        assert max(e["length"] for e in f["episodes"]) <= 5
    finally:
        s.close()


# --- next-step autoreset (gymnasium's numpy CartPole) ---

def test_next_step_reset_rows_are_masked_and_final_observations_kept():
    s = sampler_for(config(n=64, max_episode_steps=5), Greedy())
    try:
        f = sample(s, 13)
        mask, trunc = f["mask"], f["truncateds"]
        # Every env: 5 steps, the 6th row only resets (masked out), then 5 steps again...
        for b in range(64):
            ends = np.flatnonzero(trunc[:, b] | f["terminateds"][:, b])
            for t in ends:
                if t + 1 < 13:
                    assert not mask[t + 1, b]
                    start = f["obs"][t + 2, b] if t + 2 < 13 else f["next_obs"][b]
                    assert np.abs(start).max() <= 0.05  # a fresh episode's first state
        lengths = [e["length"] for e in f["episodes"]]
        assert f["env_steps"] == int(mask.sum())
        assert lengths and all(1 <= n <= 5 for n in lengths)
        # Truncated before the last row: the final observation is the ending row's.
        for (t, b), last in zip(f["trunc_index"], f["trunc_obs"]):
            assert trunc[t, b] and t < 12
            assert not np.array_equal(last, f["obs"][t, b])  # it moved on by a step
        assert len(f["trunc_index"]) == int(trunc[:12].sum())
    finally:
        s.close()


# --- same-step autoreset (gymnasium's SyncVectorEnv of a user's env) ---

def registered_counting(length=4, truncate=False):
    name = f"CountingEnv-{length}-{truncate}-v0"
    if name not in gym.envs.registry:
        gym.register(name, entry_point=lambda **kw: CountingEnv(length, truncate))
    return name


def test_same_step_truncation_keeps_the_final_observation_and_masks_nothing():
    s = sampler_for(config(registered_counting(4, truncate=True), n=3, vector="sync"), Greedy())
    try:
        f = sample(s, 10)
        assert f["mask"].all() and f["env_steps"] == 30
        # Rows: steps-taken counters 0,1,2,3 then a fresh episode at 0.
        assert f["obs"][:, 0, 0].tolist() == [0, 1, 2, 3, 0, 1, 2, 3, 0, 1]
        assert sorted(map(tuple, f["trunc_index"].tolist())) == sorted(
            (t, b) for t in (3, 7) for b in range(3))
        assert (f["trunc_obs"][:, 0] == 4).all()  # the 4th step's observation, not the reset's
        assert [e["length"] for e in f["episodes"]] == [4] * 6
        assert [e["return"] for e in f["episodes"]] == [4.0] * 6
        # Seeds: env b was reset with seed 0 + b (the sampler's seed and its offset).
        assert f["obs"][0, :, 1].tolist() == [0.0, 1.0, 2.0]
    finally:
        s.close()


def test_an_episode_ending_on_the_last_row_bootstraps_from_its_final_observation():
    s = sampler_for(config(registered_counting(4, truncate=True), n=2, vector="sync"), Greedy())
    try:
        f = sample(s, 4)
        assert f["truncateds"][3].all()
        assert (f["next_obs"][:, 0] == 4).all()
        assert len(f["trunc_index"]) == 0  # the last row's final obs is next_obs
        g = sample(s, 2)
        assert (g["obs"][0, :, 0] == 0).all()  # the next fragment starts the new episode
    finally:
        s.close()


def test_complete_episodes_pads_after_each_envs_episode():
    s = sampler_for(config(registered_counting(3), n=2, vector="sync"), Greedy())
    try:
        f = sample(s, 2, complete_episodes=True)
        assert f["mask"][:3].all() and f["env_steps"] == 6
        assert [e["length"] for e in f["episodes"]] == [3, 3]
    finally:
        s.close()


# --- bad vector envs ---

class WrongVector(gym.vector.VectorEnv):
    """A user's vector env that gets one field wrong."""

    def __init__(self, num_envs=4, wrong="obs"):
        self.num_envs, self.wrong = num_envs, wrong
        self.single_observation_space = gym.spaces.Box(-1, 1, (3,), np.float32)
        self.single_action_space = gym.spaces.Discrete(2)
        self.observation_space = gym.vector.utils.batch_space(self.single_observation_space, num_envs)
        self.action_space = gym.vector.utils.batch_space(self.single_action_space, num_envs)
        self.metadata = {"autoreset_mode": gym.vector.AutoresetMode.NEXT_STEP}

    def reset(self, *, seed=None, options=None):
        return np.zeros((self.num_envs, 3), np.float32), {}

    def step(self, actions):
        n = self.num_envs
        obs = np.zeros((n, 3), np.float32)
        reward = np.zeros(n, np.float32)
        term = np.zeros(n, bool)
        if self.wrong == "obs":
            obs = np.zeros((n - 1, 3), np.float32)
        elif self.wrong == "dtype":
            obs = obs.astype(np.float64)
        elif self.wrong == "rewards":
            reward = np.zeros(n + 1, np.float32)
        elif self.wrong == "terminations":
            term = np.zeros(n, np.int64)
        return obs, reward, term, np.zeros(n, bool), {}


@pytest.mark.parametrize("wrong,field", [("obs", "observations: shape"),
                                         ("dtype", "observations of dtype float64"),
                                         ("rewards", "rewards: shape"),
                                         ("terminations", "terminations of dtype int64")])
def test_a_vector_env_with_a_wrong_field_is_refused_at_the_first_step(wrong, field):
    v = GymVector(WrongVector(wrong=wrong), "my:vec")
    v.reset(seed=0)
    v.send(np.zeros(4, np.int64))
    with pytest.raises(VectorEnvError) as err:
        v.recv()
    assert field in str(err.value) and "'my:vec'" in str(err.value)
    assert "\n" not in str(err.value)


def test_an_autoreset_mode_the_sampler_cannot_run_is_one_line():
    env = gym.make_vec("CartPole-v1", num_envs=2, vectorization_mode="sync",
                       vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.DISABLED})
    with pytest.raises(VectorEnvError, match="autoreset mode 'Disabled'.*NextStep and SameStep"):
        GymVector(env, "CartPole-v1")
    env.close()


def make_user_vector(env_config):
    return WrongVector(num_envs=env_config["num_envs"], wrong="none")


def make_user_single(env_config):
    return CountingEnv()


def test_a_creator_may_return_a_vector_env_itself():
    cfg = config(f"{__name__}:make_user_vector", n=5, vector=True)
    s = sampler_for(cfg, Greedy())
    try:
        f = sample(s, 3)
        assert f["obs"].shape == (3, 5, 3) and f["env_steps"] == 15
    finally:
        s.close()
    with pytest.raises(VectorEnvError, match="made a CountingEnv, not a gymnasium VectorEnv"):
        gym_vector_maker(config(f"{__name__}:make_user_single", n=5, vector=True), {})(5)


# --- what the one-env path does, over the batch ---

def test_continuous_actions_are_rescaled_into_the_bounds():
    cfg = config("Pendulum-v1", n=8, vector="sync")
    s = sampler_for(cfg)
    sent = []
    group = s.groups[0]
    original = group.send
    group.send = lambda a: (sent.append(np.array(a)), original(a))[1]
    try:
        f = sample(s, 20)
        actions = np.concatenate(sent)
        assert actions.min() >= -2.0 and actions.max() <= 2.0
        assert f["actions"].dtype == np.float32 and f["actions"].shape == (20, 8, 1)
    finally:
        s.close()


def test_observation_filter_and_reward_normalizer_run_over_the_batch():
    cfg = config(n=64)
    s = sampler_for(cfg, Greedy(), obs_filter=MeanStdFilter((4,)),
                    reward_normalizer=ReturnNormalizer(64, 0.99))
    try:
        f = sample(s, 30)
        live = f["obs"][5:][f["mask"][5:]]
        assert abs(live.mean()) < 1.0  # standardized, where raw CartPole states are not
        assert s.obs_filter.rs.n > 64 * 20
        assert np.all(f["rewards"][f["mask"]] != 1.0)  # normalized, the raw reward is 1
        assert all(e["return"] == e["length"] for e in f["episodes"])  # episodes keep raw
    finally:
        s.close()


def test_batch_return_normalizer_keeps_the_statistics_of_one_at_a_time():
    rng = np.random.default_rng(0)
    one, batch = ReturnNormalizer(6, 0.9), ReturnNormalizer(6, 0.9)
    for _ in range(50):
        rewards = rng.normal(size=6).astype(np.float32)
        ended = rng.random(6) < 0.2
        for b in range(6):
            one(b, float(rewards[b]), bool(ended[b]))
        batch.batch(slice(0, 6), rewards, ended)
    assert one.n == batch.n
    assert one.mean == pytest.approx(batch.mean, rel=1e-6)
    assert one.m2 == pytest.approx(batch.m2, rel=1e-6)


class EpisodeCounter(Callbacks):
    def __init__(self):
        self.started, self.ended = 0, []

    def on_episode_start(self, *, episode, env_runner=None, env_index=None, **kwargs):
        self.started += 1

    def on_episode_end(self, *, episode, env_runner=None, env_index=None, **kwargs):
        self.ended.append((env_index, episode.length))


def test_callbacks_see_each_episode():
    callbacks = EpisodeCounter()
    s = sampler_for(config(registered_counting(4), n=3, vector="sync"), Greedy(),
                    callbacks=callbacks)
    try:
        f = sample(s, 9)
        assert sorted(callbacks.ended) == sorted((b, 4) for b in range(3) for _ in range(2))
        assert callbacks.started == 3 + 6
        assert len(f["episodes"]) == 6
    finally:
        s.close()


def test_a_nonfinite_observation_names_the_env():
    class NaNAt(CountingEnv):
        def step(self, action):
            obs, *rest = super().step(action)
            if self.tag == 1.0:
                obs[0] = np.nan
            return (obs, *rest)

    name = "NaNCounting-v0"
    if name not in gym.envs.registry:
        gym.register(name, entry_point=lambda **kw: NaNAt(10))
    s = sampler_for(config(name, n=2, vector="sync"), Greedy())
    try:
        with pytest.raises(Exception, match="env 1 of this runner's vector env.*observation"):
            sample(s, 3)
    finally:
        s.close()


# --- EnvPool ---

def test_envpool_steps_pendulum_with_gymnasiums_spaces():
    pytest.importorskip("envpool")
    cfg = config("Pendulum-v1", n=16, vector="envpool")
    s = sampler_for(cfg)
    try:
        assert s.observation_space.shape == (3,) and s.action_space.shape == (1,)
        f = sample(s, 210)  # Pendulum's episodes are 200 steps
        assert f["truncateds"].sum() == 16 and not f["terminateds"].any()
        assert (~f["mask"]).sum() == 16  # one reset row per env (next-step)
        assert [e["length"] for e in f["episodes"]] == [200] * 16
        assert all(-2000 < e["return"] < 0 for e in f["episodes"])
    finally:
        s.close()


def test_envpool_without_the_id_is_one_line():
    pytest.importorskip("envpool")
    with pytest.raises(VectorEnvError, match="EnvPool has no env 'NoSuchEnv-v0'"):
        gym_vector_maker(config("NoSuchEnv-v0", vector="envpool"), {})


def test_a_fragment_lists_its_last_episodes_and_counts_the_rest():
    s = sampler_for(config(registered_counting(2), n=4, vector="sync"), Greedy())
    s.episodes_listed = 3
    try:
        f = sample(s, 10)  # 5 episodes of each of 4 envs
        assert len(f["episodes"]) == 3 and f["num_episodes_unlisted"] == 17
        assert s.counters["num_episodes"] == 20
        s.episodes_listed = None
        g = sample(s, 10)
        assert len(g["episodes"]) == 20 and "num_episodes_unlisted" not in g
    finally:
        s.close()


def test_rllibs_gym_env_vectorize_mode_picks_the_vector_env():
    # RLlib's default, sync: the runner's own loop (few envs), or the vector entry point.
    assert gym_vector_maker(config(n=8).env_runners(gym_env_vectorize_mode="SYNC"), {}) is None
    assert gym_vector_maker(config(n=256).env_runners(gym_env_vectorize_mode="sync"), {})
    cfg = config(registered_counting(3), n=2).env_runners(gym_env_vectorize_mode="async")
    s = sampler_for(cfg, Greedy())
    try:
        assert s.groups[0].same_step  # gymnasium's AsyncVectorEnv, same-step resets
        f = sample(s, 4)
        assert [e["length"] for e in f["episodes"]] == [3, 3]
    finally:
        s.close()
    cfg = config("Acrobot-v1", n=2).env_runners(gym_env_vectorize_mode="vector_entry_point")
    with pytest.raises(VectorEnvError, match="'Acrobot-v1' has no vector entry point"):
        gym_vector_maker(cfg, {})
    with pytest.raises(VectorEnvError, match="gym_env_vectorize_mode='fast'"):
        gym_vector_maker(config().env_runners(gym_env_vectorize_mode="fast"), {})


class StepRecorder(Callbacks):
    """A user's callbacks keeping per-episode data from start to end, as on the one-env path."""

    def on_episode_start(self, *, episode, env_runner=None, env_index=None, **kwargs):
        episode.user_data["seen"] = [float(episode.last_observation[0])]

    def on_episode_step(self, *, episode, env_runner=None, env_index=None, **kwargs):
        episode.user_data["seen"].append(float(episode.last_observation[0]))

    def on_episode_end(self, *, episode, env_runner=None, env_index=None, **kwargs):
        episode.custom_metrics["steps_seen"] = len(episode.user_data["seen"])
        episode.custom_metrics["last_seen"] = episode.user_data["seen"][-1]
        episode.custom_metrics["last_action"] = float(episode.last_action)


@pytest.mark.parametrize("vector", ["sync", True])
def test_step_callbacks_see_each_episode_from_start_to_end(vector):
    if vector is True:  # next-step: CartPole's numpy env, its reset rows not steps
        cfg, length = config(n=4, vector=True, max_episode_steps=3), 3
    else:  # same-step: a user's env in gymnasium's SyncVectorEnv
        cfg, length = config(registered_counting(3), n=4, vector="sync"), 3
    s = sampler_for(cfg, Greedy(), callbacks=StepRecorder())
    try:
        f = sample(s, 12)
        ended = [e for e in f["episodes"]]
        assert ended and all(e["length"] == length for e in ended)
        for e in ended:
            assert e["custom_metrics"]["steps_seen"] == length + 1  # first obs + each step
            assert e["custom_metrics"]["last_action"] == 1.0
            if vector == "sync":
                assert e["custom_metrics"]["last_seen"] == 3.0  # the final obs, not a reset's
    finally:
        s.close()


class CountingStatePolicy:
    """A recurrent policy whose state counts its steps in the episode, and which reads its
    previous action and reward and the episode's step index (as DQN's and LSTMs' do)."""

    view_requirements = {"t": None, "prev_actions": None, "prev_rewards": None, "eps_id": None}

    def get_initial_state(self):
        return [np.zeros(1, np.float32)]

    def compute_actions(self, obs, state_batches=None, prev_action_batch=None,
                        prev_reward_batch=None, explore=None, **kwargs):
        n = len(obs)
        actions = np.full(n, 1, np.int64)
        return actions, [state_batches[0] + 1], {"action_logp": np.zeros(n, np.float32)}


@pytest.mark.parametrize("vector", ["sync", True])
def test_per_env_inputs_start_over_with_each_episode(vector):
    from rlmesh.rl.columns import ColumnSpec

    policy = CountingStatePolicy()
    policy.view_requirements = {k: ColumnSpec((), np.dtype(np.int64)) for k in ("t", "eps_id")}
    policy.view_requirements["prev_actions"] = None
    policy.view_requirements["prev_rewards"] = None
    if vector is True:
        cfg = config(n=3, vector=True, max_episode_steps=4)
    else:
        cfg = config(registered_counting(4), n=3, vector="sync")
    s = sampler_for(cfg, policy)
    try:
        f = sample(s, 14)
        for b in range(3):
            live = f["mask"][:, b]
            t_col, state = f["t"][:, b], f["state_in_0"][:, b, 0]
            assert (state[live] == t_col[live]).all()  # the state counts the episode's steps
            starts = np.flatnonzero(live & (t_col == 0))
            assert len(starts) >= 2
            for t in starts:
                assert f["prev_actions"][t, b] == 0 and f["prev_rewards"][t, b] == 0
                if t + 1 < 14 and live[t + 1]:
                    assert f["prev_actions"][t + 1, b] == 1  # what it did the step before
            ids = f["eps_id"][:, b][live]
            assert len(set(ids.tolist())) == len(starts) + (t_col[live][0] != 0)
    finally:
        s.close()


def test_next_step_reset_rows_are_counted_apart_from_env_steps():
    s = sampler_for(config(n=8, vector=True, max_episode_steps=5), Greedy())
    try:
        f = sample(s, 12)  # each env: 5 steps, a reset row, 5 steps, a reset row
        assert f["num_reset_rows"] == 16 and f["env_steps"] == 8 * 12 - 16
        assert f["num_reset_rows"] + f["env_steps"] == f["mask"].size
    finally:
        s.close()
