"""A callback that logs its own metric with RLlib's new-stack MetricsLogger: the pole's mean
absolute angle over each CartPole episode, averaged over the last 50 episodes, which lands
in ``result["env_runners"]["pole_angle"]``, in result.json and in TensorBoard
(``env_runners/pole_angle``). A hook function (RLlib 2.40's ``config.callbacks(
on_episode_end=fn)``) logs the longest episode beside it.

    python -m examples.metrics_callback [FOLDER]   # 10 iterations, result.json and
                                                   # TensorBoard files in FOLDER
"""

from __future__ import annotations

import sys
import tempfile

import numpy as np

from rlmesh.algorithms.ppo import PPOConfig
from rlmesh.callbacks.callbacks import RLlibCallback


class PoleAngle(RLlibCallback):
    """Each step's angle (observation index 2) kept in the episode, their mean logged at
    its end."""

    def on_episode_step(self, *, episode, metrics_logger, **kwargs):
        episode.custom_data.setdefault("angles", []).append(abs(float(episode.get_observations(-1)[2])))

    def on_episode_end(self, *, episode, metrics_logger, **kwargs):
        metrics_logger.log_value("pole_angle", float(np.mean(episode.custom_data["angles"])),
                                 reduce="mean", window=50)


def longest_episode(*, episode, metrics_logger, **kwargs):
    metrics_logger.log_value("longest_episode", len(episode), reduce="max")


def config() -> PPOConfig:
    return (PPOConfig().environment("CartPole-v1")
            .env_runners(num_env_runners=1, num_envs_per_env_runner=4)
            .training(train_batch_size=1000, minibatch_size=250, num_epochs=10, lr=0.001)
            .callbacks(PoleAngle, on_episode_end=longest_episode))


def train(folder: str, iterations: int = 10, log: bool = True) -> list[dict]:
    """``iterations`` of training, each result into ``folder``'s result.json and
    TensorBoard file (what ``rlmesh train`` writes in a trial's folder)."""
    from rlmesh.results import ResultLogger

    logger, results = ResultLogger(folder), []
    with config().build() as algo:
        for _ in range(iterations):
            results.append(algo.train())
            logger.log(results[-1])
            runners = results[-1]["env_runners"]
            if log:
                print(f"return {runners['episode_return_mean']:6.1f}  pole angle "
                      f"{runners['pole_angle']:.4f} rad  longest "
                      f"{runners['longest_episode']:.0f}")
    logger.close()
    return results


if __name__ == "__main__":
    out = sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="metrics_callback_")
    train(out)
    print("result.json and TensorBoard files in", out)
