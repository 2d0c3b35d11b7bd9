"""The reference of the ``recurrent`` benchmark: sb3-contrib's RecurrentPPO with
rl-baselines3-zoo's tuned hyperparameters (hyperparams/ppo_lstm.yml) on CartPole-v1 or
Pendulum-v1 with their velocities hidden, stopped by rlmesh's rule (the mean return of the
last 100 episodes >= the threshold, checked after each rollout and its update).

rl-zoo's ``CartPoleNoVel-v1`` and ``PendulumNoVel-v1`` are the gymnasium envs with the
velocity entries of each observation set to 0 (the shape stays); ``MaskVelocity`` below does
the same, as rlmesh's ``rlmesh.env.memory`` does on its side.

Runs with the peers' venv (``make bench-peers``), never rlmesh's, and imports nothing of
rlmesh: ``.venv-peers/bin/python tests/benchmarks/peer_sb3_recurrent.py --env cartpole
--seed 0`` prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import gymnasium as gym
import numpy as np

from peer_sb3 import learn_and_report, linear  # this folder: the script's own on sys.path

VELOCITY_INDICES = {"CartPole-v1": [1, 3], "Pendulum-v1": [2]}

# hyperparams/ppo_lstm.yml: env id, n_envs, n_timesteps, threshold, RecurrentPPO kwargs
# (sb3-contrib's defaults otherwise: MlpLstmPolicy with a 256-cell LSTM for the actor and
# another for the critic, [64, 64] tanh heads after them, batch_size 128).
ZOO: dict[str, tuple[str, int, int, float, dict[str, Any]]] = {
    "cartpole": ("CartPole-v1", 8, 100_000, 475.0, {
        "n_steps": 32, "batch_size": 256, "gae_lambda": 0.8, "gamma": 0.98, "n_epochs": 20,
        "ent_coef": 0.0, "learning_rate": linear(0.001), "clip_range": linear(0.2)}),
    "pendulum": ("Pendulum-v1", 4, 100_000, -200.0, {
        "n_steps": 1024, "gae_lambda": 0.95, "gamma": 0.9, "n_epochs": 10, "ent_coef": 0.0,
        "learning_rate": 1e-3, "clip_range": 0.2, "use_sde": True, "sde_sample_freq": 4}),
}


class MaskVelocity(gym.ObservationWrapper):
    """The env's velocity entries set to 0 in every observation (rl-zoo's wrapper's effect)."""

    def __init__(self, env: gym.Env, indices: list[int]) -> None:
        super().__init__(env)
        self.keep = np.ones(env.observation_space.shape, np.float32)
        self.keep[indices] = 0.0

    def observation(self, observation: np.ndarray) -> np.ndarray:
        return (observation * self.keep).astype(np.float32)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--env", choices=list(ZOO), default="cartpole")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threshold", type=float, help="stop at this mean return")
    parser.add_argument("--timesteps", type=int, help="step budget (default: rl-zoo's)")
    parser.add_argument("--progress", action="store_true", help="a line per rollout on stderr")
    args = parser.parse_args()
    from sb3_contrib import RecurrentPPO
    from stable_baselines3.common.env_util import make_vec_env

    env_id, n_envs, timesteps, threshold, kwargs = ZOO[args.env]
    env = make_vec_env(env_id, n_envs=n_envs, seed=args.seed, wrapper_class=MaskVelocity,
                       wrapper_kwargs={"indices": VELOCITY_INDICES[env_id]})
    model = RecurrentPPO("MlpLstmPolicy", env, seed=args.seed, device="cpu", verbose=0, **kwargs)
    learn_and_report(model, args.seed, threshold if args.threshold is None else args.threshold,
                     args.timesteps or timesteps, args.progress)


if __name__ == "__main__":
    main()
