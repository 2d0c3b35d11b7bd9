"""RLlib new-stack connector code on real short PPO runs on CartPole (rlmesh.connectors):
the env-to-module pipeline sets the policy's observation space and what fragments store,
MeanStdFilter normalises what the module sees, a learner connector that negates rewards
makes PPO learn to fall, a module-to-env connector changes what the env steps, and the
factories, lambdas included, reach a runner process on this machine."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest

from rlmesh.algorithms import PPOConfig
from rlmesh.callbacks import Callbacks
from rlmesh.connectors.connector_v2 import ConnectorV2
from rlmesh.connectors.env_to_module import (
    FlattenObservations,
    MeanStdFilter,
    PrevActionsPrevRewards,
)
from rlmesh.env.single_agent_episode import SingleAgentEpisode


class RecordBatch(ConnectorV2):
    """A learner connector that keeps a copy of each train batch's columns."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.batches = []

    def __call__(self, *, rl_module, batch, episodes, **kwargs):
        self.batches.append({k: np.array(v) for k, v in batch["default_policy"].items()
                             if k in ("obs", "rewards", "mask")})
        return batch


class NegateRewards(ConnectorV2):
    def __call__(self, *, rl_module, batch, episodes, **kwargs):
        for ep in self.single_agent_episode_iterator(episodes):
            ep.set_rewards(new_data=[-r for r in ep.get_rewards()])
        return batch


@contextlib.contextmanager
def built(config):
    algo = config.build()
    try:
        yield algo
    finally:
        algo.stop()


def ppo(**env_runners):
    return (PPOConfig().environment("CartPole-v1").debugging(seed=1)
            .env_runners(num_env_runners=0, **env_runners)
            .training(train_batch_size=1000, minibatch_size=250, num_epochs=4, lr=3e-3))


def test_prev_actions_and_flatten_widen_the_policys_observations_and_the_stored_ones():
    recorder = RecordBatch()
    config = ppo(env_to_module_connector=lambda env: [PrevActionsPrevRewards(),
                                                      FlattenObservations()])
    config.training(learner_connector=lambda obs_space, act_space: recorder)
    with built(config) as algo:
        assert algo.get_policy().observation_space.shape == (4 + 2 + 1,)
        algo.train()
    obs = recorder.batches[0]["obs"]
    mask = recorder.batches[0]["mask"]
    assert obs.shape[-1] == 7
    one_hot = obs[..., 4:6][mask]
    # each step's previous action: one-hot (or zeros at an episode's first step)
    assert set(map(tuple, one_hot.astype(int))) <= {(0, 0), (1, 0), (0, 1)}
    assert (one_hot.sum(-1) == 1).mean() > 0.9
    # the previous reward: CartPole's 1 after the first step of each episode
    assert set(np.unique(obs[..., 6][mask])) == {0.0, 1.0}


class SeeWhatTheModuleSees(Callbacks):
    """Reports, per episode, the width of the newest observation the callbacks read, and
    whether every step's episode was a SingleAgentEpisode holding one observation more
    than its steps (the smallest of each over the episode's steps)."""

    def on_episode_step(self, *, episode, **kwargs):
        m = episode.custom_metrics
        width = float(np.shape(episode.get_observations(-1))[0])
        is_sae = float(isinstance(episode, SingleAgentEpisode))
        bounded = float(len(episode.get_observations()) == len(episode) + 1)
        m["obs_width"] = min(m.get("obs_width", width), width)
        m["is_single_agent_episode"] = min(m.get("is_single_agent_episode", 1.0), is_sae)
        m["history_is_the_episodes"] = min(m.get("history_is_the_episodes", 1.0), bounded)


def test_callbacks_read_the_episode_the_connectors_rewrote():
    config = ppo(env_to_module_connector=lambda env: [PrevActionsPrevRewards(),
                                                      FlattenObservations()])
    config.callbacks(SeeWhatTheModuleSees)
    with built(config) as algo:
        result = algo.train()
    metrics = result["custom_metrics"]
    # CartPole's 4 numbers, the previous action one-hot (2), the previous reward (1)
    assert metrics["obs_width_mean"] == 7.0 and metrics["obs_width_max"] == 7.0
    assert metrics["is_single_agent_episode_mean"] == 1.0
    assert metrics["history_is_the_episodes_mean"] == 1.0


