"""Seed 000's "Global Coordination" as a user's driver script, with ``ray`` -> ``rlmesh`` and
no ``if __name__ == "__main__":`` guard (the env runners and the counter's own process import
this file for its classes): a counter started here with ``Counter.remote()``, registered by
name, incremented by every step of the envs in the runner of one PPO iteration, read here.
It prints one JSON line for tests/integration/test_seed_000_named_actors.py."""

import json
import os
import time

import gymnasium as gym

import rlmesh
import rlmesh.agents.ppo as ppo
from rlmesh.experimental import named_actors


@rlmesh.remote
class StepCounter:
    def __init__(self):
        self.count = 0

    def inc(self, n):
        self.count += n

    def get(self):
        return self.count

    def pid(self):
        return os.getpid()


class CountedCartPole(gym.Wrapper):
    """CartPole that tells the global counter of each step, and keeps its own tally."""

    def __init__(self, env_config=None):
        super().__init__(gym.make("CartPole-v1"))
        self.steps = 0

    def step(self, action):
        self.steps += 1
        named_actors.get_actor("global_counter").inc.remote(1)
        return self.env.step(action)


# A runner importing this file for its classes stops at this line.
counter = StepCounter.remote()
named_actors.register_actor("global_counter", counter)
print(rlmesh.get(counter.get.remote()))  # the latest count: 0 so far

config = ppo.DEFAULT_CONFIG.copy()
config.update(num_workers=1, num_gpus=0, train_batch_size=128, sgd_minibatch_size=64,
              num_sgd_iter=1, rollout_fragment_length=64)
trainer = ppo.PPOTrainer(config=config, env=CountedCartPole)
result = trainer.train()


def env_tallies():
    return sum(trainer.workers.foreach_worker(
        lambda worker: sum(worker.foreach_env(lambda env: env.steps))))


# The envs' increments are sent, not awaited: read until the count has caught up with them.
deadline = time.monotonic() + 10
while (count := rlmesh.get(counter.get.remote())) != (steps := env_tallies()):
    if time.monotonic() > deadline:
        break
    time.sleep(0.05)
trainer.stop()
print(json.dumps({"count": count, "env_steps": steps,
                  "steps_sampled": result["num_env_steps_sampled"], "pid": counter.pid()}))
