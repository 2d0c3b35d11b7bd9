"""A global episode counter shared by every env of every env runner, as RLlib users build
with a named Ray actor: each env's reset increments it, a callback records each finished
episode's return in it, and the driver reads it after every iteration.

    python examples/named_actor_counter.py

The counter is a plain class: its public methods are the calls other processes make, with
plain data (numbers, strings, lists, dicts, numpy arrays) in and out.
"""

from __future__ import annotations

import gymnasium as gym

import rlmesh
from rlmesh.algorithms.ppo import PPOConfig
from rlmesh.callbacks import Callbacks


class EpisodeCounter:
    """Episodes started, per env runner, and the returns of those finished."""

    def __init__(self, start: int = 0) -> None:
        self.started: dict[str, int] = {}
        self.start = start
        self.finished = 0
        self.return_sum = 0.0

    def increment(self, worker_index: int) -> int:
        """One more episode started by a runner's env; the total started so far."""
        key = str(worker_index)  # msgpack maps with string keys: readable everywhere
        self.started[key] = self.started.get(key, 0) + 1
        return self.start + sum(self.started.values())

    def record_return(self, episode_return: float) -> None:
        self.finished += 1
        self.return_sum += episode_return

    def counts(self) -> dict:
        return {"started": self.start + sum(self.started.values()),
                "started_by_runner": dict(self.started), "finished": self.finished,
                "mean_return": self.return_sum / max(1, self.finished)}


class CountingCartPole(gym.Wrapper):
    """CartPole whose every reset increments the run's counter, found by name in the env
    runner's process. Looked up in reset, not in __init__: the driver builds one env to
    learn the spaces before the run (and its actors) exist; get_actor keeps one handle per
    process, so the lookup costs a dict read."""

    def __init__(self, env_config: dict) -> None:
        super().__init__(gym.make("CartPole-v1"))
        self.worker_index = getattr(env_config, "worker_index", 0)

    def reset(self, **kwargs):
        rlmesh.get_actor("counter").call("increment", self.worker_index)
        return self.env.reset(**kwargs)


class CounterCallbacks(Callbacks):
    """Episode ends (in the env runners) and training results (in the driver) reach the
    same actor."""

    def on_episode_end(self, *, episode, **kwargs) -> None:
        # tell: no reply waited for; the actor handles the calls of one process in order.
        rlmesh.get_actor("counter").tell("record_return", episode.total_reward)

    def on_train_result(self, *, algorithm, result, **kwargs) -> None:
        result["episodes_counted"] = rlmesh.get_actor("counter").call("counts")


def config(num_env_runners: int = 2) -> PPOConfig:
    return (PPOConfig()
            .environment(CountingCartPole)
            .env_runners(num_env_runners=num_env_runners, num_envs_per_env_runner=2,
                         rollout_fragment_length="auto")
            .training(train_batch_size=1000, minibatch_size=250, num_epochs=4,
                      model={"fcnet_hiddens": [32, 32]})
            .callbacks(CounterCallbacks, named_actors={"counter": EpisodeCounter}))


def main(iterations: int = 5) -> None:
    algo = config().build()
    try:
        for i in range(1, iterations + 1):
            result = algo.train()
            counts = result["episodes_counted"]
            print(f"iter {i}: reward {result['episode_reward_mean']:6.1f}  episodes this run "
                  f"{result['episodes_total']:4d}  counter: started {counts['started']} "
                  f"{counts['started_by_runner']}, finished {counts['finished']}")
        print("from the driver:", rlmesh.get_actor("counter").call("counts"))
    finally:
        algo.stop()


if __name__ == "__main__":
    main()
