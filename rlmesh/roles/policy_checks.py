"""What a policy server accepts from its clients: every value checked against the spaces
(dtype, shape, bounds, finiteness as stored) and the configured limits, each refusal a
``ClientDataError`` naming the field, and the count of refusals per client and field."""

from __future__ import annotations

import functools
from collections import Counter, OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

import gymnasium as gym
import numpy as np

# One refusal class for the server's checks and the episodes it records (client/episodes.py).
from rlmesh.client.episodes import ClientDataError
from rlmesh.rl.spec import check_observation

if TYPE_CHECKING:
    from rlmesh.config.base import AlgorithmConfig

# A log-probability or distribution input past this is no policy's output: exp() of it
# overflows float32 (at 88), and one such value made PPO's importance ratio inf, its loss NaN.
MAX_ABS_DIST_VALUE = 1e3
MAX_TRACKED_CLIENTS = 256  # rejection counts kept per client; the rest are summed as "other"


@dataclass(frozen=True)
class ClientLimits:
    """The bounds a policy server holds its clients to (``policy_server_*`` settings)."""

    max_abs_reward: float = 1e6
    max_episode_steps: int = 100_000
    max_open_episodes_per_client: int = 1_000
    max_open_episodes: int = 10_000

    @classmethod
    def from_config(cls, cfg: AlgorithmConfig) -> "ClientLimits":
        return cls(cfg.policy_server_max_abs_reward, cfg.policy_server_max_episode_steps,
                   cfg.policy_server_max_open_episodes_per_client,
                   cfg.policy_server_max_open_episodes)


def finite_as(field: str, value: Any, dtype: np.dtype, bound: float | None = None,
              setting: str = "") -> np.ndarray:
    """``value`` converted to ``dtype``, refused if that makes NaN or inf (1e39 is finite as
    float64 and inf as float32) or, with ``bound``, if any |x| exceeds it (``setting``: the
    one that sets the bound, named in the refusal)."""
    arr = np.asarray(value)
    if arr.dtype.kind not in "biuf":
        raise ClientDataError(field, f"expected numbers, got {arr.dtype}")
    with np.errstate(over="ignore", invalid="ignore"):
        out = arr.astype(dtype, copy=False)
    if out.dtype.kind == "f":
        if not np.all(np.isfinite(out)):
            raise ClientDataError(field, f"has NaN or infinite values (as {out.dtype})")
        if bound is not None and out.size and float(np.max(np.abs(out))) > bound:
            raise ClientDataError(field, f"has values beyond +-{bound:g} "
                                         f"(largest {float(np.max(np.abs(out))):g})"
                                         + (f"; the server's limit is {setting}" if setting else ""))
    return out


def check_obs(space: gym.Space, value: Any, field: str = "observation") -> np.ndarray:
    """One observation as the policy takes it, finite in the space's dtype."""
    try:
        obs = check_observation(space, value)
    except (TypeError, ValueError) as exc:
        raise ClientDataError(field, str(exc)) from None
    return finite_as(field, obs, obs.dtype)


def check_reward(value: Any, limits: ClientLimits, field: str = "reward") -> float:
    """A reward (or an episode's return, with a bound ``max_episode_steps`` times larger)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ClientDataError(field, f"must be a number, got {type(value).__name__} {value!r:.40}")
    bound = limits.max_abs_reward * (limits.max_episode_steps if field.endswith("return") else 1)
    reward = float(finite_as(field, value, np.dtype(np.float32)))
    if abs(reward) > bound:
        raise ClientDataError(field, f"{reward:g} is beyond the server's limit of +-{bound:g} "
                                     f"(policy_server_max_abs_reward)")
    return reward


def check_actions(space: gym.Space, actions: np.ndarray, field: str = "actions") -> np.ndarray:
    """Stored actions (``[n, *shape]``) inside ``space``: integer spaces by their bounds (an
    action 7 of Discrete(2) crashed the loss), Box actions finite (they are stored as
    sampled, so they may lie past the bounds)."""
    if isinstance(space, gym.spaces.Discrete):
        low, high = int(space.start), int(space.start + space.n - 1)
    elif isinstance(space, gym.spaces.MultiDiscrete):
        low, high = space.start, space.start + space.nvec - 1
    elif isinstance(space, gym.spaces.MultiBinary):
        low, high = 0, 1
    else:
        return finite_as(field, actions, actions.dtype)
    if actions.size and (np.any(actions < low) or np.any(actions > high)):
        bad = actions[(actions < low) | (actions > high)].reshape(-1)[:3].tolist()
        raise ClientDataError(field, f"{bad} outside the action space {space}")
    return actions


def check_chunk_columns(chunk: dict[str, np.ndarray], action_space: gym.Space,
                        limits: ClientLimits) -> None:
    """The values of a checked chunk's columns (their dtype and shape already are)."""
    check_actions(action_space, chunk["actions"])
    finite_as("obs", chunk["obs"], chunk["obs"].dtype)
    finite_as("next_obs", chunk["next_obs"], chunk["next_obs"].dtype)
    finite_as("action_logp", chunk["action_logp"], np.dtype(np.float32), MAX_ABS_DIST_VALUE)
    finite_as("action_dist_inputs", chunk["action_dist_inputs"], np.dtype(np.float32),
              MAX_ABS_DIST_VALUE)
    finite_as("rewards", chunk["rewards"], np.dtype(np.float32), limits.max_abs_reward,
              "policy_server_max_abs_reward")
    if len(chunk["rewards"]) > limits.max_episode_steps:
        raise ClientDataError("rewards", f"{len(chunk['rewards'])} steps in one chunk, more than "
                                         f"an episode may have (policy_server_max_episode_steps)")


