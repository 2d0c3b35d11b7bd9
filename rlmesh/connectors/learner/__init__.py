"""Learner connectors (RLlib's ``ray.rllib.connectors.learner``): run on the learner before
the loss, on each update's batch. ``batch`` is ``{module_id: {column: [T, B, ...]}}``
(the runners' time-major fragments, ``mask`` False on padding; changes in place stick)
and ``episodes`` are ``ColumnEpisode`` views over it (each env column cut at episode
ends; ``set_rewards`` writes into the batch). Advantages and value targets are computed
after the connectors, inside the policy's update, so a reward changed here changes
them. RLlib's default pieces are no-ops here: rlmesh builds the batch from its fragments
itself, and stored observations already hold what env-to-module connectors made."""

from __future__ import annotations

from rlmesh.connectors._noop import noop_connector
from rlmesh.connectors.connector_pipeline_v2 import ConnectorPipelineV2
from rlmesh.connectors.connector_v2 import ConnectorV2


class LearnerConnectorPipeline(ConnectorPipelineV2):
    """The learner's pipeline (RLlib's name)."""


_BUILT = "rlmesh builds the train batch from its fragments itself"
AddObservationsFromEpisodesToBatch = noop_connector("AddObservationsFromEpisodesToBatch", _BUILT)
AddColumnsFromEpisodesToTrainBatch = noop_connector("AddColumnsFromEpisodesToTrainBatch", _BUILT)
AddNextObservationsFromEpisodesToTrainBatch = noop_connector(
    "AddNextObservationsFromEpisodesToTrainBatch", _BUILT)
AddOneTsToEpisodesAndTruncate = noop_connector(
    "AddOneTsToEpisodesAndTruncate", "the learner bootstraps cut episodes itself")
AddStatesFromEpisodesToBatch = noop_connector("AddStatesFromEpisodesToBatch", _BUILT)
AddTimeDimToBatchAndZeroPad = noop_connector("AddTimeDimToBatchAndZeroPad", _BUILT)
BatchIndividualItems = noop_connector("BatchIndividualItems", _BUILT)
AgentToModuleMapping = noop_connector("AgentToModuleMapping", _BUILT)
NumpyToTensor = noop_connector("NumpyToTensor", "the policy moves its batch to the device")
GeneralAdvantageEstimation = noop_connector(
    "GeneralAdvantageEstimation", "PPO computes GAE inside its update, after the connectors")
FrameStackingLearner = noop_connector(
    "FrameStackingLearner", "the stored observations are the stacks the module saw")

__all__ = ["ConnectorV2", "LearnerConnectorPipeline", "AddObservationsFromEpisodesToBatch",
           "AddColumnsFromEpisodesToTrainBatch", "AddNextObservationsFromEpisodesToTrainBatch",
           "AddOneTsToEpisodesAndTruncate", "AddStatesFromEpisodesToBatch",
           "AddTimeDimToBatchAndZeroPad", "BatchIndividualItems", "AgentToModuleMapping",
           "NumpyToTensor", "GeneralAdvantageEstimation", "FrameStackingLearner"]
