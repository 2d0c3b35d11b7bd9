"""What a ``PolicyClient`` may call on the policy server (``PolicyService``), and the
checks of the chunks local-inference clients report: every call checks what it is given,
so a bad one gets an error reply and changes nothing."""

from __future__ import annotations

from typing import Any

import numpy as np

from rlmesh.client.episodes import as_batch
from rlmesh.client.http import HTTP_API_VERSION
from rlmesh.env.registry import actions_for_env, space_to_data
from rlmesh.rl.columns import Columns, check_columns, space_layout
from rlmesh.rl.spec import check_action
from rlmesh.roles.policy_checks import (ClientDataError, check_actions, check_chunk_columns,
                                        check_obs, check_reward, check_summary, counted,
                                        field_of)
from rlmesh.roles.policy_memory import check_memory_columns
from rlmesh.runtime import Actor
from rlmesh.runtime.actor import caller_id
from rlmesh.runtime.protocol import Protocol

# ``PolicyServerRunner`` (policy_server.py) is named in annotations, never imported: that
# module builds the service from this one, and an import back would be a cycle.


class PolicyService(Actor):
    """The calls a ``PolicyClient`` makes. Each checks what it is given; a bad call gets an
    error reply and changes nothing, so the server and its other clients carry on."""

    protocol = Protocol(
        calls=("server_info", "start_episode", "start_agent", "get_action", "log_action",
               "log_returns", "end_episode", "get_weights", "report_chunks"),
    )

    def __init__(self, runner: PolicyServerRunner) -> None:
        self._r = runner
        self.http_caller: str | None = None  # the HTTP front's client, during its calls

    def _caller(self) -> str:
        """The calling client: its token's or CURVE key's name, else its connection."""
        return self.http_caller or caller_id()

    def _refused(self, method: str, exc: Exception) -> None:
        self._r.rejections.count(self._caller(), field_of(exc, method))
        self._r._stats["client_errors"] += 1

    def server_info(self) -> dict[str, Any]:
        r = self._r
        return {"observation_space": space_to_data(r.observation_space),
                "action_space": space_to_data(r.action_space), "model": dict(r.config.model),
                "explore": r.config.explore, "chunk_len": r.fragment_length,
                "normalize_actions": r.config.normalize_actions and not r.squash,
                "training": r.training, "policy_version": r.version,
                "observation_filter": r.config.observation_filter,
                "policies": None if r.multi is None else sorted(r.policies),
                "http_api": HTTP_API_VERSION}

    @counted
    def start_episode(self, episode_id: str | None = None, training_enabled: bool = True) -> str:
        r = self._r
        # Silent clients' episodes go here too, not only when the driver samples: a server
        # for inference only (rlmesh serve) never samples.
        r._expire()
        if r.multi is not None:
            return r.multi.start(episode_id)
        return r.episodes.start(episode_id, bool(training_enabled) and r.training, self._caller())

    @counted
    def start_agent(self, episode_id: str, agent_id: Any, training_enabled: bool = True) -> str:
        """Agent ``agent_id`` joins multi-agent episode ``episode_id``: mapped to its policy
        (``policy_mapping_fn``); returns the agent's own episode id for the calls below."""
        r = self._r
        if r.multi is None:
            raise ClientDataError("agent_id", "this policy server serves one policy; start "
                                  "the agent's episode with start_episode")
        return r.multi.start_agent(episode_id, agent_id,
                                   bool(training_enabled) and r.training, self._caller())

    @counted
    def get_action(self, episode_id: str, observation: Any) -> Any:
        r = self._r
        policy, episodes = r.route(episode_id)
        inputs = episodes.step_inputs(episode_id)  # the episode's recurrent state, if any
        obs = r.obs_filter(check_obs(policy.observation_space, observation), r.training)
        actions, state_out, extras = policy.compute_actions(obs[None], *as_batch(inputs))
        episodes.act(episode_id, obs, actions[0], extras[Columns.ACTION_LOGP][0],
                       extras[Columns.ACTION_DIST_INPUTS][0], inputs,
                       [np.asarray(s)[0] for s in state_out])
        r._new_data.set()
        action = actions_for_env(actions[0], policy.action_space,
                                 r.config.normalize_actions and not r.squash)
        if isinstance(action, (dict, tuple, list)):  # a Tuple/Dict space's, unpacked
            return action
        return int(action) if np.ndim(action) == 0 else action

    @counted
    def log_action(self, episode_id: str, observation: Any, action: Any) -> None:
        r = self._r
        policy, episodes = r.route(episode_id)
        inputs = episodes.step_inputs(episode_id)
        obs = r.obs_filter(check_obs(policy.observation_space, observation), r.training)
        space = policy.action_space
        try:
            stored = check_action(space, action, space_layout(space).dtype)
        except (TypeError, ValueError, OverflowError) as exc:
            raise ClientDataError("action", str(exc)) from None
        check_actions(space, stored[None])
        if inputs:  # scored from the episode's state, which the logged action advances
            scored = policy.score_actions(obs[None], stored[None], *as_batch(inputs))
        else:
            scored = policy.score_actions(obs[None], stored[None])
        state_out = [scored[Columns.state_out(i)][0] for i in range(len(episodes.initial_state))]
        episodes.act(episode_id, obs, stored, scored[Columns.ACTION_LOGP][0],
                       scored[Columns.ACTION_DIST_INPUTS][0], inputs, state_out)
        r._new_data.set()

    @counted
    def log_returns(self, episode_id: str, reward: Any, info: dict | None = None) -> None:
        self._r.route(episode_id)[1].reward(episode_id, check_reward(reward, self._r.limits))

    @counted
    def end_episode(self, episode_id: str, observation: Any, truncated: bool = False) -> None:
        r = self._r
        policy, episodes = r.route(episode_id)
        episodes.get(episode_id)
        obs = r.obs_filter(check_obs(policy.observation_space, observation), r.training)
        episodes.end(episode_id, obs, bool(truncated))
        r._new_data.set()

    def get_weights(self, have_version: int) -> list[Any] | None:
        """``[version, weights, observation filter state]`` if newer than ``have_version``
        (local inference)."""
        r = self._r
        if r.multi is not None:
            raise ClientDataError("inference", "a multi-agent policy server infers remotely "
                                  "only: PolicyClient(address, inference_mode='remote')")
        if r.version <= have_version and have_version >= 0:
            return None
        return [r.version, r.policy.get_weights(), r.obs_filter.get_state()]

    @counted
    def report_chunks(self, chunks: list[dict[str, Any]], policy_version: int) -> int:
        """Chunks a local-inference client recorded; returns how many steps were taken."""
        r = self._r
        if r.multi is not None:
            raise ClientDataError("inference", "a multi-agent policy server infers remotely "
                                  "only: PolicyClient(address, inference_mode='remote')")
        if not isinstance(chunks, list):
            raise TypeError(f"chunks must be a list, got {type(chunks).__name__}")
        r.chunk_rate.take(self._caller(), len(chunks))
        checked = [_check_chunk(r, c) for c in chunks]
        if r.training:
            # Returns and lengths from the steps sent, never from the client's claim.
            sums = r.reported.settle(self._caller(), checked)
            r.reported.commit(self._caller(), sums)
            r._received_chunks(checked)
        return sum(len(c["rewards"]) for c in checked)