def check_summary(summary: Any, limits: ClientLimits) -> dict[str, Any] | None:
    """A chunk's episode summary (return, length) within the limits, or None."""
    if summary is None:
        return None
    if not isinstance(summary, dict) or not {"return", "length"} <= set(summary):
        raise ClientDataError("episode", f"must be a dict with return and length, got "
                                         f"{summary!r:.80}")
    length = summary["length"]
    if isinstance(length, bool) or not isinstance(length, (int, np.integer)) \
            or not 0 <= length <= limits.max_episode_steps:
        raise ClientDataError("episode.length", f"must be an int in [0, "
                                                f"{limits.max_episode_steps}], got {length!r:.40}")
    return {"return": check_reward(summary["return"], limits, "episode.return"),
            "length": int(length), "custom_metrics": {}}


class ReportedEpisodes:
    """What local-inference clients' chunks add up to, per (client, episode id): an ended
    episode's return and length are the sums of the steps its chunks carried, computed here.
    The end's claim is only checked against them: a claim they contradict is refused (a
    4-step chunk claiming a return of 1e9 ended a run at "episode_reward_mean >= 450"), and
    an end whose earlier steps never arrived here (a refused or evicted chunk, a restarted
    server) is not reported as an episode (``unverified``). Entries are bounded like open
    episodes: the least recently reported one goes first."""

    def __init__(self, max_open: int, max_open_per_client: int) -> None:
        self.max_open = max_open
        self.max_open_per_client = max_open_per_client
        self.sums: OrderedDict[tuple[str, str], list[float]] = OrderedDict()  # [ret, |ret|, len]
        self.by_client: dict[str, OrderedDict[str, None]] = {}
        self.unverified = 0

    def settle(self, client: str, chunks: list[dict[str, Any]]) -> dict[str, Any]:
        """Each ended chunk's summary (in place: ``chunk["episode"]``, None when unverified)
        from the sums; the new sums, for ``commit``. Raises ClientDataError, changing
        nothing, when a claim contradicts the steps."""
        pending: dict[str, list[float] | None] = {}
        for chunk in chunks:
            eid = chunk["episode_id"]
            sums = pending.get(eid) if eid in pending else self.sums.get((client, eid))
            sums = [0.0, 0.0, 0] if sums is None else list(sums)
            rewards = chunk["rewards"].astype(np.float64)
            sums[0] += float(rewards.sum())
            sums[1] += float(np.abs(rewards).sum())
            sums[2] += len(rewards)
            claim = chunk["episode"]
            pending[eid] = sums if claim is None else None  # an ended episode is forgotten
            if claim is not None:
                chunk["episode"] = self._verified(claim, sums)
                if chunk["episode"] is not None:
                    chunk["episode"]["client"] = client
        return pending

    def _verified(self, claim: dict[str, Any], sums: list[float]) -> dict[str, Any] | None:
        ret, magnitude, length = sums
        if claim["length"] > length:
            self.unverified += 1
            return None
        if claim["length"] < length:
            raise ClientDataError("episode.length", f"claims {claim['length']} steps; its "
                                                    f"chunks sent here hold {int(length)}")
        # The claim was summed by the client in float64, the rewards sent are float32.
        if abs(claim["return"] - ret) > 1e-5 * max(magnitude, 1.0):
            raise ClientDataError("episode.return", f"claims {claim['return']:g}; the rewards "
                                                    f"its chunks sent here sum to {ret:g}")
        return {"return": ret, "length": int(length), "custom_metrics": {}}

    def commit(self, client: str, pending: dict[str, Any]) -> None:
        for eid, sums in pending.items():
            key, mine = (client, eid), self.by_client.setdefault(client, OrderedDict())
            if sums is None:
                self.sums.pop(key, None)
                mine.pop(eid, None)
            else:
                self.sums[key] = sums
                self.sums.move_to_end(key)
                mine[eid] = None
                mine.move_to_end(eid)
            if len(mine) > self.max_open_per_client:
                self._forget(client, next(iter(mine)))
        if client in self.by_client and not self.by_client[client]:
            del self.by_client[client]
        while len(self.sums) > self.max_open:
            self._forget(*next(iter(self.sums)))

    def _forget(self, client: str, eid: str) -> None:
        self.sums.pop((client, eid), None)
        mine = self.by_client.get(client)
        if mine is not None:
            mine.pop(eid, None)
            if not mine:
                del self.by_client[client]


class Rejections:
    """Refused calls per client and field, for the training result."""

    def __init__(self) -> None:
        self.by_client: dict[str, Counter[str]] = {}
        self.total = 0

    def count(self, client: str, field: str) -> None:
        if client not in self.by_client and len(self.by_client) >= MAX_TRACKED_CLIENTS:
            client = "other"
        self.by_client.setdefault(client, Counter())[field] += 1
        self.total += 1

    def snapshot(self) -> dict[str, dict[str, int]]:
        return {c: dict(n) for c, n in self.by_client.items()}


def field_of(exc: Exception, method: str) -> str:
    """The field a refusal was about, for the counts."""
    if isinstance(exc, ClientDataError):
        return exc.field
    if isinstance(exc, KeyError):
        return "episode_id"
    return method


def counted(method: Callable[..., Any]) -> Callable[..., Any]:
    """A ``PolicyService`` call whose refusal (any exception) is counted for its client
    before it goes back as the error reply."""

    @functools.wraps(method)
    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except Exception as exc:
            self._refused(method.__name__, exc)
            raise

    return call

