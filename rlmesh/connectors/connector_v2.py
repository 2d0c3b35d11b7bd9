"""RLlib's ``ConnectorV2``: one step of a pipeline that turns episodes into a batch (env to
module, learner) or a module's output into the env's actions (module to env). A subclass
overrides ``__call__`` and, when it changes the observation's shape, the two
``recompute_output_*_space`` methods; the pipeline threads the spaces from one connector
to the next (``connector_pipeline_v2.py``).

In rlmesh a connector's ``episodes`` are ``rlmesh.connectors.episode`` views (RLlib's
``SingleAgentEpisode`` methods: ``get_observations``, ``set_observations``,
``get_actions``, ``get_rewards``, ``set_rewards``, ``len``), and ``batch`` is a dict of
columns: ``{"obs": ...}`` on the runner's side, ``{"actions": [B, ...]}`` from the module,
``{module_id: {column: [T, B, ...]}}`` on the learner's."""

from __future__ import annotations

from typing import Any, Callable, Iterable, Iterator

import gymnasium as gym


class ConnectorV2:
    """The base class of every connector (RLlib's signature and names)."""

    def __init__(self, input_observation_space: gym.Space | None = None,
                 input_action_space: gym.Space | None = None, **kwargs: Any) -> None:
        self._observation_space: gym.Space | None = None
        self._action_space: gym.Space | None = None
        self._input_observation_space: gym.Space | None = None
        self._input_action_space: gym.Space | None = None
        self.input_action_space = input_action_space
        self.input_observation_space = input_observation_space

    # --- spaces ---

    def recompute_output_observation_space(self, input_observation_space: gym.Space,
                                           input_action_space: gym.Space) -> gym.Space:
        """The observation space this connector's output has, given its input's; by
        default the input's (override when ``__call__`` changes the observations)."""
        return input_observation_space

    def recompute_output_action_space(self, input_observation_space: gym.Space,
                                      input_action_space: gym.Space) -> gym.Space:
        """The action space of this connector's output, given its input's; by default the
        input's."""
        return input_action_space

    def _recompute(self) -> None:
        if self._input_observation_space is None:  # spaces given later (the pipeline's)
            return
        self._observation_space = self.recompute_output_observation_space(
            self._input_observation_space, self._input_action_space)
        self._action_space = self.recompute_output_action_space(
            self._input_observation_space, self._input_action_space)

    @property
    def input_observation_space(self) -> gym.Space | None:
        return self._input_observation_space

    @input_observation_space.setter
    def input_observation_space(self, value: gym.Space | None) -> None:
        self._input_observation_space = value
        self._recompute()

    @property
    def input_action_space(self) -> gym.Space | None:
        return self._input_action_space

    @input_action_space.setter
    def input_action_space(self, value: gym.Space | None) -> None:
        self._input_action_space = value
        self._recompute()

    @property
    def observation_space(self) -> gym.Space | None:
        """The output observation space (``recompute_output_observation_space`` of the
        input's)."""
        return self._observation_space

    @property
    def action_space(self) -> gym.Space | None:
        return self._action_space

    # --- the call ---

    def __call__(self, *, rl_module: Any, batch: dict[str, Any], episodes: list[Any],
                 explore: bool | None = None, shared_data: dict | None = None,
                 metrics: Any = None, **kwargs: Any) -> Any:
        """The changed ``batch`` (it may be changed in place and returned)."""
        raise NotImplementedError(f"{type(self).__name__} must define __call__")

    # --- state (a stateful connector, MeanStdFilter, saves its statistics) ---

    def get_state(self, components: Any = None, *, not_components: Any = None,
                  **kwargs: Any) -> dict[str, Any]:
        return {}

    def set_state(self, state: dict[str, Any]) -> None:
        pass

    def reset_state(self) -> None:
        pass

    def merge_states(self, states: list[dict[str, Any]]) -> dict[str, Any]:
        """One state from several runners' (by default the first)."""
        return states[0] if states else {}

    # --- helpers a connector's __call__ uses ---

    @staticmethod
    def single_agent_episode_iterator(episodes: Iterable[Any], agents_that_stepped_only: bool = True,
                                      zip_with_batch_column: Any = None) -> Iterator[Any]:
        """Each single-agent episode (rlmesh's runners and learners give single-agent
        episodes only); with ``zip_with_batch_column`` (a list), ``(episode, item)``."""
        episodes = list(episodes)
        if zip_with_batch_column is None:
            yield from episodes
            return
        if isinstance(zip_with_batch_column, dict):  # RLlib's {(episode id,): [items]}
            items = [v for values in zip_with_batch_column.values() for v in values]
        else:
            items = list(zip_with_batch_column)
        yield from zip(episodes, items)

    @staticmethod
    def add_batch_item(batch: dict[str, Any], column: str, item_to_add: Any,
                       single_agent_episode: Any = None) -> None:
        """Append one item to ``batch[column]``: per episode, ``{(episode id,): [items]}``
        as RLlib's; without an episode, a plain list."""
        if single_agent_episode is None:
            batch.setdefault(column, []).append(item_to_add)
            return
        key = (single_agent_episode.id_,)
        batch.setdefault(column, {}).setdefault(key, []).append(item_to_add)

    @staticmethod
    def add_n_batch_items(batch: dict[str, Any], column: str, items_to_add: Any,
                          num_items: int, single_agent_episode: Any = None) -> None:
        """``num_items`` items (a list, or an array whose first axis is them)."""
        for i in range(num_items):
            ConnectorV2.add_batch_item(batch, column, items_to_add[i], single_agent_episode)

    @staticmethod
    def foreach_batch_item_change_in_place(batch: dict[str, Any], column: str | list[str],
                                           func: Callable[..., Any]) -> None:
        """``func(item, eps_id, agent_id, module_id)`` replaces each item of ``column``
        (one column, or several: then ``func`` takes and returns a tuple)."""
        columns = [column] if isinstance(column, str) else list(column)
        data = [batch[c] for c in columns]
        if all(isinstance(d, dict) for d in data):
            for key in data[0]:
                lists = [d[key] for d in data]
                for i in range(len(lists[0])):
                    items = tuple(lst[i] for lst in lists)
                    out = func(items[0] if len(items) == 1 else items, key[0], None, None)
                    for lst, value in zip(lists, (out,) if len(items) == 1 else out):
                        lst[i] = value
            return
        for i in range(len(data[0])):
            items = tuple(d[i] for d in data)
            out = func(items[0] if len(items) == 1 else items, None, None, None)
            for d, value in zip(data, (out,) if len(items) == 1 else out):
                d[i] = value

    def __repr__(self) -> str:
        return type(self).__name__
