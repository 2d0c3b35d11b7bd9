"""Recurrent training end to end (real runner processes): PPO with use_lstm learns a task
that needs memory, recall of the first observation at the last step, where the same PPO
with the default MLP stays at chance; the learned LSTM acts with state through
compute_single_action."""

from __future__ import annotations

import numpy as np

from rlmesh.algorithms import PPOConfig
from tests.integration.envs_for_tests import RepeatFirstEnv

SYMBOLS = 4  # chance: 1/4


def memory_config(use_lstm: bool) -> PPOConfig:
    return (PPOConfig().environment(RepeatFirstEnv, env_config={"num_symbols": SYMBOLS,
                                                                "length": 4})
            .env_runners(num_env_runners=1, num_envs_per_env_runner=16,
                         rollout_fragment_length=32)
            .training(lr=3e-3, train_batch_size=512, minibatch_size=128, num_epochs=4,
                      gamma=0.9, entropy_coeff=0.01,
                      model={"fcnet_hiddens": [32], "use_lstm": use_lstm,
                             "lstm_cell_size": 32, "max_seq_len": 8})
            .debugging(seed=0))


def train(config: PPOConfig, max_steps: int, target: float | None = None):
    algo = config.build()
    means = []
    while True:
        result = algo.train()
        means.append(result["episode_reward_mean"])
        if result["timesteps_total"] >= max_steps or (target and means[-1] >= target):
            return algo, result["timesteps_total"], means


def test_ppo_with_lstm_learns_to_remember_where_the_mlp_cannot():
    mlp, mlp_steps, mlp_means = train(memory_config(False), 15_000)
    mlp.stop()
    plateau = float(np.mean(mlp_means[-5:]))
    algo, steps, means = train(memory_config(True), 40_000, target=0.9)
    try:
        print(f"\nrepeat-the-first-observation ({SYMBOLS} symbols, chance {1 / SYMBOLS:.2f}): "
              f"MLP plateau {plateau:.2f} (mean of its last 5 iterations, {mlp_steps} steps); "
              f"LSTM {means[-1]:.2f} after {steps} steps")
        assert plateau < 0.45, f"the MLP should not beat chance by much: {plateau:.2f}"
        assert means[-1] >= 0.9, f"PPO with use_lstm did not learn the memory task: {means}"
        # The learned policy with its state, one episode at a time, as a user acts with it.
        env, policy = RepeatFirstEnv({"num_symbols": SYMBOLS}), algo.get_policy()
        wins = 0
        for episode in range(20):
            obs, _ = env.reset(seed=episode)
            state, done = policy.get_initial_state(), False
            while not done:
                action, state, _ = algo.compute_single_action(obs, state=state)
                obs, reward, done, _, _ = env.step(action)
            wins += reward
        assert wins >= 16, f"compute_single_action with state recalled {wins} of 20"
    finally:
        algo.stop()


def test_rollout_of_a_recurrent_checkpoint_carries_the_state(tmp_path):
    """rlmesh rollout's loop with an LSTM checkpoint: the state goes from step to step, so
    a trained memory policy still recalls; from the initial state at every step it could
    not."""
    from rlmesh.driver.inference import InferencePolicy
    from rlmesh.cli.rollout import run_episodes

    algo, _, means = train(memory_config(True), 40_000, target=0.9)
    try:
        path = algo.save(tmp_path / "ckpt")
    finally:
        algo.stop()
    policy = InferencePolicy.from_checkpoint(path, trust_code=True)  # the env is a test module
    returns: list[float] = []
    run_episodes(policy, RepeatFirstEnv({"num_symbols": SYMBOLS}), None, 40, False, 0, returns,
                 out=lambda line: None)
    assert np.mean(returns) >= 0.8, returns
