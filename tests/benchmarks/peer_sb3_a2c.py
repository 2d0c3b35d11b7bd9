"""The peer of the A2C learning runs: stable-baselines3 A2C on CartPole-v1 with
rl-baselines3-zoo's tuned hyperparameters, stopped by rlmesh's rule (the mean return of the
last 100 episodes >= the threshold, checked after each rollout and its update).

Runs with the peers' venv (``make bench-peers``) and imports nothing of rlmesh:
``.venv-peers/bin/python tests/benchmarks/peer_sb3_a2c.py --seed 0`` prints one JSON line.
"""

from __future__ import annotations

import argparse

from peer_sb3 import learn_and_report  # this file's folder is on sys.path

# rl-baselines3-zoo, hyperparams/a2c.yml, CartPole-v1: 8 envs, 5e5 steps, ent_coef 0.0 and
# SB3's A2C defaults otherwise (n_steps 5, RMSprop at 7e-4, gamma 0.99, gae_lambda 1.0,
# vf_coef 0.5, max_grad_norm 0.5, MlpPolicy's [64, 64] tanh net).
N_ENVS = 8
N_TIMESTEPS = 500_000
ZOO = {"ent_coef": 0.0}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threshold", type=float, default=450.0)
    args = parser.parse_args()
    from stable_baselines3 import A2C
    from stable_baselines3.common.env_util import make_vec_env

    env = make_vec_env("CartPole-v1", n_envs=N_ENVS, seed=args.seed)  # DummyVecEnv + Monitor
    model = A2C("MlpPolicy", env, seed=args.seed, device="cpu", verbose=0, **ZOO)
    learn_and_report(model, args.seed, args.threshold, N_TIMESTEPS)


if __name__ == "__main__":
    main()
