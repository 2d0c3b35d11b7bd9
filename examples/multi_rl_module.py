"""Two RLModules in one run (RLlib's MultiRLModuleSpec): multi-agent CartPole, agent i acting
with policy ``p<i mod 2>``, each policy with its own module (module id = policy id). ``p0``
is examples/custom_rl_module.py's MLP, ``p1`` the same class at another width.

    python -m examples.multi_rl_module     # to a combined return of 600 (from the repository root)
"""

from __future__ import annotations

from rlmesh.core.rl_module.multi_rl_module import MultiRLModuleSpec
from rlmesh.core.rl_module.rl_module import RLModuleSpec

from examples.custom_rl_module import MLPActorCritic
from examples.multi_agent_cartpole import config as cartpole_config
from examples.multi_agent_cartpole import train


def config(seed: int = 0):
    return cartpole_config(num_agents=2, num_policies=2, seed=seed).rl_module(
        rl_module_spec=MultiRLModuleSpec(rl_module_specs={
            "p0": RLModuleSpec(module_class=MLPActorCritic, model_config={"hidden_dim": 64}),
            "p1": RLModuleSpec(module_class=MLPActorCritic, model_config={"hidden_dim": 32}),
        }))


if __name__ == "__main__":
    train(config())
