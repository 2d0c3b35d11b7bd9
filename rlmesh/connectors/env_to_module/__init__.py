"""Env-to-module connectors (RLlib's ``ray.rllib.connectors.env_to_module``): what a runner
does to each new observation before the module acts on it. The built-ins that change
observations are in ``observation_builtins.py``; RLlib's default pipeline pieces are
no-ops here (rlmesh's runner batches observations, states and previous actions itself)."""

from __future__ import annotations

from typing import Any

from rlmesh.connectors._noop import noop_connector
from rlmesh.connectors.connector_pipeline_v2 import ConnectorPipelineV2
from rlmesh.connectors.connector_v2 import ConnectorV2
from rlmesh.connectors.env_to_module.observation_builtins import (
    FlattenObservations, FrameStackingEnvToModule, MeanStdFilter, PrevActionsPrevRewards)


class EnvToModulePipeline(ConnectorPipelineV2):
    """The runner's pipeline (RLlib's name)."""


class SingleAgentObservationPreprocessor(ConnectorV2):
    """RLlib's base for a per-observation change: override ``preprocess(observation,
    episode)`` (and ``recompute_output_observation_space``); each episode's last
    observation is replaced by what it returns."""

    def preprocess(self, observation: Any, episode: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__} must define preprocess")

    def __call__(self, *, rl_module, batch, episodes, explore=None, shared_data=None,
                 metrics=None, **kwargs):
        for ep in self.single_agent_episode_iterator(episodes):
            ep.set_observations(new_data=self.preprocess(ep.get_observations(-1), ep),
                                at_indices=-1)
        return batch


ObservationPreprocessor = SingleAgentObservationPreprocessor  # an older RLlib name

_DONE = "rlmesh's runner batches each step's observations, states and previous actions itself"
AddObservationsFromEpisodesToBatch = noop_connector("AddObservationsFromEpisodesToBatch", _DONE)
AddStatesFromEpisodesToBatch = noop_connector("AddStatesFromEpisodesToBatch", _DONE)
AddTimeDimToBatchAndZeroPad = noop_connector("AddTimeDimToBatchAndZeroPad", _DONE)
BatchIndividualItems = noop_connector("BatchIndividualItems", _DONE)
AgentToModuleMapping = noop_connector("AgentToModuleMapping", _DONE)
NumpyToTensor = noop_connector("NumpyToTensor", "the policy converts arrays itself")

__all__ = ["ConnectorV2", "EnvToModulePipeline", "FlattenObservations", "PrevActionsPrevRewards",
           "MeanStdFilter", "FrameStackingEnvToModule", "SingleAgentObservationPreprocessor",
           "ObservationPreprocessor", "AddObservationsFromEpisodesToBatch",
           "AddStatesFromEpisodesToBatch", "AddTimeDimToBatchAndZeroPad", "BatchIndividualItems",
           "AgentToModuleMapping", "NumpyToTensor"]