def _check_chunk(r: PolicyServerRunner, chunk: Any) -> dict[str, Any]:
    """A client's chunk with every column the shape and dtype the learner expects, and
    every value inside the spaces and the server's limits (``policy_checks``)."""
    if not isinstance(chunk, dict):
        raise ClientDataError("chunk", f"must be a dict, got {type(chunk).__name__}")
    eid = chunk.get("episode_id")
    if not isinstance(eid, str) or not 0 < len(eid) <= 256:
        raise ClientDataError("episode_id", f"each chunk names its episode: a string of at "
                                            f"most 256 characters, got {eid!r:.40}")
    if "obs" not in chunk:  # an episode end whose steps all went out earlier
        if np.size(chunk.get("rewards", [])):
            raise ClientDataError("chunk", "a chunk with rewards must have obs, actions, ...")
        return {"rewards": np.zeros(0, np.float32), "episode_id": eid,
                "episode": check_summary(chunk.get("episode"), r.limits)}
    missing = {"next_obs", "terminated", "truncated", "episode", "rewards"} - set(chunk)
    if missing:
        raise ClientDataError("chunk", f"lacks {sorted(missing)}")
    try:
        with np.errstate(over="ignore", invalid="ignore"):  # values turned inf: refused below
            n = len(np.asarray(chunk["rewards"]))
            specs = {k: v for k, v in r.chunk_specs().items() if k not in r.memory_specs}
            out: dict[str, Any] = check_columns(chunk, specs, n, "chunk")
            obs = r.chunk_specs()[Columns.OBS]
            out["next_obs"] = check_columns({"next_obs": [chunk["next_obs"]]}, {"next_obs": obs},
                                            1, "chunk")["next_obs"][0]
    except (TypeError, ValueError, OverflowError) as exc:
        raise ClientDataError("chunk", str(exc)) from None
    out.update(check_memory_columns(chunk, r.memory_specs, r.action_space, r.limits, n))
    check_chunk_columns(out, r.action_space, r.limits)
    out["terminated"], out["truncated"] = bool(chunk["terminated"]), bool(chunk["truncated"])
    out["episode"] = check_summary(chunk["episode"], r.limits)
    out["episode_id"] = eid
    return out
