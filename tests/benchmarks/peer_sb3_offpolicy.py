"""The references of the ``sac_td3`` benchmark: stable-baselines3 SAC and TD3 on Pendulum-v1
with rl-baselines3-zoo's tuned hyperparameters, stopped by rlmesh's rule (the mean return of
the last ``--window`` episodes >= ``--threshold``, checked after every rollout).

Runs with the peers' venv, never rlmesh's, and imports nothing of rlmesh:
``.venv-peers/bin/python tests/benchmarks/peer_sb3_offpolicy.py --algo sac --seed 0``
prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from typing import Any

N_TIMESTEPS = 20_000
# rl-baselines3-zoo hyperparams/sac.yml, Pendulum-v1: lr 1e-3, the rest SB3's defaults
# (batch 256, buffer 1e6, learning_starts 100, tau 0.005, gamma 0.99, train_freq 1,
# gradient_steps 1, ent_coef 'auto', net_arch [256, 256]).
SAC_ZOO = {"learning_rate": 1e-3}
# rl-baselines3-zoo hyperparams/td3.yml, Pendulum (tuned on v0, the same dynamics as v1):
# normal action noise of std 0.1, one training round of as many steps as the episode had
# after each episode.
TD3_ZOO = {"gamma": 0.98, "buffer_size": 200_000, "learning_starts": 10_000,
           "gradient_steps": -1, "train_freq": (1, "episode"), "learning_rate": 1e-3,
           "policy_kwargs": {"net_arch": [400, 300]}}
TD3_NOISE_STD = 0.1


def make_stopper(threshold: float) -> Any:
    from stable_baselines3.common.callbacks import BaseCallback

    class StopAtMeanReturn(BaseCallback):
        """Ends training at the first rollout after which the mean return of the newest
        episodes (SB3's ep_info_buffer, stats_window_size long) is >= threshold."""

        def __init__(self) -> None:
            super().__init__()
            self.solved_at: int | None = None
            self.mean = math.nan

        def _on_rollout_end(self) -> None:
            returns = [info["r"] for info in self.model.ep_info_buffer]
            self.mean = sum(returns) / len(returns) if returns else math.nan
            if self.solved_at is None and self.mean >= threshold:
                self.solved_at = self.num_timesteps

        def _on_step(self) -> bool:
            return self.solved_at is None

    return StopAtMeanReturn()


def versions() -> dict[str, str]:
    import gymnasium
    import stable_baselines3
    import torch

    return {"stable_baselines3": stable_baselines3.__version__, "torch": torch.__version__,
            "gymnasium": gymnasium.__version__}


def build(algo: str, seed: int, window: int) -> Any:
    import gymnasium as gym
    from stable_baselines3.common.monitor import Monitor

    env = Monitor(gym.make("Pendulum-v1"))
    common = {"seed": seed, "device": "cpu", "verbose": 0, "stats_window_size": window}
    return sac_or_td3(algo, env, {**SAC_ZOO, **common}, {**TD3_ZOO, **common}, TD3_NOISE_STD)


def sac_or_td3(algo: str, env: Any, sac_kwargs: dict, td3_kwargs: dict, noise_std: float
               ) -> Any:
    """SB3's SAC, or its TD3 with Gaussian action noise of ``noise_std`` (rl-zoo's
    noise_type normal), on ``env``."""
    import numpy as np
    from stable_baselines3 import SAC, TD3
    from stable_baselines3.common.noise import NormalActionNoise

    if algo == "sac":
        return SAC("MlpPolicy", env, **sac_kwargs)
    dims = env.action_space.shape[-1]
    noise = NormalActionNoise(np.zeros(dims), noise_std * np.ones(dims))
    return TD3("MlpPolicy", env, action_noise=noise, **td3_kwargs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--algo", choices=("sac", "td3"), default="sac")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threshold", type=float, default=-200.0)
    parser.add_argument("--window", type=int, default=10)
    parser.add_argument("--timesteps", type=int, default=N_TIMESTEPS)
    parser.add_argument("--threads", type=int, default=0,
                        help="torch threads; 0: torch's default, as a user would run it")
    args = parser.parse_args()
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    model = build(args.algo, args.seed, args.window)
    stopper = make_stopper(args.threshold)
    t0 = time.perf_counter()
    model.learn(total_timesteps=args.timesteps, callback=stopper)
    learn_s = time.perf_counter() - t0
    solved = stopper.solved_at is not None
    print(json.dumps({"algo": args.algo, "seed": args.seed, "solved": solved,
                      "timesteps": stopper.solved_at if solved else model.num_timesteps,
                      "episode_reward_mean": stopper.mean, "learn_s": learn_s,
                      **versions()}), flush=True)


if __name__ == "__main__":
    main()
