"""RLlib's ``ConnectorPipelineV2``: connectors called in order, each one's output spaces the
next one's input spaces; itself a connector, so pipelines nest."""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from rlmesh.connectors.connector_v2 import ConnectorV2


class ConnectorPipelineV2(ConnectorV2):
    def __init__(self, input_observation_space: gym.Space | None = None,
                 input_action_space: gym.Space | None = None, *,
                 connectors: list[ConnectorV2] | None = None, **kwargs: Any) -> None:
        self.connectors: list[ConnectorV2] = []
        for c in connectors or []:
            self._check(c)
            self.connectors.append(c)
        super().__init__(input_observation_space, input_action_space, **kwargs)

    @staticmethod
    def _check(connector: Any) -> None:
        if not isinstance(connector, ConnectorV2):
            raise TypeError(f"connector {connector!r} is a {type(connector).__name__}, not a "
                            "ConnectorV2 (rlmesh.connectors.connector_v2)")

    # --- spaces threaded through ---

    def recompute_output_observation_space(self, input_observation_space, input_action_space):
        self._thread(input_observation_space, input_action_space)
        return self.connectors[-1].observation_space if self.connectors else input_observation_space

    def recompute_output_action_space(self, input_observation_space, input_action_space):
        return self.connectors[-1].action_space if self.connectors else input_action_space

    def _thread(self, obs_space: gym.Space | None, act_space: gym.Space | None) -> None:
        for c in self.connectors:
            c._input_observation_space, c._input_action_space = obs_space, act_space
            c._recompute()
            obs_space, act_space = c.observation_space, c.action_space

    def _respace(self) -> None:
        self._recompute()

    # --- the call ---

    def __call__(self, *, rl_module: Any, batch: dict[str, Any], episodes: list[Any],
                 explore: bool | None = None, shared_data: dict | None = None,
                 metrics: Any = None, **kwargs: Any) -> Any:
        shared_data = {} if shared_data is None else shared_data
        for c in self.connectors:
            out = c(rl_module=rl_module, batch=batch, episodes=episodes, explore=explore,
                    shared_data=shared_data, metrics=metrics, **kwargs)
            if out is not None:  # a connector that changed the batch in place may return None
                batch = out
        return batch

    # --- editing ---

    def _index(self, name_or_class: str | type) -> int:
        for i, c in enumerate(self.connectors):
            if (c.__class__.__name__ == name_or_class if isinstance(name_or_class, str)
                    else isinstance(c, name_or_class)):
                return i
        names = [type(c).__name__ for c in self.connectors]
        raise ValueError(f"no connector {getattr(name_or_class, '__name__', name_or_class)!r} "
                         f"in this pipeline ({names})")

    def append(self, connector: ConnectorV2) -> None:
        self._check(connector)
        self.connectors.append(connector)
        self._respace()

    def prepend(self, connector: ConnectorV2) -> None:
        self._check(connector)
        self.connectors.insert(0, connector)
        self._respace()

    def insert_before(self, name_or_class: str | type, connector: ConnectorV2) -> ConnectorV2:
        self._check(connector)
        self.connectors.insert(self._index(name_or_class), connector)
        self._respace()
        return connector

    def insert_after(self, name_or_class: str | type, connector: ConnectorV2) -> ConnectorV2:
        self._check(connector)
        self.connectors.insert(self._index(name_or_class) + 1, connector)
        self._respace()
        return connector

    def remove(self, name_or_class: str | type) -> None:
        del self.connectors[self._index(name_or_class)]
        self._respace()

    def __len__(self) -> int:
        return len(self.connectors)

    def __iter__(self):
        return iter(self.connectors)

    # --- state: each connector's, by its position and class ---

    def get_state(self, components: Any = None, *, not_components: Any = None,
                  **kwargs: Any) -> dict[str, Any]:
        return {f"{i:02d}_{type(c).__name__}": c.get_state() for i, c in enumerate(self.connectors)}

    def set_state(self, state: dict[str, Any]) -> None:
        for i, c in enumerate(self.connectors):
            key = f"{i:02d}_{type(c).__name__}"
            if key in state:
                c.set_state(state[key])

    def reset_state(self) -> None:
        for c in self.connectors:
            c.reset_state()

    def merge_states(self, states: list[dict[str, Any]]) -> dict[str, Any]:
        out = {}
        for i, c in enumerate(self.connectors):
            key = f"{i:02d}_{type(c).__name__}"
            own = [s[key] for s in states if key in s]
            if own:
                out[key] = c.merge_states(own)
        return out

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(map(repr, self.connectors))})"
