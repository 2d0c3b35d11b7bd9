"""The PPO peer: stable-baselines3 PPO with rl-baselines3-zoo's tuned hyperparameters on
CartPole-v1 (the ``ppo_learning`` benchmark), Pendulum-v1 or LunarLander-v3
(``bench_ppo_envs``), stopped by rlmesh's rule (the mean return of the last 100 episodes >=
the threshold, checked after each rollout and its update).

Runs with the peers' venv (``make bench-peers``), never rlmesh's, and imports nothing of
rlmesh: ``.venv-peers/bin/python tests/benchmarks/peer_sb3.py [--env pendulum] --seed 0``
prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from typing import Any, Callable

# rl-baselines3-zoo, hyperparams/ppo.yml, CartPole-v1 (n_timesteps 1e5, MlpPolicy).
N_ENVS = 8
N_TIMESTEPS = 100_000
ZOO = {"n_steps": 32, "batch_size": 256, "n_epochs": 20, "gamma": 0.98, "gae_lambda": 0.8,
       "ent_coef": 0.0}
LEARNING_RATE = 0.001  # lin_0.001: linear to 0 over n_timesteps
CLIP_RANGE = 0.2  # lin_0.2

# The other envs, from the same file: env id, n_envs, n_timesteps, threshold, PPO kwargs
# (SB3's defaults otherwise: batch_size 64, lr 3e-4, clip_range 0.2, [64, 64] tanh nets).
OTHER_ENVS: dict[str, tuple[str, int, int, float, dict[str, Any]]] = {
    "pendulum": ("Pendulum-v1", 4, 100_000, -250.0, {
        "n_steps": 1024, "gae_lambda": 0.95, "gamma": 0.9, "n_epochs": 10, "ent_coef": 0.0,
        "learning_rate": 1e-3, "clip_range": 0.2, "use_sde": True, "sde_sample_freq": 4}),
    "lunar": ("LunarLander-v3", 16, 1_000_000, 200.0, {  # rl-zoo's LunarLander-v2 entry
        "n_steps": 1024, "batch_size": 64, "gae_lambda": 0.98, "gamma": 0.999,
        "n_epochs": 4, "ent_coef": 0.01}),
}


def linear(start: float) -> Callable[[float], float]:
    """rl-zoo's ``lin_<start>``: SB3 passes progress_remaining, 1 at the start and 0 at the end."""
    return lambda progress_remaining: progress_remaining * start


def make_stopper(threshold: float, progress: bool = False) -> Any:
    from stable_baselines3.common.callbacks import BaseCallback

    class StopAtMeanReturn(BaseCallback):
        """Ends training at the first rollout after which the mean return of the last 100
        episodes (SB3's ep_info_buffer) is >= threshold. The rollout's update has run by the
        time SB3 next calls ``_on_step``, as rlmesh's stop is checked after ``train()``."""

        def __init__(self) -> None:
            super().__init__()
            self.solved_at: int | None = None
            self.rollouts = 0
            self.mean = math.nan
            self.best = -math.inf
            self.start = time.perf_counter()

        def _on_rollout_end(self) -> None:
            self.rollouts += 1
            returns = [info["r"] for info in self.model.ep_info_buffer]
            self.mean = sum(returns) / len(returns) if returns else math.nan
            if returns:
                self.best = max(self.best, self.mean)
            if progress:  # for runs of many minutes: where it is, on stderr
                print(f"rollout {self.rollouts}: {self.num_timesteps} steps, mean {self.mean:.1f}, "
                      f"{time.perf_counter() - self.start:.0f} s", file=sys.stderr, flush=True)
            if self.solved_at is None and self.mean >= threshold:
                self.solved_at = self.num_timesteps

        def _on_step(self) -> bool:
            return self.solved_at is None

    return StopAtMeanReturn()


def versions() -> dict[str, str]:
    import gymnasium
    import stable_baselines3
    import torch

    out = {"stable_baselines3": stable_baselines3.__version__, "torch": torch.__version__,
           "gymnasium": gymnasium.__version__}
    try:  # peer_sb3_recurrent's RecurrentPPO
        import sb3_contrib

        out["sb3_contrib"] = sb3_contrib.__version__
    except ImportError:
        pass
    return out


def learn_and_report(model: Any, seed: int, threshold: float, timesteps: int,
                     progress: bool = False) -> None:
    """Train ``model`` until the stopper's threshold (or ``timesteps``); print one JSON line."""
    stopper = make_stopper(threshold, progress)
    t0 = time.perf_counter()
    model.learn(total_timesteps=timesteps, callback=stopper)
    learn_s = time.perf_counter() - t0
    solved = stopper.solved_at is not None
    print(json.dumps({
        "seed": seed, "solved": solved,
        "timesteps": stopper.solved_at if solved else model.num_timesteps,
        "episode_reward_mean": stopper.mean, "best_mean": stopper.best,
        "rollouts": stopper.rollouts, "learn_s": learn_s,
        **versions()}), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--env", choices=["cartpole", *OTHER_ENVS], default="cartpole")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threshold", type=float,
                        help="stop at this mean return (default: 475, -250, 200 by env)")
    parser.add_argument("--timesteps", type=int,
                        help="step budget (default: rl-zoo's n_timesteps for the env)")
    parser.add_argument("--progress", action="store_true", help="a line per rollout on stderr")
    parser.add_argument("--versions", action="store_true", help="print the versions and exit")
    args = parser.parse_args()
    if args.versions:
        print(json.dumps(versions()))
        return
    import torch
    from stable_baselines3 import PPO

    torch.set_num_threads(1)  # as rlmesh's learner; torch's default 2 spin on a loaded machine
    from stable_baselines3.common.env_util import make_vec_env

    if args.env == "cartpole":
        env_id, n_envs, timesteps, threshold = "CartPole-v1", N_ENVS, N_TIMESTEPS, 475.0
        # SB3 runs the lin_ schedules to 0 over the budget learn() gets (--timesteps).
        kwargs = {**ZOO, "learning_rate": linear(LEARNING_RATE), "clip_range": linear(CLIP_RANGE)}
    else:
        env_id, n_envs, timesteps, threshold, kwargs = OTHER_ENVS[args.env]
    env = make_vec_env(env_id, n_envs=n_envs, seed=args.seed)  # DummyVecEnv + Monitor
    model = PPO("MlpPolicy", env, seed=args.seed, device="cpu", verbose=0, **kwargs)
    learn_and_report(model, args.seed, args.threshold if args.threshold is not None else threshold,
                     args.timesteps or timesteps, args.progress)


if __name__ == "__main__":
    main()
