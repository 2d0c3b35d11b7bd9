"""RLlib's ConnectorV2 settings (docs/connectors.md): the factories of the env runners'
env-to-module and module-to-env pipelines and of the learner's pipeline. Mixed into
AlgorithmConfig; each factory is a function (a lambda on this machine reaches the runner
processes as the config's other functions do; by import path elsewhere)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from rlmesh.config.settings import setting


@dataclass(kw_only=True)
class ConnectorSettings:
    env_to_module_connector: str | Callable | None = setting(
        None, "env_runners", aliases=("_env_to_module_connector",),
        doc="RLlib's env-to-module connectors: a function of the env (RLlib's newer "
            "(env, spaces, device) too) returning a ConnectorV2, a list of them or a "
            "pipeline (rlmesh.connectors.env_to_module: FlattenObservations, "
            "PrevActionsPrevRewards, MeanStdFilter, FrameStackingEnvToModule or your own). "
            "Each new observation goes through it before the policy acts; the policy's "
            "observation space is the pipeline's output space, and fragments store what the "
            "policy saw. Single-agent runners stepping gymnasium envs one at a time (a "
            "vector env of 64+ CartPoles is stepped one env at a time instead).")
    module_to_env_connector: str | Callable | None = setting(
        None, "env_runners", aliases=("_module_to_env_connector",),
        doc="RLlib's module-to-env connectors: a function of the env returning connectors "
            "that see the policy's actions (batch['actions']) before the envs do; the env "
            "steps batch['actions_for_env'] if one sets it, else batch['actions'] (which is "
            "what is stored). rlmesh still rescales and clips Box actions afterwards "
            "(normalize_actions, clip_actions).")
    learner_connector: str | Callable | None = setting(
        None, "training", aliases=("_learner_connector",),
        doc="RLlib's learner connectors: a function (input_observation_space, "
            "input_action_space) returning connectors called on each train batch before "
            "the loss, batch as {policy_id: time-major columns} and episodes as views over "
            "it (rlmesh.connectors.learner); advantages are computed after them, so a "
            "reward changed there is what the policy learns from.")