def test_mean_std_filter_normalises_what_the_module_sees():
    recorder = RecordBatch()
    config = ppo(env_to_module_connector=lambda env: MeanStdFilter())
    config.training(learner_connector=lambda obs_space, act_space: [recorder])
    with built(config) as algo:
        assert algo.get_policy().observation_space.high.tolist() == [10.0] * 4
        for _ in range(2):
            algo.train()
    obs = recorder.batches[-1]["obs"][recorder.batches[-1]["mask"]]
    np.testing.assert_allclose(obs.mean(0), 0, atol=0.35)
    np.testing.assert_allclose(obs.std(0), 1, atol=0.35)  # raw CartPole: stds 0.05 to 0.6


def test_a_learner_connector_that_negates_rewards_makes_ppo_learn_to_fall():
    lengths = {}
    for name, factory in (("plain", None), ("negated", lambda o, a: NegateRewards())):
        with built(ppo().training(learner_connector=factory)) as algo:
            lengths[name] = [algo.train()["env_runners"]["episode_len_mean"]
                             for _ in range(5)]
    # same seed, same first batch; then one learns to balance, the other to fall
    assert lengths["negated"][-1] < lengths["negated"][0] - 5, lengths
    assert lengths["plain"][-1] > lengths["plain"][0] + 5, lengths


class PushLeft(ConnectorV2):
    def __call__(self, *, rl_module, batch, episodes, **kwargs):
        batch["actions"] = np.zeros_like(batch["actions"])
        return batch


def test_a_module_to_env_connector_changes_the_envs_actions():
    with built(ppo(module_to_env_connector=lambda env: PushLeft())) as algo:
        result = algo.train()
    # always pushed left, CartPole falls in about 9 steps (a random policy lasts ~22)
    assert result["env_runners"]["episode_len_mean"] < 12


def test_lambda_factories_reach_a_runner_process():
    config = (PPOConfig().environment("CartPole-v1")
              .env_runners(num_env_runners=1,
                           env_to_module_connector=lambda env, spaces, device: [
                               PrevActionsPrevRewards(n_prev_rewards=2), FlattenObservations()])
              .training(train_batch_size=400, minibatch_size=200, num_epochs=1,
                        learner_connector=lambda o, a: NegateRewards()))
    with built(config) as algo:
        assert algo.get_policy().observation_space.shape == (4 + 2 + 2,)
        result = algo.train()
    # the runner acted on 8-wide observations (4-wide ones would not fit the policy's
    # weights) and the learner trained on them
    assert result["timesteps_total"] >= 400
    assert result["info"]["learner"]["default_policy"]["num_env_steps_trained"] >= 400


def test_vector_envs_step_one_at_a_time_or_are_refused_in_one_line():
    flat = lambda env: FlattenObservations()  # noqa: E731
    # 64 CartPoles would be one vector env ("auto"): with connectors, stepped one by one
    config = (PPOConfig().environment("CartPole-v1")
              .env_runners(num_env_runners=0, num_envs_per_env_runner=64,
                           env_to_module_connector=flat)
              .training(train_batch_size=1280, minibatch_size=640, num_epochs=1)
              .evaluation(evaluation_interval=1, evaluation_duration=2))
    with built(config) as algo:
        result = algo.train()
    assert result["env_runners"]["episode_len_mean"] > 5
    assert result["evaluation"]["env_runners"]["episode_len_mean"] > 5  # evaluation runs them too
    config = (PPOConfig().environment("CartPole-v1", env_config={"vector": True})
              .env_runners(num_env_runners=0, env_to_module_connector=flat))
    with pytest.raises(ValueError, match=r"^env_to_module_connector / module_to_env_connector: "
                       "connectors run on runners stepping gymnasium envs one at a time"):
        config.build().stop()


def filter_count(env_runner):
    """The sample count of the runner's first MeanStdFilter connector."""
    return env_runner.sampler.connectors.env_to_module.connectors[0].stats.n


def test_mean_std_filter_statistics_are_merged_across_runners_each_iteration():
    config = (PPOConfig().environment("CartPole-v1")
              .env_runners(num_env_runners=2, env_to_module_connector=lambda env: MeanStdFilter())
              .training(train_batch_size=400, minibatch_size=200, num_epochs=1))
    with built(config) as algo:
        algo.train()
        counts = algo.env_runners.foreach_env_runner(filter_count)
        merged = algo.connector_filters.get_state()["00_MeanStdFilter"]["n"]
    assert len(counts) == 2 and merged >= 400
    # each runner holds every runner's statistics (plus what it saw since the sync)
    assert all(c >= merged for c in counts), (counts, merged)


