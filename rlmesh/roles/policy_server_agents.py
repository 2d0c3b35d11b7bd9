"""A multi-agent policy server's agents: each agent of a client's episode mapped once to its
policy by ``policy_mapping_fn`` (the env runners' check and error), its steps kept in that
policy's ``Episodes``, and fragments shipped per policy (``policy_batches``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rlmesh.client.episodes import Episodes, fragment_from_chunks
from rlmesh.config.multi_agent import mapping_function
from rlmesh.rl.columns import ColumnSpec, Columns, action_dist_columns, space_layout
from rlmesh.roles.multi_agent_sampler import MultiAgentEpisode, map_agent
from rlmesh.roles.policy_checks import ClientDataError
from rlmesh.roles.policy_memory import recurrent_columns

import numpy as np

if TYPE_CHECKING:
    from rlmesh.config.base import AlgorithmConfig


class ServedAgents:
    """What ``PolicyServerRunner`` keeps per policy when it serves several."""

    def __init__(self, runner: Any, config: AlgorithmConfig) -> None:
        if config.observation_filter != "NoFilter":
            raise ValueError("observation_filter: a multi-agent policy server takes "
                             "'NoFilter' only")
        self.runner = runner
        self.policies = runner.policies
        self.mapping_fn = mapping_function(config, self.policies)
        self.memory = {pid: recurrent_columns(p, p.action_space)
                       for pid, p in self.policies.items()}
        self.episodes = {pid: runner._episodes_of(p, self.memory[pid])
                         for pid, p in self.policies.items()}
        self.max_open = runner.limits.max_open_episodes
        self.open: dict[str, MultiAgentEpisode] = {}  # client episode id -> what mapping sees
        self.agents: dict[str, tuple[Any, str]] = {}  # agent's episode id -> (agent id, policy)
        self._ids = 0

    def start(self, episode_id: str | None) -> str:
        """A client's multi-agent episode; its agents join with ``start_agent``."""
        self._ids += 1
        episode_id = episode_id or f"ma-{id(self):x}-{self._ids}"
        if not isinstance(episode_id, str) or len(episode_id) > 200:
            raise ClientDataError("episode_id", "must be a string of at most 200 characters")
        if len(self.open) >= self.max_open:  # the oldest's agents are closed by expiry
            self.open.pop(next(iter(self.open)))
        self.open[episode_id] = MultiAgentEpisode(0, self._ids)
        return episode_id

    def start_agent(self, episode_id: str, agent_id: Any, training: bool, client: str) -> str:
        episode = self.open.get(episode_id)
        if episode is None:
            raise KeyError(f"unknown multi-agent episode id {episode_id!r:.80}: start it with "
                           "start_episode")
        if not isinstance(agent_id, (str, int)) or isinstance(agent_id, bool):
            raise ClientDataError("agent_id", f"must be a str or int, got {agent_id!r:.40}")
        pid = episode.policy_for.get(agent_id)
        if pid is None:
            pid = map_agent(self.mapping_fn, agent_id, episode, self.policies, self.runner)
            episode.policy_for[agent_id] = pid
        agent_episode = self.episodes[pid].start(f"{episode_id}/{agent_id}", training, client)
        self.agents[agent_episode] = (agent_id, pid)
        return agent_episode

    def route(self, episode_id: Any) -> tuple[Any, Episodes]:
        entry = self.agents.get(episode_id) if isinstance(episode_id, str) else None
        if entry is None:
            raise KeyError(f"unknown agent episode id {episode_id!r:.80}: start the agent "
                           "with start_agent (MultiAgentPolicyClient does)")
        return self.policies[entry[1]], self.episodes[entry[1]]

    def chunk_specs(self, pid: str) -> dict[str, Any]:
        policy = self.policies[pid]
        inputs = policy.view_requirements[Columns.ACTION_DIST_INPUTS].shape[0]
        return {Columns.OBS: space_layout(policy.observation_space),
                Columns.ACTIONS: space_layout(policy.action_space),
                **action_dist_columns(inputs),
                Columns.REWARDS: ColumnSpec((), np.dtype(np.float32)), **self.memory[pid]}

    def fragment(self) -> dict[str, Any]:
        """Each policy's agents' steps as a fragment of its own (a MultiAgentSampler's
        layout); env steps are not known to the server: each agent step counts as one."""
        batches, episodes = {}, []
        for pid, eps in self.episodes.items():
            eps.cut_open()
            chunks = eps.take_chunks()
            part = fragment_from_chunks(chunks, self.chunk_specs(pid))
            for summary in part.pop("episodes"):
                aid, _ = self.agents.get(summary["episode_id"], (summary["episode_id"], pid))
                episodes.append({**summary, "agent_returns": [[str(aid), pid,
                                                               summary["return"]]]})
            if part["env_steps"]:
                part.update(policy_id=pid, policy_version=self.runner.versions[pid],
                            episodes=[])
                batches[pid] = part
        self._forget_closed()
        steps = sum(p["env_steps"] for p in batches.values())
        return {"policy_batches": batches, "env_steps": steps, "agent_steps": steps,
                "episodes": episodes,
                "policy_version": min((p["policy_version"] for p in batches.values()),
                                      default=self.runner.version)}

    def _forget_closed(self) -> None:
        """Agents whose episodes ended or expired, and client episodes with none open."""
        alive = {eid for eps in self.episodes.values() for eid in eps.open}
        self.agents = {k: v for k, v in self.agents.items() if k in alive}
        owners = {k.rsplit("/", 1)[0] for k in alive}
        for eid in [e for e, ep in self.open.items() if ep.policy_for and e not in owners]:
            del self.open[eid]
