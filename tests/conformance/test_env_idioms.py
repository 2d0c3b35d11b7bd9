"""RLlib's env idioms, unchanged: a ``gym.Env`` class taking an EnvContext (given directly,
registered, or a gymnasium id whose env_config is gym.make's kwargs), each copy told its
worker_index (1..N in runner processes, 0 for the driver's probe copy) and vector_index
(0..num_envs-1); ``MultiAgentEnv`` subclasses declaring agents and spaces in each of RLlib's
ways. PPO trains one iteration with real runner processes on each."""

from __future__ import annotations

import json

import gymnasium as gym
import pytest

from rlmesh.algorithms import PPOConfig
from rlmesh.env.multi_agent_env import MultiAgentEnv
from rlmesh.env.registry import EnvContext, make_env, register_env
from tests.conformance import rllib_style_envs as envs

RUNNERS, ENVS_PER_RUNNER = 2, 2
RUNNER_COPIES = {(w, v) for w in range(1, RUNNERS + 1) for v in range(ENVS_PER_RUNNER)}


def _ppo(env, env_config, **multi_agent):
    cfg = (PPOConfig()
           .environment(env, env_config=env_config)
           .env_runners(num_env_runners=RUNNERS, num_envs_per_env_runner=ENVS_PER_RUNNER,
                        rollout_fragment_length=16)
           .training(train_batch_size=RUNNERS * ENVS_PER_RUNNER * 16, minibatch_size=32,
                     num_epochs=1, model={"fcnet_hiddens": [8]})
           .debugging(seed=0))
    return cfg.multi_agent(**multi_agent) if multi_agent else cfg


def _records(directory) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(directory.glob("*.json"))]


def _copies(records, kind=None) -> set[tuple[int, int]]:
    return {(r["worker_index"], r["vector_index"]) for r in records
            if kind is None or r["kind"] == kind}


def _train_once(cfg) -> dict:
    with cfg.build() as algo:
        result = algo.train()
        spaces = {pid: (algo.get_policy(pid).observation_space, algo.get_policy(pid).action_space)
                  for pid in (cfg.policies or ["default_policy"])}
    assert result["num_env_steps_sampled_this_iter"] >= RUNNERS * ENVS_PER_RUNNER * 16
    return spaces


# --- single-agent: the class, a registered creator, a gymnasium id ---

@pytest.mark.parametrize("how", ["class", "registered"])
def test_each_env_copy_gets_its_worker_and_vector_index_and_the_env_config(tmp_path, how):
    env = envs.SimpleCorridor
    if how == "registered":
        register_env("rllib_style_corridor", envs.corridor_creator)
        env = "rllib_style_corridor"
    spaces = _train_once(_ppo(env, {"corridor_length": 5, "record_dir": str(tmp_path)}))
    records = _records(tmp_path)
    runner_records = [r for r in records if r["worker_index"] > 0]
    # every runner process made num_envs copies, indexed as RLlib does
    assert sorted((r["worker_index"], r["vector_index"]) for r in runner_records) == sorted(RUNNER_COPIES)
    assert {r["num_workers"] for r in records} == {RUNNERS}
    assert {r["env_config"]["corridor_length"] for r in records} == {5}
    # one runner process per worker_index, the driver's copies (spaces) with index 0
    assert len({r["pid"] for r in runner_records}) == RUNNERS
    assert {(r["worker_index"], r["vector_index"]) for r in records if r not in runner_records} <= {(0, 0)}
    obs_space, action_space = spaces["default_policy"]
    assert obs_space == gym.spaces.Box(0.0, 5.0, (1,)) and action_space == gym.spaces.Discrete(2)


def test_a_gymnasium_id_takes_env_config_as_gym_make_kwargs():
    cfg = _ppo("CartPole-v1", {"max_episode_steps": 6})
    with cfg.build() as algo:
        result = algo.train()
    assert 0 < result["episode_len_mean"] <= 6


def test_the_driver_copy_gets_an_env_context_with_worker_index_0():
    env = make_env(envs.SimpleCorridor, {"corridor_length": 3})
    assert (env.worker_index, env.vector_index) == (0, 0)
    env = make_env(envs.SimpleCorridor, EnvContext({"corridor_length": 3}, 2, 1, 2))
    assert (env.worker_index, env.vector_index) == (2, 1)


# --- MultiAgentEnv: agents and spaces declared in each of RLlib's ways ---

BOX = gym.spaces.Box
SPACES = {
    envs.ClassicAgentIdsEnv: {
        "blue": (BOX(-1.0, 1.0, (3,)), gym.spaces.Discrete(2)),
        "red": (BOX(-1.0, 1.0, (3,)), gym.spaces.Discrete(2))},
    envs.PreferredFormatEnv: {
        "small": (BOX(-1.0, 1.0, (2,)), gym.spaces.Discrete(2)),
        "large": (BOX(-1.0, 1.0, (5,)), gym.spaces.Discrete(3))},
    envs.OverriddenSpacesEnv: {
        0: (BOX(-1.0, 1.0, (4,)), gym.spaces.Discrete(2)),
        1: (BOX(-1.0, 1.0, (5,)), gym.spaces.Discrete(3))},
    envs.NewStyleSpacesEnv: {
        "p": (BOX(-1.0, 1.0, (2,)), gym.spaces.Discrete(2)),
        "q": (BOX(-1.0, 1.0, (2,)), gym.spaces.Discrete(2))},
}


@pytest.mark.parametrize("cls", list(SPACES), ids=lambda c: c.__name__)
def test_multi_agent_env_idioms_give_every_agent_its_spaces(cls):
    env = cls(EnvContext({}))
    assert isinstance(env, MultiAgentEnv)
    assert sorted(env.possible_agents, key=str) == sorted(SPACES[cls], key=str)
    for agent, (obs_space, action_space) in SPACES[cls].items():
        assert env.get_observation_space(agent) == obs_space
        assert env.get_action_space(agent) == action_space
    obs, _ = env.reset()
    assert all(env.get_observation_space(a).contains(o) for a, o in obs.items())


def test_a_space_set_in_init_is_the_env_space_and_a_missing_one_says_how_to_give_it():
    env = envs.ClassicAgentIdsEnv()
    assert env.observation_space == BOX(-1.0, 1.0, (3,))  # as set, not rebuilt

    class NoSpaces(MultiAgentEnv):
        possible_agents = ["a"]

    with pytest.raises(ValueError, match="self.observation_spaces = .* or override get_observation_space"):
        NoSpaces().get_observation_space("a")


@pytest.mark.parametrize("cls", [envs.ClassicAgentIdsEnv, envs.PreferredFormatEnv,
                                 envs.OverriddenSpacesEnv], ids=lambda c: c.__name__)
def test_ppo_trains_a_multi_agent_env_written_rllib_style(tmp_path, cls):
    agents = list(SPACES[cls])
    cfg = _ppo(cls, {"length": 8, "record_dir": str(tmp_path)},
               policies={f"policy_{a}" for a in agents},
               policy_mapping_fn=envs.policy_per_agent)
    spaces = _train_once(cfg)
    for a in agents:
        assert spaces[f"policy_{a}"] == SPACES[cls][a]
    records = _records(tmp_path)
    assert {(r["worker_index"], r["vector_index"]) for r in records if r["worker_index"] > 0} == RUNNER_COPIES
    assert {r["env_config"]["length"] for r in records} == {8}
