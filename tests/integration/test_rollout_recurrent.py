"""A recurrent policy restored from a checkpoint acts with its state: `rlmesh rollout` on a
multi-agent run carries each agent's LSTM state through the episode (it called every step
without state, so each answer forgot what came before), and a restored policy asked without
state warns once, as Algorithm.compute_single_action does."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from rlmesh.algorithms import PPOConfig
from rlmesh.cli.rollout import run_multi_agent_episodes
from rlmesh.driver.acting import MissingStateWarning
from rlmesh.driver.inference import InferencePolicy


@pytest.fixture(scope="module")
def lstm_checkpoint(tmp_path_factory):
    config = (PPOConfig()
              .environment("examples.multi_agent_cartpole:make_env", env_config={"num_agents": 2})
              .env_runners(num_env_runners=0, rollout_fragment_length=32)
              .training(train_batch_size=64, minibatch_size=32, num_epochs=1,
                        model={"use_lstm": True, "lstm_cell_size": 8, "fcnet_hiddens": [8],
                               "max_seq_len": 8})
              .multi_agent(policies={"p0", "p1"},
                           policy_mapping_fn="tests.integration.multi_agent_envs:cartpole_two")
              .debugging(seed=0))
    with config.build() as algo:
        algo.train()
        return algo.save(tmp_path_factory.mktemp("ckpt"))


def test_multi_agent_rollout_carries_each_agents_state(lstm_checkpoint):
    policies = InferencePolicy.from_checkpoint(lstm_checkpoint, trust_code=True)
    from examples.multi_agent_cartpole import make_env

    calls: list = []
    for pid in ("p0", "p1"):  # record the state each step is given
        inner = policies.policies[pid].compute_step

        def recorded(obs, state=None, *args, _inner=inner, **kwargs):
            calls.append(state)
            return _inner(obs, state, *args, **kwargs)

        policies.policies[pid].compute_step = recorded
    returns: list[float] = []
    with warnings.catch_warnings():
        warnings.simplefilter("error", MissingStateWarning)
        run_multi_agent_episodes(policies, make_env({"num_agents": 2}), steps=40, episodes=None,
                                 explore=False, seed=0, returns=returns, out=lambda *_: None)
    assert len(calls) >= 40 and all(state is not None for state in calls)
    initial = policies.get_policy("p0").get_initial_state()
    moved = [s for s in calls if not all(np.allclose(a, b) for a, b in zip(s, initial))]
    assert moved, "every step started from the initial state"


def test_a_restored_recurrent_policy_without_state_warns_once(lstm_checkpoint):
    policy = InferencePolicy.from_checkpoint(lstm_checkpoint, policy_id="p0", trust_code=True)
    obs = np.zeros(4, np.float32)
    with pytest.warns(MissingStateWarning, match="get_initial_state"):
        policy.compute_single_action(obs)
    with warnings.catch_warnings():
        warnings.simplefilter("error", MissingStateWarning)
        policy.compute_single_action(obs)  # said once
        action, state, _ = policy.compute_single_action(obs, state=policy.policy.get_initial_state())
    assert len(state) == len(policy.policy.get_initial_state())
