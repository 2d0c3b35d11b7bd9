"""The references of the ``dqn_*`` benchmarks, in the peers' venv (never rlmesh's; imports
nothing of rlmesh). Prints one JSON line.

``learn``: stable-baselines3 DQN on CartPole-v1 with rl-baselines3-zoo's tuned
hyperparameters, stopped by rlmesh's rule (the mean return of the last 100 episodes >= 475,
checked after each rollout of train_freq steps and its gradient steps).
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


def learn(seed: int, threshold: float, timesteps: int) -> None:
    from stable_baselines3 import DQN
    from stable_baselines3.common.env_util import make_vec_env

    env = make_vec_env("CartPole-v1", n_envs=1, seed=seed)  # DummyVecEnv + Monitor
    model = DQN("MlpPolicy", env, seed=seed, device="cpu", verbose=0, **ZOO)
    learn_and_report(model, seed, threshold, timesteps)


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
    parser.add_argument("what", choices=["learn", "replay"])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threshold", type=float, default=475.0)
    parser.add_argument("--timesteps", type=int, default=N_TIMESTEPS)
    parser.add_argument("--capacity", type=int, default=1_000_000)
    parser.add_argument("--inserts", type=int, default=100_000)
    parser.add_argument("--samples", type=int, default=2_000)
    args = parser.parse_args()
    if args.what == "learn":
        learn(args.seed, args.threshold, args.timesteps)
    else:
        replay(args.capacity, args.inserts, args.samples)


if __name__ == "__main__":
    main()
