"""RLlib's default connectors whose work rlmesh does without them (it builds batches from
its fragments itself): importable, so code that names them runs, and each passes the batch
through unchanged."""

from __future__ import annotations

from typing import Any

from rlmesh.connectors.connector_v2 import ConnectorV2


def noop_connector(name: str, doc: str) -> type[ConnectorV2]:
    def __call__(self, *, rl_module, batch, episodes, explore=None, shared_data=None,
                 metrics=None, **kwargs):
        return batch

    def __init__(self, input_observation_space=None, input_action_space=None, **kwargs: Any):
        ConnectorV2.__init__(self, input_observation_space, input_action_space)

    return type(name, (ConnectorV2,), {"__doc__": f"No-op here: {doc}", "__call__": __call__,
                                       "__init__": __init__, "__module__": __name__})
