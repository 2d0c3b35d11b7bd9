"""RLlib's ConnectorV2 API (rlmesh/connectors): each env-to-module built-in on real spaces,
pipelines (spaces threaded through, editing, state), the factories' signatures, the episode
views a learner connector gets, and a real EnvSampler on CartPole running connectors: what
the policy sees and the fragment stores, a connector whose output misses its declared space
(one line), module-to-env actions."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from rlmesh.algorithms import PPOConfig
from rlmesh.callbacks import Callbacks, Episode
from rlmesh.connectors import wiring
from rlmesh.connectors.connector_pipeline_v2 import ConnectorPipelineV2
from rlmesh.connectors.connector_v2 import ConnectorV2
from rlmesh.connectors.env_to_module import (
    EnvToModulePipeline,
    FlattenObservations,
    FrameStackingEnvToModule,
    MeanStdFilter,
    NumpyToTensor,
    PrevActionsPrevRewards,
    SingleAgentObservationPreprocessor,
)
from rlmesh.connectors.episode import RunnerEpisode, column_episodes
from rlmesh.connectors.learner import GeneralAdvantageEstimation
from rlmesh.connectors.module_to_env import NormalizeAndClipActions
from rlmesh.env.single_agent_episode import SingleAgentEpisode
from rlmesh.policy.policy import Policy
from rlmesh.rl.columns import action_dist_columns
from rlmesh.roles.env_sampler import EnvSampler

CARTPOLE_OBS = gym.spaces.Box(-np.inf, np.inf, (4,), np.float32)
TWO = gym.spaces.Discrete(2)


def run(connector, episode, batch=None):
    return connector(rl_module=None, batch={} if batch is None else batch, episodes=[episode])


# --- built-ins ---

def test_flatten_observations_one_hots_discrete_and_joins_dict_parts_in_key_order():
    space = gym.spaces.Dict({"a": gym.spaces.Box(0, 1, (2, 2), np.float32),
                             "b": gym.spaces.Discrete(3),
                             "c": gym.spaces.Tuple((gym.spaces.Discrete(2),
                                                    gym.spaces.Box(-1, 1, (1,), np.float32)))})
    c = FlattenObservations(space, TWO)
    assert c.observation_space.shape == (4 + 3 + 2 + 1,)
    assert c.observation_space.dtype == np.float32
    ep = RunnerEpisode(space, TWO)
    ep.add_env_reset({"a": np.arange(4).reshape(2, 2) / 4, "b": 2, "c": (1, np.array([-0.5]))})
    run(c, ep)
    np.testing.assert_allclose(ep.get_observations(-1),
                               [0, .25, .5, .75, 0, 0, 1, 0, 1, -0.5])
    assert ep.get_observations(-1).dtype == np.float32


def test_prev_actions_prev_rewards_builds_rllibs_dict_with_zeros_before_the_start():
    c = PrevActionsPrevRewards(CARTPOLE_OBS, TWO, n_prev_actions=2, n_prev_rewards=1)
    assert list(c.observation_space.spaces) == ["_obs", "prev_n_actions", "prev_n_rewards"]
    assert c.observation_space["prev_n_actions"].shape == (4,)  # 2 actions, one-hot of 2
    ep = RunnerEpisode(CARTPOLE_OBS, TWO)
    ep.add_env_reset(np.ones(4, np.float32))
    run(c, ep)
    first = ep.get_observations(-1)
    np.testing.assert_array_equal(first["prev_n_actions"], np.zeros(4))
    np.testing.assert_array_equal(first["prev_n_rewards"], [0.0])
    ep.add_env_step(np.full(4, 2, np.float32), 1, 0.5)
    run(c, ep)
    second = ep.get_observations(-1)
    np.testing.assert_array_equal(second["_obs"], np.full(4, 2))
    np.testing.assert_array_equal(second["prev_n_actions"], [0, 0, 0, 1])  # padding, then 1
    np.testing.assert_array_equal(second["prev_n_rewards"], [0.5])
    with pytest.raises(ValueError, match="n_prev_actions"):
        PrevActionsPrevRewards(n_prev_actions=-1)


def test_prev_actions_then_flatten_is_one_vector_of_obs_actions_rewards():
    p = EnvToModulePipeline(CARTPOLE_OBS, TWO,
                            connectors=[PrevActionsPrevRewards(), FlattenObservations()])
    assert p.observation_space.shape == (4 + 2 + 1,)
    ep = RunnerEpisode(CARTPOLE_OBS, TWO)
    ep.add_env_reset(np.zeros(4, np.float32))
    ep.add_env_step(np.arange(4, dtype=np.float32), 0, 1.0)
    run(p, ep)
    np.testing.assert_array_equal(ep.get_observations(-1), [0, 1, 2, 3, 1, 0, 1])


def test_mean_std_filter_normalises_and_its_states_merge():
    rng = np.random.default_rng(0)
    c = MeanStdFilter(gym.spaces.Box(-100, 100, (3,), np.float32), TWO, clip_by_value=5.0)
    assert c.observation_space == gym.spaces.Box(-5.0, 5.0, (3,), np.float32)
    outs = []
    for _ in range(2000):
        ep = RunnerEpisode()
        ep.add_env_reset(rng.normal([10, -3, 0], [2, 0.5, 1]))
        run(c, ep)
        outs.append(ep.get_observations(-1))
    late = np.array(outs[1000:])
    np.testing.assert_allclose(late.mean(0), 0, atol=0.1)
    np.testing.assert_allclose(late.std(0), 1, atol=0.1)
    other = MeanStdFilter(gym.spaces.Box(-100, 100, (3,), np.float32), TWO)
    for _ in range(10):
        ep = RunnerEpisode()
        ep.add_env_reset(np.full(3, 50.0))
        run(other, ep)
    merged = c.merge_states([c.get_state(), other.get_state()])
    assert merged["n"] == 2010
    fresh = MeanStdFilter(gym.spaces.Box(-100, 100, (3,), np.float32), TWO)
    fresh.set_state(merged)
    assert fresh.stats.n == 2010 and fresh.stats.mean[0] > c.stats.mean[0]
    with pytest.raises(ValueError, match="MeanStdFilter normalises Box"):
        MeanStdFilter(TWO, TWO)


def test_frame_stacking_repeats_the_first_frame_and_leaves_the_episode_alone():
    c = FrameStackingEnvToModule(gym.spaces.Box(0, 255, (2, 2), np.uint8), TWO, num_frames=3)
    assert c.observation_space.shape == (2, 2, 3)
    ep = RunnerEpisode(gym.spaces.Box(0, 255, (2, 2), np.uint8), TWO)
    ep.add_env_reset(np.full((2, 2), 1, np.uint8))
    ep.add_env_step(np.full((2, 2), 2, np.uint8), 0, 0.0)
    batch = run(c, ep)
    stacked = batch["obs"][(ep.id_,)][-1]
    assert stacked.shape == (2, 2, 3)
    assert list(stacked[0, 0]) == [1, 1, 2]
    assert ep.get_observations(-1).shape == (2, 2)  # the episode keeps single frames


def test_noops_pass_the_batch_through():
    batch = {"actions": np.array([1])}
    for cls in (NumpyToTensor, NormalizeAndClipActions, GeneralAdvantageEstimation):
        assert cls()(rl_module=None, batch=batch, episodes=[]) is batch


# --- pipelines ---

class Scale(SingleAgentObservationPreprocessor):
    def __init__(self, *args, factor=2.0, **kwargs):
        self.factor = factor
        super().__init__(*args, **kwargs)

    def recompute_output_observation_space(self, obs_space, act_space):
        return gym.spaces.Box(obs_space.low * self.factor, obs_space.high * self.factor,
                              obs_space.shape, np.float32)

    def preprocess(self, observation, episode):
        return np.asarray(observation, np.float32) * self.factor


def test_pipeline_threads_spaces_and_edits_recompute_them():
    box = gym.spaces.Box(-1, 1, (2,), np.float32)
    p = ConnectorPipelineV2(box, TWO, connectors=[Scale(factor=2.0)])
    assert p.observation_space.high.tolist() == [2, 2]
    p.append(Scale(factor=3.0))
    assert p.observation_space.high.tolist() == [6, 6]
    p.prepend(FlattenObservations())
    assert p.observation_space.high.tolist() == [6, 6]
    p.insert_before("FlattenObservations", PrevActionsPrevRewards())
    assert p.observation_space.shape == (5,)  # 2 obs, 2 one-hot actions, 1 reward
    assert p.observation_space.high.tolist()[:4] == [6, 6, 6, 6]
    p.insert_after(PrevActionsPrevRewards, NumpyToTensor())
    p.remove("Scale")  # the first one
    assert p.observation_space.high.tolist()[:4] == [3, 3, 3, 3]
    assert [type(c).__name__ for c in p] == ["PrevActionsPrevRewards", "NumpyToTensor",
                                             "FlattenObservations", "Scale"]
    with pytest.raises(ValueError, match="no connector 'Nope'"):
        p.insert_after("Nope", Scale())
    with pytest.raises(TypeError, match="not a ConnectorV2"):
        p.append(lambda **kw: kw)


def test_pipeline_state_round_trips_per_connector():
    box = gym.spaces.Box(-10, 10, (2,), np.float32)
    p = ConnectorPipelineV2(box, TWO, connectors=[Scale(), MeanStdFilter()])
    ep = RunnerEpisode()
    ep.add_env_reset(np.array([1.0, 2.0]))
    run(p, ep)
    state = p.get_state()
    assert state["01_MeanStdFilter"]["n"] == 1
    q = ConnectorPipelineV2(box, TWO, connectors=[Scale(), MeanStdFilter()])
    q.set_state(state)
    np.testing.assert_allclose(q.connectors[1].stats.mean, [2.0, 4.0])


# --- factories from the config ---

def test_factories_take_each_of_rllibs_signatures_and_refuse_others():
    env = gym.make("CartPole-v1")
    for factory in (lambda env: [FlattenObservations()],
                    lambda env, spaces, device: FlattenObservations(),
                    lambda env, spaces=None, device=None: [FlattenObservations()]):
        cfg = PPOConfig().env_runners(env_to_module_connector=factory)
        p = wiring.env_to_module(cfg, env, env.observation_space, env.action_space)
        assert p.observation_space.shape == (4,)
    cfg = PPOConfig().env_runners(env_to_module_connector=lambda a, b, c, d: [])
    with pytest.raises(TypeError, match=r"env_to_module_connector: .* takes none of RLlib"):
        wiring.env_to_module(cfg, env, env.observation_space, env.action_space)
    cfg = PPOConfig().env_runners(env_to_module_connector=lambda env: [object()])
    with pytest.raises(TypeError, match="env_to_module_connector: .* not a ConnectorV2"):
        wiring.env_to_module(cfg, env, env.observation_space, env.action_space)
    cfg = PPOConfig().training(learner_connector=lambda obs_space, act_space: [
        GeneralAdvantageEstimation()])
    p = wiring.learner(cfg, env.observation_space, env.action_space)
    assert len(p) == 1 and p.input_action_space == env.action_space
    env.close()


def test_config_keys_are_settings_with_rllibs_old_spellings():
    def f(env):
        return []
    cfg = PPOConfig().env_runners(_env_to_module_connector=f)
    assert cfg.env_to_module_connector is f
    assert cfg.to_dict()["env_to_module_connector"].endswith(":test_config_keys_are_settings"
                                                             "_with_rllibs_old_spellings.<locals>.f") \
        or cfg.to_dict()["env_to_module_connector"].startswith("<local")
    with pytest.raises(Exception, match="learner_connector"):
        PPOConfig().env_runners(learner_connector=lambda o, a: [])


# --- learner episode views ---

def test_column_episodes_split_at_ends_and_padding_and_write_through():
    T, B = 5, 2
    batch = {"rewards": np.arange(10, dtype=np.float32).reshape(T, B),
             "terminateds": np.zeros((T, B), bool), "truncateds": np.zeros((T, B), bool),
             "mask": np.ones((T, B), bool), "obs": np.zeros((T, B, 3), np.float32)}
    batch["terminateds"][1, 0] = True
    batch["truncateds"][3, 1] = True
    batch["mask"][4, 1] = False
    eps = column_episodes(batch)
    assert [(e.env_index, e.start, e.stop) for e in eps] == [(0, 0, 2), (0, 2, 5), (1, 0, 4)]
    assert eps[0].is_terminated and eps[2].is_truncated and not eps[1].is_done
    assert all(isinstance(e, SingleAgentEpisode) for e in eps)
    assert eps[1].get_rewards().tolist() == [4.0, 6.0, 8.0]  # arrays, as numpy'd episodes
    assert eps[1].get_rewards(-1) == 8.0
    assert eps[1].get_rewards(slice(-2, None)).tolist() == [6.0, 8.0]
    assert eps[1].get_rewards(slice(-4, None), fill=0.0).tolist() == [0.0, 4.0, 6.0, 8.0]
    assert eps[1].get_rewards([0, -1]).tolist() == [4.0, 8.0]
    assert [float(r) for r in eps[1].rewards] == [4.0, 6.0, 8.0]  # the view iterates
    assert eps[1].get_return() == 18.0
    eps[1].set_rewards(new_data=[-1.0, -2.0, -3.0])
    assert batch["rewards"][2:, 0].tolist() == [-1.0, -2.0, -3.0]
    assert batch["rewards"][2:, 1].tolist() == [5.0, 7.0, 9.0]
    assert eps[1].get_return() == -6.0
    eps[2].set_rewards(new_data=10.0, at_indices=-1)  # one row, written into the batch
    assert batch["rewards"][3, 1] == 10.0
    eps[2].set_observations(new_data=[np.ones(3)] * 2, at_indices=slice(0, 2))
    assert batch["obs"][:2, 1].tolist() == [[1.0] * 3] * 2 and batch["obs"][2, 1].sum() == 0
    with pytest.raises(IndexError):
        eps[0].get_rewards(2)


# --- a real sampler ---

class RecordingPolicy(Policy):
    """Acts ``action`` always and keeps every observation batch it was given."""

    def __init__(self, action=1):
        super().__init__(None, None, None)
        self.view_requirements = action_dist_columns(2)
        self.seen = []
        self.action = action

    def compute_actions(self, obs_batch, state_batches=None, prev_action_batch=None,
                        prev_reward_batch=None, explore=None, timestep=None, **kwargs):
        self.seen.append(np.array(obs_batch))
        n = len(obs_batch)
        return (np.full(n, self.action, np.int64), [],
                {"action_logp": np.zeros(n, np.float32),
                 "action_dist_inputs": np.zeros((n, 2), np.float32)})


def connected_sampler(env_to_module=None, module_to_env=None, num_envs=2, policy=None):
    cfg = PPOConfig().env_runners(env_to_module_connector=env_to_module,
                                  module_to_env_connector=module_to_env)
    s = EnvSampler(lambda i: gym.make("CartPole-v1"), num_envs, policy or RecordingPolicy(),
                   seeds=list(range(num_envs)))
    from rlmesh.roles.runner_sampler import runner_connectors

    s.use_connectors(runner_connectors(cfg, s))
    return s


def test_sampler_policy_sees_and_fragment_stores_the_connectors_output():
    s = connected_sampler(lambda env: [PrevActionsPrevRewards(), FlattenObservations()])
    assert s.observation_space.shape == (7,)
    frag = s.sample(30)
    assert frag["obs"].shape == (30, 2, 7)
    np.testing.assert_array_equal(frag["obs"], np.stack(s.policy.seen))
    # the first row: no previous action or reward; later rows within an episode: action 1,
    # reward 1 (CartPole)
    np.testing.assert_array_equal(frag["obs"][0, :, 4:], np.zeros((2, 3)))
    np.testing.assert_array_equal(frag["obs"][1, :, 4:], np.tile([0, 1, 1], (2, 1)))


class DeclaresWrong(ConnectorV2):
    def recompute_output_observation_space(self, obs_space, act_space):
        return gym.spaces.Box(-1, 1, (4,), np.float32)

    def __call__(self, *, rl_module, batch, episodes, **kwargs):
        for ep in episodes:
            ep.set_observations(new_data=np.zeros(3, np.float32), at_indices=-1)
        return batch


class StepRecorder(Callbacks):
    """Keeps, per step, the episode object, its newest observation, its history length."""

    def __init__(self):
        super().__init__()
        self.steps = []

    def on_episode_step(self, *, episode, env_index, **kwargs):
        self.steps.append((env_index, episode, episode.get_observations(-1),
                           len(episode.get_observations()), len(episode)))


def test_sampler_connectors_rewrite_the_callbacks_own_episode():
    rec = StepRecorder()
    s = connected_sampler(lambda env: [PrevActionsPrevRewards(), FlattenObservations()],
                          num_envs=1)
    s.callbacks = rec
    fragment = s.sample(60)
    _, episode, obs, _, _ = rec.steps[0]
    assert isinstance(episode, SingleAgentEpisode) and isinstance(episode, Episode)
    assert s.keep_history  # connectors keep the history even without callbacks
    # the callbacks read what the connectors wrote: the module's 7 numbers, not the env's 4
    assert obs.shape == (7,) and episode.last_observation_for().shape == (7,)
    np.testing.assert_array_equal(obs, fragment["obs"][1, 0])
    # one episode per env and reset (CartPole ends well within 60 steps): each step's
    # history is that episode's own, one observation more than its steps
    assert all(h == n + 1 for _, _, _, h, n in rec.steps)
    assert len({id(e) for _, e, _, _, _ in rec.steps}) == fragment["terminateds"][:, 0].sum() + 1
    assert s.connectors.episodes[0] is s.slots[0].episode
    # its actions are the module's, one-hot for PrevActionsPrevRewards
    last = s.slots[0].episode
    assert last.get_actions(-1, one_hot_discrete=True).tolist() in ([1.0, 0.0], [0.0, 1.0])


def test_without_callbacks_or_connectors_episodes_record_no_history():
    bare = EnvSampler(lambda i: gym.make("CartPole-v1"), 1, RecordingPolicy(), seeds=[0])
    bare.sample(5)
    assert not bare.keep_history and bare.slots[0].episode.observations is None
    with pytest.raises(RuntimeError, match="no step history"):
        bare.slots[0].episode.get_observations(-1)


def test_connector_output_not_its_declared_space_is_one_line():
    s = connected_sampler(lambda env: DeclaresWrong())
    with pytest.raises(ValueError) as e:
        s.sample(5)
    assert str(e.value).startswith("env_to_module_connector: connector DeclaresWrong declared "
                                   "Box(-1.0, 1.0, (4,), float32) but produced shape (3,)")


class AlwaysLeft(ConnectorV2):
    def __call__(self, *, rl_module, batch, episodes, **kwargs):
        assert len(episodes) == len(batch["actions"])
        batch["actions_for_env"] = np.zeros_like(batch["actions"])
        return batch


def test_module_to_env_actions_for_env_reach_the_env_and_actions_are_stored():
    # The policy pushes right; the connector makes the env push left: CartPole falls fast
    # to the left (x velocity negative), while the stored actions stay the policy's.
    s = connected_sampler(module_to_env=lambda env: [NormalizeAndClipActions(), AlwaysLeft()],
                          num_envs=1)
    frag = s.sample(40)
    assert (frag["actions"] == 1).all()
    v = frag["obs"][:, 0, 1]  # the cart's velocity
    ended = frag["terminateds"][:, 0] | frag["truncateds"][:, 0]
    within = ~ended[:-1]  # row t+1 continues row t's episode
    assert within.sum() > 20 and (v[1:][within] < v[:-1][within]).all()  # pushed left each step
    assert len(frag["episodes"]) >= 2  # a cart pushed one way falls within ~10 steps


class Records(ConnectorV2):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.calls = []

    def __call__(self, *, rl_module, batch, episodes, explore=None, **kwargs):
        self.calls.append((rl_module, explore, len(episodes[0])))
        return batch


def test_runner_connectors_get_the_policy_and_explore():
    rec = Records()
    policy = RecordingPolicy()
    s = connected_sampler(lambda env: rec, num_envs=1, policy=policy)
    s.sample(3, explore=False)
    assert {(m is policy, e) for m, e, _ in rec.calls} == {(True, False)}  # no .model: itself
    assert [n for _, _, n in rec.calls][:4] == [0, 1, 2, 3]  # the reset, then each step


def test_mean_std_filter_flushes_what_it_saw_for_a_global_copy():
    space = gym.spaces.Box(-10, 10, (1,), np.float32)
    runner, global_copy = MeanStdFilter(space, TWO), MeanStdFilter(space, TWO)
    for x in (1.0, 2.0, 3.0):
        ep = RunnerEpisode()
        ep.add_env_reset(np.array([x]))
        run(runner, ep)
    global_copy.merge_buffer(runner.flush())
    assert global_copy.stats.n == 3 and runner.flush()["n"] == 0
    ep = RunnerEpisode()
    ep.add_env_reset(np.array([5.0]))
    run(runner, ep)  # seen after the flush: kept on top of the global state it takes
    runner.set_state(global_copy.get_state())
    assert runner.stats.n == 4
    np.testing.assert_allclose(runner.stats.mean, [2.75])


def test_flat_replay_samples_are_one_step_episodes_that_write_through():
    batch = {"rewards": np.array([1.0, 2.0, 3.0], np.float32),
             "obs": np.zeros((3, 4), np.float32), "actions": np.array([0, 1, 0])}
    eps = column_episodes(batch)
    assert [len(e) for e in eps] == [1, 1, 1]
    assert eps[1].get_actions(-1) == 1 and eps[2].get_observations(-1).shape == (4,)
    eps[2].set_rewards(new_data=[-3.0])
    assert batch["rewards"].tolist() == [1.0, 2.0, -3.0]


def test_a_connector_class_is_its_own_factory_and_an_instance_is_one_line():
    from rlmesh.config.settings import ConfigError

    made = wiring._factory(MeanStdFilter, "env_to_module_connector")(gym.make("CartPole-v1"))
    assert type(made) is MeanStdFilter and made.input_observation_space is None
    PPOConfig().env_runners(env_to_module_connector=MeanStdFilter).validate()
    with pytest.raises(ConfigError) as err:
        PPOConfig().env_runners(env_to_module_connector=[MeanStdFilter(),
                                                         FlattenObservations()]).validate()
    line = str(err.value).splitlines()[-1].strip()
    assert line == ("env_to_module_connector: got MeanStdFilter, FlattenObservations made here, "
                    "which the runners' and learners' processes cannot take; give the function "
                    "that makes them (RLlib's form): env_to_module_connector=lambda env: "
                    "[MeanStdFilter(), FlattenObservations()]"), line