def test_mean_std_filter_statistics_are_checkpointed_and_restored(tmp_path):
    config = (PPOConfig().environment("CartPole-v1")
              .env_runners(num_env_runners=0, env_to_module_connector=lambda env: MeanStdFilter())
              .training(train_batch_size=400, minibatch_size=200, num_epochs=1))
    with built(config) as algo:
        algo.train()
        saved = algo.connector_filters.get_state()["00_MeanStdFilter"]
        algo.save(str(tmp_path))
    with built(config) as algo:
        algo.restore(str(tmp_path))
        restored = algo.connector_filters.get_state()["00_MeanStdFilter"]
        (count,) = algo.env_runners.foreach_env_runner(filter_count)
    assert restored["n"] == saved["n"] >= 400
    np.testing.assert_allclose(restored["mean"], saved["mean"])
    assert count >= saved["n"]  # the runner took them (a fresh one had only its first resets)


def test_evaluation_runners_take_the_merged_filter_statistics():
    config = (PPOConfig().environment("CartPole-v1")
              .env_runners(num_env_runners=1, env_to_module_connector=lambda env: MeanStdFilter())
              .training(train_batch_size=400, minibatch_size=200, num_epochs=1)
              .evaluation(evaluation_interval=1, evaluation_num_env_runners=1,
                          evaluation_duration=1))
    with built(config) as algo:
        result = algo.train()
        merged = algo.connector_filters.get_state()["00_MeanStdFilter"]["n"]
        pool = algo.mesh.eval_runners
        state = pool.loop.run(pool[0].call("get_connector_filter_state"))["00_MeanStdFilter"]
    assert "evaluation" in result and merged >= 400
    # the evaluation runner took the training runners' merged statistics before evaluating
    # (alone, it would have seen one short episode)
    assert state["n"] >= merged, (state["n"], merged)


def test_a_multi_agent_env_refuses_connectors_in_one_line():
    config = (PPOConfig().environment("tests.integration.multi_agent_envs:make_early_leaver")
              .multi_agent(policies={"stayer", "leaver"},
                           policy_mapping_fn="tests.integration.multi_agent_envs:by_agent")
              .env_runners(num_env_runners=0,
                           env_to_module_connector=lambda env: FlattenObservations()))
    with pytest.raises(ValueError, match=r"^env_to_module_connector / module_to_env_connector: "
                                         "a MultiAgentEnv's runner does not run connectors yet"):
        config.build().stop()


def test_the_curiosity_example_shapes_rewards_and_logs_its_bonus():
    from examples import count_based_curiosity

    algo = count_based_curiosity.config(beta=0.1).training(train_batch_size=512,
                                                           minibatch_size=256).build()
    try:
        result = algo.train()
    finally:
        algo.stop()
    learner = result["learners"]["__all_modules__"]
    assert 0 < learner["curiosity_bonus_mean"] <= 0.1  # beta / sqrt(visits)
    assert learner["curiosity_states_seen"] >= 2


def test_the_frame_stacking_example_learns_cartpole_without_velocities():
    from examples import custom_rl_module, frame_stacking_connector

    config = frame_stacking_connector.config()
    result = custom_rl_module.train(config, 100.0, max_env_steps=60_000, log=False)
    assert result["episode_reward_mean"] >= 100, result["episode_reward_mean"]
    with config.env_runners(num_env_runners=0).build() as algo:  # 4 frames x 2 values
        assert algo.get_policy().observation_space.shape == (8,)


def test_a_connector_reading_the_episode_after_one_writing_the_batch_is_one_line():
    """MeanStdFilter after FrameStackingEnvToModule: the stack is in the batch, the filter
    reads the episode's 2-wide observation with statistics for 8. One line naming both."""
    from rlmesh.connectors.env_to_module import FrameStackingEnvToModule, MeanStdFilter
    from rlmesh.env.stateless import StatelessCartPole

    config = (PPOConfig().environment(StatelessCartPole)
              .env_runners(num_env_runners=0, env_to_module_connector=lambda env: [
                  FrameStackingEnvToModule(num_frames=4), MeanStdFilter()])
              .training(train_batch_size=200, minibatch_size=100))
    with pytest.raises(Exception) as err:
        with config.build() as algo:
            algo.train()
    line = str(err.value).strip().splitlines()[0]
    assert "MeanStdFilter (number 2 of the pipeline) failed on its first call" in line, line
    assert "Box(shape=(8,), float32)" in line and "has shape (2,)" in line
