"""Sampling of multi-agent envs, as plain code tested without sockets: each step one
``compute_actions`` per policy over all its agents in all envs, a trajectory per agent
(joining and leaving mid-episode), and per-policy time-major fragments built from them."""

from __future__ import annotations

import inspect
import itertools
import logging
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from rlmesh.callbacks import Callbacks, Episode, hook_arguments, runner_metrics_logger
from rlmesh.env.multi_agent_env import ALL
from rlmesh.env.multi_agent_episode import MultiAgentEpisode as RLlibMultiAgentEpisode
from rlmesh.env.registry import actions_for_env
from rlmesh.policy.policy import Policy
from rlmesh.rl.columns import Columns, space_layout
from rlmesh.rl.nested_spaces import is_nested, to_column
from rlmesh.roles.runner_policy import call_actions

if TYPE_CHECKING:
    from rlmesh.config.base import AlgorithmConfig

log = logging.getLogger(__name__)


class UnknownPolicyError(ValueError):
    """The policy mapping function named a policy id that is not configured."""


class MultiAgentEpisode(RLlibMultiAgentEpisode, Episode):
    """One episode of a multi-agent env: what ``Episode`` holds (summed over agents) plus
    each agent's return and policy; the object ``policy_mapping_fn`` receives. RLlib's new
    stack's ``MultiAgentEpisode`` too (``agent_episodes``, ``get_observations(-1)`` by agent,
    ``module_for``), its per-agent history kept where callbacks read it (``agent_history``)."""

    __slots__ = ("agent_rewards", "policy_for")
    per_agent = True  # last_observation_for(agent_id) looks the agent up

    def __init__(self, env_index: int, episode_id: int, observation: Any = None,
                 info: dict | None = None, *, history: bool = False) -> None:
        Episode.__init__(self, env_index, episode_id, observation, info)
        self._multi_init(None, None, None)
        self.agent_history = history  # Episode's own (single-agent) lists stay off
        self.agent_rewards: dict[Any, float] = {}
        self.policy_for: dict[Any, str] = {}  # agent id -> policy id, fixed for the episode

    @property
    def last_observation(self) -> Any:  # by agent id; the history is in agent_episodes
        return self._last_obs

    @last_observation.setter
    def last_observation(self, observation: Any) -> None:
        self._last_obs = observation

    def module_for(self, agent_id: Any) -> Any:
        return self.policy_for.get(agent_id)

    def __len__(self) -> int:
        return self.length

    def get_return(self, include_hanging_rewards: bool = False) -> float:
        return self.total_reward

    def _by_agent(self, what: str, indices: Any, agent_ids: Any, **kwargs: Any) -> dict:
        if not self.agent_history:
            raise RuntimeError(
                "this episode keeps no step history (only last_observation and the other "
                "last_*): the samplers keep it where callbacks or connectors are configured")
        for aid, episode in self.agent_episodes.items():  # policies are mapped after the reset
            if episode.module_id is None:
                episode.module_id = self.policy_for.get(aid)
        return super()._by_agent(what, indices, agent_ids, **kwargs)

    def summary(self) -> dict[str, Any]:
        return {**super().summary(),
                "agent_returns": [[str(a), self.policy_for.get(a, ""), float(r)]
                                  for a, r in self.agent_rewards.items()]}


def map_agent(mapping_fn: Callable[..., str], agent_id: Any, episode: Any,
              known: Any, worker: Any = None) -> str:
    """``mapping_fn(agent_id, episode, worker=env_runner)`` (RLlib's signature; ``worker``
    is None in the driver), checked: a one-line UnknownPolicyError for a policy id that is
    not among ``known``."""
    pid = (mapping_fn(agent_id, episode, worker=worker) if _takes_worker(mapping_fn)
           else mapping_fn(agent_id, episode))
    if pid not in known:
        raise UnknownPolicyError(
            f"policy_mapping_fn mapped agent {agent_id!r} to policy {pid!r}, which is not "
            f"configured; the policy ids are {sorted(known)} (fix the function, or add the "
            f"policy with .multi_agent(policies=...))")
    return pid


