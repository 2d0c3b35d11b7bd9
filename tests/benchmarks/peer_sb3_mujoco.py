"""The reference of the ``mujoco`` benchmark: stable-baselines3's SAC, TD3 and PPO on a MuJoCo
v5 env with rl-baselines3-zoo's hyperparameters for it, for a fixed number of env steps.

Runs with the peers' venv, never rlmesh's, and imports nothing of rlmesh:
``.venv-peers/bin/python tests/benchmarks/peer_sb3_mujoco.py --algo sac --env HalfCheetah-v5
--timesteps 100000 --seed 0`` prints one JSON line: the mean return of the last ``--window``
training episodes at the end, and the seconds ``learn`` took.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from peer_sb3_offpolicy import sac_or_td3  # this folder: the script's own on sys.path

# rl-baselines3-zoo hyperparams/sac.yml, the MuJoCo entries (HalfCheetah, Hopper, Walker2d, Ant):
# learning_starts 10000, SB3's defaults otherwise (lr 3e-4, batch 256, buffer 1e6, tau 0.005,
# gamma 0.99, train_freq 1, gradient_steps 1, ent_coef 'auto', net_arch [256, 256]).
SAC_ZOO = {"learning_starts": 10_000}
# hyperparams/td3.yml, the MuJoCo entries: learning_starts 10000, Gaussian action noise of std
# 0.1, lr 1e-3, batch 256, train_freq 1, gradient_steps 1, net_arch [400, 300].
TD3_ZOO = {"learning_starts": 10_000, "learning_rate": 1e-3, "batch_size": 256, "train_freq": 1,
           "gradient_steps": 1, "policy_kwargs": {"net_arch": [400, 300]}}
TD3_NOISE_STD = 0.1
# hyperparams/ppo.yml, the tuned Hopper-v3 and HalfCheetah-v3 entries (normalize: true, i.e.
# VecNormalize of observations and rewards; one env).
PPO_ZOO = {
    "Hopper": {"batch_size": 32, "n_steps": 512, "gamma": 0.999, "learning_rate": 9.80828e-05,
               "ent_coef": 0.00229519, "clip_range": 0.2, "n_epochs": 5, "gae_lambda": 0.99,
               "max_grad_norm": 0.7, "vf_coef": 0.835671},
    "HalfCheetah": {"batch_size": 64, "n_steps": 512, "gamma": 0.98,
                    "learning_rate": 2.0633e-05, "ent_coef": 0.000401762, "clip_range": 0.1,
                    "n_epochs": 20, "gae_lambda": 0.92, "max_grad_norm": 0.8,
                    "vf_coef": 0.58096},
}


def build(algo: str, env_id: str, seed: int, window: int) -> Any:
    import gymnasium as gym
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.monitor import Monitor
    from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize

    common = {"seed": seed, "device": "cpu", "verbose": 0, "stats_window_size": window}
    if algo == "ppo":
        env = VecNormalize(DummyVecEnv([lambda: Monitor(gym.make(env_id))]), gamma=
                           PPO_ZOO[env_id.split("-")[0]]["gamma"])
        kwargs = {"log_std_init": -2, "ortho_init": False, "activation_fn": torch.nn.ReLU,
                  "net_arch": {"pi": [256, 256], "vf": [256, 256]}}
        return PPO("MlpPolicy", env, policy_kwargs=kwargs, **PPO_ZOO[env_id.split("-")[0]],
                   **common)
    return sac_or_td3(algo, Monitor(gym.make(env_id)), {**SAC_ZOO, **common},
                      {**TD3_ZOO, **common}, TD3_NOISE_STD)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--algo", choices=("sac", "td3", "ppo"), default="sac")
    parser.add_argument("--env", default="HalfCheetah-v5")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--window", type=int, default=10)
    parser.add_argument("--timesteps", type=int, default=100_000)
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads; 1 as bench_mujoco's rows (0: torch's default of one "
                             "per core, which spins against any other load on 2 cores)")
    args = parser.parse_args()
    import stable_baselines3
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)

    model = build(args.algo, args.env, args.seed, args.window)
    t0 = time.perf_counter()
    model.learn(total_timesteps=args.timesteps)
    learn_s = time.perf_counter() - t0
    returns = [info["r"] for info in model.ep_info_buffer]
    print(json.dumps({"algo": args.algo, "env": args.env, "seed": args.seed,
                      "timesteps": model.num_timesteps, "episodes_in_window": len(returns),
                      "episode_reward_mean": sum(returns) / max(1, len(returns)),
                      "learn_s": learn_s, "torch_threads": torch.get_num_threads(),
                      "stable_baselines3": stable_baselines3.__version__}), flush=True)


if __name__ == "__main__":
    main()
