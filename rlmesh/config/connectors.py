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
    env_to_module_connector: str | Callable | list | None = setting(
        None, "env_runners", aliases=("_env_to_module_connector",),
        doc="RLlib's env-to-module connectors: a function of the env (RLlib's newer "
            "(env, spaces, device) too) returning a ConnectorV2, a list of them or a "
            "pipeline (rlmesh.connectors.env_to_module: FlattenObservations, "
            "PrevActionsPrevRewards, MeanStdFilter, FrameStackingEnvToModule or your own). "
            "Each new observation goes through it before the policy acts; the policy's "
            "observation space is the pipeline's output space, and fragments store what the "
            "policy saw. Single-agent runners stepping gymnasium envs one at a time (a "
            "vector env of 64+ CartPoles is stepped one env at a time instead).")
    module_to_env_connector: str | Callable | list | None = setting(
        None, "env_runners", aliases=("_module_to_env_connector",),
        doc="RLlib's module-to-env connectors: a function of the env returning connectors "
            "that see the policy's actions (batch['actions']) before the envs do; the env "
            "steps batch['actions_for_env'] if one sets it, else batch['actions'] (which is "
            "what is stored). rlmesh still rescales and clips Box actions afterwards "
            "(normalize_actions, clip_actions).")
    learner_connector: str | Callable | list | None = setting(
        None, "training", aliases=("_learner_connector",),
        doc="RLlib's learner connectors: a function (input_observation_space, "
            "input_action_space) returning connectors called on each train batch before "
            "the loss, batch as {policy_id: time-major columns} and episodes as views over "
            "it (rlmesh.connectors.learner); advantages are computed after them, so a "
            "reward changed there is what the policy learns from.")

    def _connector_checks(self) -> list[str]:
        """A connector (or a list of them) given where a factory goes: it cannot reach the
        runners' and learners' processes, which build their own from the factory."""
        problems = []
        for key in ("env_to_module_connector", "module_to_env_connector", "learner_connector"):
            value = getattr(self, key)
            made = value if isinstance(value, (list, tuple)) else [value]
            names = [type(v).__name__ for v in made
                     if hasattr(v, "recompute_output_observation_space") and not isinstance(v, type)]
            if names:
                args = "obs_space, act_space" if key == "learner_connector" else "env"
                problems.append(
                    f"{key}: got {', '.join(names)} made here, which the runners' and learners' "
                    f"processes cannot take; give the function that makes {'them' if len(names) > 1 else 'it'} "
                    f"(RLlib's form): {key}=lambda {args}: "
                    f"{'[' + ', '.join(n + '()' for n in names) + ']' if len(names) > 1 else names[0] + '()'}")
        return problems
