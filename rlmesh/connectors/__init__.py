"""RLlib's ConnectorV2 API (``ray.rllib.connectors``) on rlmesh's runners and learners
(docs/connectors.md): ``env_to_module_connector`` / ``module_to_env_connector`` in
``.env_runners``, ``learner_connector`` in ``.training``."""

from rlmesh.connectors.connector_pipeline_v2 import ConnectorPipelineV2
from rlmesh.connectors.connector_v2 import ConnectorV2

__all__ = ["ConnectorV2", "ConnectorPipelineV2"]
