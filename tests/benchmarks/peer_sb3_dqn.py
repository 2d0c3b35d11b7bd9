"""The references of the ``dqn_*`` benchmarks, in the peers' venv (never rlmesh's; imports
nothing of rlmesh). Prints one JSON line.

``learn``: stable-baselines3 DQN on CartPole-v1 with rl-baselines3-zoo's tuned
hyperparameters, stopped by rlmesh's rule (the mean return of the last 100 episodes >= 475,
checked after each rollout of train_freq steps and its gradient steps). A budget other than
rl-zoo's 50k keeps rl-zoo's exploration schedule in env steps (epsilon to 0.04 over 8,000),
not its fraction of the budget (``exploration_fraction`` scales with ``learn``'s total).
``eval``: the same agent stopped by rl-zoo's own metric: SB3's EvalCallback (10 greedy
episodes on an env of its own every ``--eval-freq`` env steps) with
StopTrainingOnRewardThreshold at 475; the evaluations' time counts in ``learn_s``.
``replay``: SB3's numpy ReplayBuffer: insertions/s (one transition per add, as SB3's
collection loop adds them) and batch-256 samples/s (indexes, gathers, torch tensors: what
``sample`` does) from a full 1M buffer, every row written.
"""

from __future__ import annotations

import argparse
import json
import time

from peer_sb3 import learn_and_report, versions

# rl-baselines3-zoo, hyperparams/dqn.yml, CartPole-v1 (n_timesteps 5e4, MlpPolicy).
N_TIMESTEPS = 50_000
ZOO = {"learning_rate": 2.3e-3, "batch_size": 64, "buffer_size": 100_000,
       "learning_starts": 1000, "gamma": 0.99, "target_update_interval": 10, "train_freq": 256,
       "gradient_steps": 128, "exploration_fraction": 0.16, "exploration_final_eps": 0.04,
       "policy_kwargs": {"net_arch": [256, 256]}}


def make_model(seed: int, timesteps: int):
    import torch
    from stable_baselines3 import DQN
    from stable_baselines3.common.env_util import make_vec_env

    torch.set_num_threads(1)  # as rlmesh's learner; more threads spin on a loaded machine

    env = make_vec_env("CartPole-v1", n_envs=1, seed=seed)  # DummyVecEnv + Monitor
    # rl-zoo's epsilon schedule in env steps whatever the budget (0.16 of its 50k: 8,000).
    kwargs = {**ZOO, "exploration_fraction": ZOO["exploration_fraction"] * N_TIMESTEPS / timesteps}
    return DQN("MlpPolicy", env, seed=seed, device="cpu", verbose=0, **kwargs)


def learn(seed: int, threshold: float, timesteps: int) -> None:
    learn_and_report(make_model(seed, timesteps), seed, threshold, timesteps)


def learn_to_eval(seed: int, threshold: float, timesteps: int, eval_freq: int,
                  episodes: int) -> None:
    """Train until the greedy evaluation's mean over ``episodes`` reaches ``threshold``."""
    from stable_baselines3.common.callbacks import EvalCallback, StopTrainingOnRewardThreshold
    from stable_baselines3.common.env_util import make_vec_env

    history: list[list[float]] = []

    class TimedEval(EvalCallback):  # the seconds spent evaluating; (env steps, mean) of each
        eval_s = 0.0

        def _on_step(self) -> bool:
            t0 = time.perf_counter()
            go_on = super()._on_step()
            if self.eval_freq > 0 and self.n_calls % self.eval_freq == 0:
                self.eval_s += time.perf_counter() - t0
                history.append([self.num_timesteps, float(self.last_mean_reward)])
            return go_on

    model = make_model(seed, timesteps)
    eval_env = make_vec_env("CartPole-v1", n_envs=1, seed=seed + 1000)
    callback = TimedEval(eval_env, n_eval_episodes=episodes, eval_freq=eval_freq,
                         deterministic=True, verbose=0,
                         callback_on_new_best=StopTrainingOnRewardThreshold(threshold))
    t0 = time.perf_counter()
    model.learn(total_timesteps=timesteps, callback=callback)
    learn_s = time.perf_counter() - t0
    solved = callback.best_mean_reward >= threshold
    returns = [info["r"] for info in model.ep_info_buffer]
    print(json.dumps({
        "seed": seed, "solved": solved, "timesteps": model.num_timesteps,
        "evaluation_mean": history[-1][1] if history else None, "evaluations": history,
        "eval_s": callback.eval_s, "learn_s": learn_s,
        "episode_reward_mean": sum(returns) / len(returns) if returns else None,
        **versions()}), flush=True)


def replay(capacity: int, inserts: int, samples: int) -> None:
    import gymnasium as gym
    import numpy as np
    from stable_baselines3.common.buffers import ReplayBuffer

    obs_space, act_space = gym.spaces.Box(-1, 1, (4,), np.float32), gym.spaces.Discrete(2)
    buf = ReplayBuffer(capacity, obs_space, act_space, device="cpu", n_envs=1)
    rng = np.random.default_rng(0)
    obs = rng.standard_normal((inserts, 1, 4)).astype(np.float32)
    act, rew, done = np.zeros((1, 1)), np.ones(1, np.float32), np.zeros(1, np.float32)
    t0 = time.perf_counter()
    for i in range(inserts):
        buf.add(obs[i], obs[i], act, rew, done, [{}])
    insert_rate = inserts / (time.perf_counter() - t0)
    buf.pos, buf.full = 0, True  # as after `capacity` insertions: sample from all of it,
    # every row written (untouched rows would all read the one zero page, always cached)
    for column in (buf.observations, buf.next_observations, buf.actions, buf.rewards,
                   buf.dones, buf.timeouts):
        column[...] = rng.random(column.shape)
    buf.sample(256)
    t0, cpu0 = time.perf_counter(), time.process_time()
    for _ in range(samples):
        buf.sample(256)
    sample_rate = samples / (time.perf_counter() - t0)
    cpu_rate = samples / (time.process_time() - cpu0)
    print(json.dumps({"insertions_per_s": insert_rate, "batches_per_s": sample_rate,
                      "batches_per_cpu_s": cpu_rate,
                      "capacity": capacity, **versions()}), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("what", choices=["learn", "eval", "replay"])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threshold", type=float, default=475.0)
    parser.add_argument("--timesteps", type=int, default=N_TIMESTEPS)
    parser.add_argument("--eval-freq", type=int, default=2048, help="env steps between evaluations")
    parser.add_argument("--eval-episodes", type=int, default=10)
    parser.add_argument("--capacity", type=int, default=1_000_000)
    parser.add_argument("--inserts", type=int, default=100_000)
    parser.add_argument("--samples", type=int, default=2_000)
    args = parser.parse_args()
    if args.what == "learn":
        learn(args.seed, args.threshold, args.timesteps)
    elif args.what == "eval":
        learn_to_eval(args.seed, args.threshold, args.timesteps, args.eval_freq, args.eval_episodes)
    else:
        replay(args.capacity, args.inserts, args.samples)


if __name__ == "__main__":
    main()
