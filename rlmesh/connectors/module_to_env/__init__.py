"""Module-to-env connectors (RLlib's ``ray.rllib.connectors.module_to_env``): what a runner
does to the module's actions before the env gets them. A connector's ``batch`` holds
``"actions"`` (``[B, ...]``, the active envs' rows) and its ``episodes`` the matching
running episodes; the env gets ``batch["actions_for_env"]`` when a connector puts it
there, else ``batch["actions"]``. What is stored and trained on is ``batch["actions"]``
after the pipeline (RLlib's ACTIONS), so change it only where the policy's log-probability
still fits (or change ``actions_for_env``). RLlib's default pieces are no-ops here."""

from __future__ import annotations

from rlmesh.connectors._noop import noop_connector
from rlmesh.connectors.connector_pipeline_v2 import ConnectorPipelineV2
from rlmesh.connectors.connector_v2 import ConnectorV2


class ModuleToEnvPipeline(ConnectorPipelineV2):
    """The runner's pipeline (RLlib's name)."""


NormalizeAndClipActions = noop_connector(
    "NormalizeAndClipActions", "the runner rescales and clips Box actions itself "
    "(normalize_actions, clip_actions)")
GetActions = noop_connector("GetActions", "the policy samples its actions itself")
ListifyDataForVectorEnv = noop_connector("ListifyDataForVectorEnv", "the runner hands each env its row")
RemoveSingleTsTimeRankFromBatch = noop_connector("RemoveSingleTsTimeRankFromBatch",
                                                 "the runner's batch has no time rank")
UnBatchToIndividualItems = noop_connector("UnBatchToIndividualItems", "the runner hands each env its row")
TensorToNumpy = noop_connector("TensorToNumpy", "actions come back as numpy arrays")
ModuleToAgentUnmapping = noop_connector("ModuleToAgentUnmapping", "single-agent runners only")

__all__ = ["ConnectorV2", "ModuleToEnvPipeline", "NormalizeAndClipActions", "GetActions",
           "ListifyDataForVectorEnv", "RemoveSingleTsTimeRankFromBatch",
           "UnBatchToIndividualItems", "TensorToNumpy", "ModuleToAgentUnmapping"]
