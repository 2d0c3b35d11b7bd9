"""Multi-agent episodes over a ``PolicyClient``: ``get_action`` with a dict of observations,
``log_returns`` with a dict of rewards. Each agent is an episode of its own on the server
(``<episode_id>/<agent_id>``), acting with the server's one policy, or, on a server with
``.multi_agent(policies=...)``, with the policy its ``policy_mapping_fn`` maps the agent
to; each one's trajectory is learned from as an env runner's per-agent trajectory would be."""

from __future__ import annotations

import uuid
from typing import Any

from rlmesh.client.client import PolicyClient


class MultiAgentPolicyClient:
    """RLlib's PolicyClient calls with dicts keyed by agent id. Agents may appear at any
    ``get_action`` and leave with ``end_agent``; ``end_episode`` closes those left."""

    def __init__(self, client: PolicyClient | str, **client_kwargs: Any) -> None:
        self.client = PolicyClient(client, **client_kwargs) if isinstance(client, str) else client
        self._open: dict[str, dict[Any, str]] = {}  # episode id -> agent id -> server episode
        self._training: dict[str, bool] = {}
        # A multi-agent server maps each agent to a policy: agents join through start_agent.
        self._mapped = bool((self.client.server_info or {}).get("policies"))

    def start_episode(self, episode_id: str | None = None, training_enabled: bool = True) -> str:
        # Only the agents' episodes exist on the server; this id prefixes theirs.
        episode_id = episode_id or uuid.uuid4().hex
        if episode_id in self._open:
            raise ValueError(f"episode {episode_id!r} is already open")
        if self._mapped:
            episode_id = self.client._call("start_episode", episode_id, training_enabled)
        self._open[episode_id] = {}
        self._training[episode_id] = training_enabled
        return episode_id

    def _agent_episode(self, episode_id: str, agent_id: Any) -> str:
        agents = self._open.get(episode_id)
        if agents is None:
            raise KeyError(f"unknown multi-agent episode {episode_id!r}: start it with "
                           "start_episode()")
        if agent_id not in agents and self._mapped:
            agents[agent_id] = self.client._call("start_agent", episode_id, agent_id,
                                                 self._training[episode_id])
        elif agent_id not in agents:
            agents[agent_id] = self.client.start_episode(f"{episode_id}/{agent_id}",
                                                         self._training[episode_id])
        return agents[agent_id]

    def get_action(self, episode_id: str, observations: dict[Any, Any]) -> dict[Any, Any]:
        """``{agent_id: action}`` for ``{agent_id: observation}``."""
        return {aid: self.client.get_action(self._agent_episode(episode_id, aid), obs)
                for aid, obs in observations.items()}

    def log_action(self, episode_id: str, observations: dict[Any, Any],
                   actions: dict[Any, Any]) -> None:
        for aid, obs in observations.items():
            self.client.log_action(self._agent_episode(episode_id, aid), obs, actions[aid])

    def log_returns(self, episode_id: str, rewards: dict[Any, float],
                    info: dict | None = None) -> None:
        """Each agent's reward for its last action (an agent that has not acted yet: its
        reward is dropped, as a runner drops one that comes before an agent's first step)."""
        agents = self._open.get(episode_id, {})
        for aid, reward in rewards.items():
            if aid in agents:
                self.client.log_returns(agents[aid], reward)

    def end_agent(self, episode_id: str, agent_id: Any, observation: Any,
                  truncated: bool = False) -> None:
        """Agent ``agent_id`` left the episode with its final observation."""
        server_id = self._open.get(episode_id, {}).pop(agent_id, None)
        if server_id is not None:
            self.client.end_episode(server_id, observation, truncated)

    def end_episode(self, episode_id: str, observations: dict[Any, Any],
                    truncated: bool = False) -> None:
        """Close the episode: each agent still in it with its final observation."""
        for aid in list(self._open.get(episode_id, {})):
            self.end_agent(episode_id, aid, observations[aid], truncated)
        self._open.pop(episode_id, None)
        self._training.pop(episode_id, None)

    def close(self) -> None:
        self.client.close()

    def __enter__(self) -> "MultiAgentPolicyClient":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