def _takes_worker(fn: Callable[..., Any]) -> bool:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == "worker" or p.kind is p.VAR_KEYWORD for p in params)


class _Trajectory:
    """One agent's steps since its last shipped row (``owner``: its episode's id and its
    agent id, which ``output`` writes beside its steps)."""

    __slots__ = ("pid", "rows", "next_obs", "done", "owner")

    def __init__(self, pid: str, owner: tuple[int, Any] = (0, None)) -> None:
        self.pid = pid
        self.owner = owner
        self.rows: list[dict[str, Any]] = []
        self.next_obs: Any = None
        self.done = False


class _EnvSlot:
    __slots__ = ("env", "seed", "episode", "obs", "trajs", "states", "ended")

    def __init__(self, env: Any, seed: int | None) -> None:
        self.env = env
        self.seed = seed
        self.episode: MultiAgentEpisode | None = None
        self.obs: dict[Any, Any] = {}  # the agents that act next, and what they see
        self.trajs: dict[Any, _Trajectory] = {}  # open trajectories by agent id
        self.states: dict[Any, list[np.ndarray]] = {}  # recurrent state by agent id
        self.ended = False


class MultiAgentSampler:
    """Steps ``num_envs`` MultiAgentEnvs; ``policies`` by id, ``mapping_fn(agent_id,
    episode) -> policy id`` called once per agent and episode (layout: see ``sample``)."""

    def __init__(self, make_env: Callable[[int], Any], num_envs: int,
                 policies: dict[str, Policy] | None = None,
                 mapping_fn: Callable[..., str] | None = None, *,
                 seeds: list[int | None] | None = None, callbacks: Callbacks | None = None,
                 env_runner: Any = None, normalize_actions: bool = True,
                 clip_actions: bool = True, clip_rewards: bool | float | None = None,
                 **_: Any) -> None:
        seeds = seeds or [None] * num_envs
        self.slots = [_EnvSlot(make_env(i), seeds[i]) for i in range(num_envs)]
        self.policies = policies or {}
        self.mapping_fn = mapping_fn
        self.callbacks = callbacks
        self.keep_history = callbacks is not None  # episodes' get_observations(...) read it
        self.env_runner = env_runner if env_runner is not None else self
        self.metrics_logger = runner_metrics_logger(env_runner)  # the hooks' metrics_logger
        self._hook_args: list[dict[str, Any]] = [{} for _ in range(num_envs)]
        self.normalize_actions, self.clip_actions = normalize_actions, clip_actions
        self.clip_rewards = clip_rewards
        env0 = self.slots[0].env.unwrapped
        self.observation_space, self.action_space = env0.observation_space, env0.action_space
        self.counters = {"num_env_steps_sampled": 0, "num_agent_steps_sampled": 0,
                         "num_episodes": 0, "env_errors": 0, "num_nonfinite_steps_skipped": 0}
        self.used_policies: set[str] = set()
        self.stepping = -1
        self.obs_filter = None  # multi-agent runs take no observation filter
        self.policy = None  # EnvRunner sets it; unused here
        self._episode_ids = itertools.count()
        self._started = False
        self._episodes: list[dict[str, Any]] = []
        self._nested: dict[Any, Any] = {}  # agent id -> its nested obs space, or None
        #: Per policy id, the (episode id, agent id) of each column of the last fragment.
        self.last_owners: dict[str, list[tuple[int, Any]]] = {}

    @property
    def envs(self) -> list[Any]:
        return [s.env for s in self.slots]

    # --- one fragment ---

    def sample(self, num_steps: int, complete_episodes: bool = False,
               explore: bool | None = None) -> dict[str, Any]:
        """``num_steps`` steps of every env (with ``complete_episodes``: then on, stepping
        only envs whose episode has not ended, until each has). Returns
        ``policy_batches``: per policy id a time-major fragment ``[T, B]`` whose column b
        is one agent's trajectory piece, right-aligned (padding first, mask False), so
        that its last row bootstraps from ``next_obs[b]``; plus ``env_steps``,
        ``agent_steps`` and the ``episodes`` that ended."""
        if not self._started:
            for b in range(len(self.slots)):
                self._reset(b)
            self._started = True
        self._episodes = []
        pieces: dict[str, list[_Trajectory]] = {}
        env_steps = agent_steps = 0
        for t in itertools.count():
            if t == num_steps - 1:  # complete_episodes: from here on, wait for each end
                for slot in self.slots:
                    slot.ended = False
            if t >= num_steps:
                if not complete_episodes or all(s.ended for s in self.slots):
                    break
            active = [b for b, s in enumerate(self.slots)
                      if t < num_steps or not s.ended]
            n_env, n_agent = self._step(active, explore, pieces)
            env_steps += n_env
            agent_steps += n_agent
        for slot in self.slots:
            for aid, traj in slot.trajs.items():
                self._cut(slot, aid, traj, pieces)
        self.counters["num_env_steps_sampled"] += env_steps
        self.counters["num_agent_steps_sampled"] += agent_steps
        self.last_owners = {pid: [t.owner for t in ps] for pid, ps in pieces.items()}
        return {"policy_batches": {pid: self._fragment(pid, ps) for pid, ps in pieces.items()},
                "env_steps": env_steps, "agent_steps": agent_steps,
                "episodes": self._episodes, "num_env_errors": self.counters["env_errors"],
                "num_nonfinite_steps_skipped": 0}

    def _step(self, active: list[int], explore: bool | None,
              pieces: dict[str, list[_Trajectory]]) -> tuple[int, int]:
        """Every active env stepped once; (env steps, agent steps) taken."""
        groups: dict[str, list[tuple[int, Any]]] = {}
        for b in active:
            slot = self.slots[b]
            for aid in slot.obs:
                groups.setdefault(slot.trajs[aid].pid, []).append((b, aid))
        actions: dict[int, dict[Any, Any]] = {b: {} for b in active}
        for pid, members in groups.items():  # one forward pass per policy
            self._act(pid, members, explore, actions)
        agent_steps = sum(len(m) for m in groups.values())
        for b in active:
            self._step_env(b, actions[b], pieces)
        return len(active), agent_steps

    def _act(self, pid: str, members: list[tuple[int, Any]], explore: bool | None,
             actions: dict[int, dict[Any, Any]]) -> None:
        policy = self.policies[pid]
        obs = np.stack([self.slots[b].obs[aid] for b, aid in members])
        initial = policy.get_initial_state()
        states = None
        if initial:
            states = [np.stack([self.slots[b].states[aid][i] for b, aid in members])
                      for i in range(len(initial))]
        acts, state_outs, extras = call_actions(policy, obs, states, explore=explore)
        env_acts = actions_for_env(acts, policy.action_space, self.normalize_actions,
                                   self.clip_actions)
        for k, (b, aid) in enumerate(members):
            slot = self.slots[b]
            row = {Columns.OBS: obs[k], Columns.ACTIONS: acts[k], Columns.REWARDS: 0.0,
                   **{key: v[k] for key, v in extras.items()}}
            for i, s in enumerate(states or ()):
                row[Columns.state_in(i)] = s[k]
                row[Columns.state_out(i)] = slot.states[aid][i] = np.asarray(state_outs[i][k])
            slot.trajs[aid].rows.append(row)
            actions[b][aid] = env_acts[k]

    def _step_env(self, b: int, actions: dict[Any, Any],
                  pieces: dict[str, list[_Trajectory]]) -> None:
        slot = self.slots[b]
        self.stepping = b
        obs, rewards, terms, truncs, infos = slot.env.step(actions)
        self.stepping = -1
        episode = slot.episode
        episode.record_step(obs, self._add_rewards(slot, rewards), infos)
        if episode.agent_history:
            episode.add_env_step(obs, actions, rewards, infos, terminateds=terms,
                                 truncateds=truncs)
        if self.callbacks is not None:
            self.callbacks.on_episode_step(episode=episode, **self._hook_args[b])
        all_done = bool(terms.get(ALL) or truncs.get(ALL))
        slot.obs = {}
        trajs = slot.trajs
        for aid, o in obs.items():
            o = self._column(aid, o)
            if aid not in trajs:  # an agent joining
                self._join(slot, aid)
            trajs[aid].next_obs = o
            if all_done or terms.get(aid) or truncs.get(aid):
                self._end_agent(slot, aid, bool(terms.get(aid) or terms.get(ALL)), pieces)
            else:
                slot.obs[aid] = o
        if len(trajs) > len(slot.obs):  # agents that left without an observation
            for aid in [a for a in trajs if terms.get(a) or truncs.get(a)]:
                self._end_agent(slot, aid, bool(terms.get(aid)), pieces)
        if all_done:
            for aid in list(trajs):
                self._end_agent(slot, aid, bool(terms.get(ALL)), pieces)
            self._end_episode(b)
            self._reset(b)

    def _add_rewards(self, slot: _EnvSlot, rewards: dict[Any, Any]) -> float:
        """Each agent's reward onto its last action (and its episode's sum); the total."""
        total = 0.0
        agent_rewards = slot.episode.agent_rewards
        for aid, r in rewards.items():
            r = float(r)
            total += r
            agent_rewards[aid] = agent_rewards.get(aid, 0.0) + r
            traj = slot.trajs.get(aid)
            if traj is not None and traj.rows:
                traj.rows[-1][Columns.REWARDS] += self._clip_reward(r) if self.clip_rewards else r
        return total

    def _end_agent(self, slot: _EnvSlot, aid: Any, terminated: bool,
                   pieces: dict[str, list[_Trajectory]]) -> None:
        """Agent ``aid`` left: its trajectory ends (terminated, else truncated)."""
        traj = slot.trajs.pop(aid)
        slot.states.pop(aid, None)
        if not traj.rows:
            return
        if traj.next_obs is None:
            traj.next_obs = traj.rows[-1][Columns.OBS]
        traj.rows[-1][Columns.TERMINATEDS] = terminated
        traj.rows[-1][Columns.TRUNCATEDS] = not terminated
        traj.done = True
        pieces.setdefault(traj.pid, []).append(traj)

    def _cut(self, slot: _EnvSlot, aid: Any, traj: _Trajectory,
             pieces: dict[str, list[_Trajectory]]) -> None:
        """At the fragment's end: ship an open trajectory's rows. An agent waiting for its
        turn (no observation yet) keeps its last row, whose reward is not all in."""
        keep = [] if aid in slot.obs else traj.rows[-1:]
        ship = traj.rows[:len(traj.rows) - len(keep)]
        if ship:
            piece = _Trajectory(traj.pid, traj.owner)
            piece.rows = ship
            piece.next_obs = slot.obs[aid] if aid in slot.obs else keep[0][Columns.OBS]
            pieces.setdefault(traj.pid, []).append(piece)
        traj.rows = keep

    # --- fragments ---

    def _fragment(self, pid: str, trajs: list[_Trajectory]) -> dict[str, Any]:
        policy = self.policies[pid]
        T, B = max(len(t.rows) for t in trajs), len(trajs)
        first = trajs[0].rows[0]
        cols: dict[str, np.ndarray] = {}
        for key, value in first.items():
            arr = np.asarray(value)
            if arr.dtype.kind in "USO":  # a user policy's string extra output: one object a step
                arr = np.asarray(value, dtype=object)
            if key == Columns.REWARDS:
                arr = np.asarray(value, np.float32)
            cols[key] = np.zeros((T, B, *arr.shape), arr.dtype)
        obs_layout = space_layout(policy.observation_space)
        act_layout = space_layout(policy.action_space)
        cols[Columns.OBS] = np.zeros((T, B, *obs_layout.shape), obs_layout.dtype)
        cols[Columns.ACTIONS] = np.zeros((T, B, *act_layout.shape), act_layout.dtype)
        for key in (Columns.TERMINATEDS, Columns.TRUNCATEDS, Columns.MASK):
            cols[key] = np.zeros((T, B), bool)
        next_obs = np.zeros((B, *obs_layout.shape), obs_layout.dtype)
        for b, traj in enumerate(trajs):
            start = T - len(traj.rows)
            for key, col in cols.items():
                if key == Columns.MASK:
                    continue
                col[start:, b] = [row.get(key, False) for row in traj.rows]
            cols[Columns.MASK][start:, b] = True
            next_obs[b] = traj.next_obs
        return {**cols, "next_obs": next_obs, "trunc_index": np.zeros((0, 2), np.int64),
                "trunc_obs": np.zeros((0, *obs_layout.shape), obs_layout.dtype),
                "env_steps": int(cols[Columns.MASK].sum()), "policy_id": pid, "episodes": []}

    # --- episodes ---

    def _column(self, aid: Any, obs: Any) -> Any:
        """An agent's observation as its column stores it (nested spaces packed)."""
        space = self._nested.get(aid, False)
        if space is False:  # looked up once per agent id
            space = self.slots[0].env.unwrapped.get_observation_space(aid)
            space = self._nested[aid] = space if is_nested(space) else None
        return np.asarray(obs) if space is None else to_column(space, obs)

    def _join(self, slot: _EnvSlot, aid: Any) -> None:
        pid = map_agent(self.mapping_fn, aid, slot.episode, self.policies, self.env_runner)
        slot.episode.policy_for[aid] = pid
        self.used_policies.add(pid)
        slot.trajs[aid] = _Trajectory(pid, (slot.episode.episode_id, aid))
        initial = self.policies[pid].get_initial_state()
        if initial:
            slot.states[aid] = [np.asarray(s) for s in initial]

    def drop_episodes_of(self, policy_id: str) -> None:
        """Discard the running episodes in which an agent acts with ``policy_id`` (it is
        being removed): their envs start new episodes, unreported."""
        for b, slot in enumerate(self.slots):
            if slot.episode is not None and policy_id in slot.episode.policy_for.values():
                self._reset(b)

    def _reset(self, b: int) -> None:
        slot = self.slots[b]
        episode = MultiAgentEpisode(b, next(self._episode_ids), history=self.keep_history)
        if self.callbacks is not None:  # before the reset, as in the single-agent sampler
            self._hook_args[b] = hook_arguments(self, b, slot.env)
            self.callbacks.on_episode_created(episode=episode, **self._hook_args[b])
        obs, infos = slot.env.reset(seed=slot.seed)
        slot.seed = None
        episode.last_observation, episode.last_info = obs, infos or {}
        if episode.agent_history:
            episode.add_env_reset(observations=obs, infos=infos)
        slot.episode = episode
        slot.trajs, slot.states, slot.obs = {}, {}, {}
        if self.callbacks is not None:
            self.callbacks.on_episode_start(episode=slot.episode, **self._hook_args[b])
        for aid, o in obs.items():
            self._join(slot, aid)
            slot.obs[aid] = self._column(aid, o)

    def _end_episode(self, b: int) -> None:
        slot = self.slots[b]
        slot.ended = True
        if self.callbacks is not None:
            self.callbacks.on_episode_end(episode=slot.episode, **self._hook_args[b])
        self._episodes.append(slot.episode.summary())
        self.counters["num_episodes"] += 1

    def _clip_reward(self, reward: float) -> float:
        if self.clip_rewards is True:
            return float(np.sign(reward))
        if self.clip_rewards:
            return float(np.clip(reward, -self.clip_rewards, self.clip_rewards))
        return reward


def sampler_for(create: Callable[[int], Any]) -> tuple[Callable[[int], Any], type]:
    """The sampler class for the env ``create`` makes (MultiAgentSampler for a
    MultiAgentEnv, else EnvSampler), and a factory that hands out the env built to tell."""
    from rlmesh.env.multi_agent_env import is_multi_agent
    from rlmesh.roles.env_sampler import EnvSampler

    first = [create(0)]
    cls = MultiAgentSampler if is_multi_agent(first[0]) else EnvSampler

    def make(i: int) -> Any:
        return first.pop() if i == 0 and first else create(i)

    return make, cls


def bind_policies(sampler: MultiAgentSampler, policies: dict[str, Policy], config: AlgorithmConfig,
                  main_script: str | None = None) -> None:
    """The runner's policies and the config's mapping function into ``sampler``."""
    from rlmesh.config.multi_agent import mapping_function

    sampler.policies = policies
    sampler.mapping_fn = mapping_function(config, policies, main_script)
