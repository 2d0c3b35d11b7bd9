"""The policies an env runner or policy server acts with, by policy id, and how they stay
current: built from the specs' plain data (the class a policy names for runners: the numpy
fast path for the default model, so the process never imports torch), and their weights,
which the param server pushes and a runner takes at its next fragment boundary; and how a
runner calls a policy's ``compute_actions``: by the signature its author wrote."""

from __future__ import annotations

import asyncio
import inspect
import logging
import sys
import time
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from rlmesh.policy.policy import Policy
from rlmesh.policy.policy_spec import build_policy_from_data
from rlmesh.rl.columns import DEFAULT_POLICY_ID
from rlmesh.runtime import ActorUnavailable, RemoteError
from rlmesh.wire.codec import EncodeError, encode

if TYPE_CHECKING:
    from rlmesh.config.base import AlgorithmConfig

log = logging.getLogger(__name__)

# A call to a node's weight relay: it answers at once when up; past this the runner takes its
# weights from the fallback (the param server) rather than wait for a relay being restarted.
RELAY_TIMEOUT_S = 5.0
RELAY_REPLY_TIMEOUT_S = 120.0  # a relay that answered: its weights may take long on a busy node
RELAY_RETRY_S = 30.0  # on the fallback: how often to see whether the relay answers again
FIRST_PUSH_WAIT_S = 60.0  # for the push a subscription announced, before asking instead


def make_runner_policies(policy_specs: dict[str, dict[str, Any]], config: AlgorithmConfig,
                         seed: int | None,
                         own_process: bool) -> dict[str, Policy]:
    """One acting copy per policy id, each seeded (``seed`` + its position)."""
    policies = {}
    for i, (pid, spec) in enumerate(policy_specs.items()):
        policy = build_policy_from_data(spec, config, runner=True)
        if "torch" in sys.modules and own_process:  # leave the driver's torch settings alone
            sys.modules["torch"].set_num_threads(1)
        if seed is not None and (own_process or "torch" not in type(policy).__module__):
            policy.seed(seed + i)
        policies[pid] = policy
    return policies


class VersionedPolicies:
    """A runner's policies and the version of each, kept current by the param server named
    ``self._ps_name``, which pushes newer ones (EnvRunner, PolicyServerRunner, ESRunner)."""

    policies: dict[str, Policy]
    versions: dict[str, int]
    job: Any
    _ps_name: str | None
    _ps: Any
    _stats: dict[str, Any]
    _inbox: dict[str, tuple[int, dict[str, Any]]]  # pushed, not yet taken: newest per policy
    _asks = False  # the param server cannot push to this runner (see ParamServer.subscribe)
    # Where weights come from while ``_ps_name`` (a node's relay) does not answer, and which
    # of the two this runner is subscribed to now (RunnerSpec.weights_fallback).
    _ps_fallback: str | None = None
    _ps_on: str | None = None
    _arrival: asyncio.Event | None = None  # set by each push while a first one is awaited
    _relay_retry_at = 0.0  # on the fallback: when to see again whether the relay answers
    _probe: asyncio.Task[None] | None = None  # that look, in the background

    @property
    def policy(self) -> Policy:
        """The policy of a single-agent runner (``default_policy``, or the only one)."""
        return self.policies.get(DEFAULT_POLICY_ID) or next(iter(self.policies.values()))

    @property
    def version(self) -> int:
        """The oldest version among this runner's policies (-1: none loaded yet)."""
        return min(self.versions.values(), default=-1)

    # --- weights: pushed by the param server, taken at a fragment boundary ---

    def take_weights(self, got: dict[str, list[Any]]) -> None:
        """The param server's push, ``{policy_id: [version, weights]}``: kept, newest only,
        until the next fragment boundary (``_refresh_weights``); never waited for."""
        self._stats["num_weight_pushes"] += 1
        self._keep(got)

    def _keep(self, got: dict[str, list[Any]]) -> None:
        for pid, (version, weights) in got.items():
            if version > max(self._inbox.get(pid, (-1,))[0], self.versions.get(pid, -1)):
                self._inbox[pid] = (version, weights)
        if self._arrival is not None:
            self._arrival.set()

    def _holds(self, versions: dict[str, int]) -> bool:
        """Whether this runner holds (or was pushed) at least ``versions`` of its policies."""
        return all(max(self._inbox.get(pid, (-1,))[0], self.versions.get(pid, -1)) >= v
                   for pid, v in versions.items() if pid in self.versions)

    async def _refresh_weights(self, up_to: int | None = None) -> None:
        """At a fragment boundary: the newest pushed weights of the policies this runner
        acts with (subscribing first, once: the reply brings the current weights). With
        ``up_to`` (a batch sampled ahead, ``sample_async``): none newer than that, and
        while this runner holds less, the weights of that time are asked for (a push of a
        newer version overtook them), so the batch acts with the weights the driver meant
        whether or not the update it overlaps was published meanwhile (a seeded run repeats)."""
        if self._ps_name is None:
            return
        self._retry_relay()
        if self._ps is None:
            await self._subscribe()
        elif self._asks:
            self._stats["num_weight_pulls"] += 1
            self._keep(await self._ask_weights(self._wanted_versions()))
        self._take_pushed(up_to)
        if up_to is not None and self.version < up_to:
            self._stats["num_weight_pulls"] += 1
            self._take_weights(await self._ask_weights(self._wanted_versions(), up_to))

    async def _subscribe(self, skip_relay: bool = False) -> None:
        """Subscribe where weights come from: the node's relay, or (none answering within
        RELAY_TIMEOUT_S) the fallback, the param server; then wait for the push of what is
        newer (it comes on the server's cap of pushes in flight), so the first fragment
        acts with the current weights."""
        sources = [] if skip_relay else [self._ps_name]
        if self._ps_fallback and self._ps_fallback != self._ps_name:
            sources.append(self._ps_fallback)
        for source in sources:
            last = source == sources[-1]
            wait = None if last else RELAY_TIMEOUT_S
            try:
                ps = await self.job.get_actor(source, **({} if last else {"timeout": wait}))
                reply = await ps.call("subscribe", self.name, dict(self.versions), timeout=wait)
            except (ActorUnavailable, KeyError, RemoteError) as exc:
                if last:
                    raise
                self._fell_back(source, exc, sources[-1])
                continue
            self._ps, self._ps_on = ps, source
            self._keep(reply["weights"])
            self._asks = not reply["pushed"]  # unreachable by name: ask before each fragment
            if reply["pushed"]:
                await self._first_push(reply.get("versions", {}))
            return

    async def _first_push(self, versions: dict[str, int]) -> None:
        """Until the push of ``versions`` (the server's newest when this runner subscribed)
        has come; past FIRST_PUSH_WAIT_S they are asked for instead."""
        if self._holds(versions):
            return
        arrival = self._arrival = asyncio.Event()
        deadline = time.monotonic() + FIRST_PUSH_WAIT_S
        try:
            while not self._holds(versions) and time.monotonic() < deadline:
                arrival.clear()
                try:
                    await asyncio.wait_for(arrival.wait(), deadline - time.monotonic())
                except asyncio.TimeoutError:
                    break
        finally:
            self._arrival = None
        if not self._holds(versions):
            self._stats["num_weight_pulls"] += 1
            self._keep(await self._ask_weights(self._wanted_versions()))

    def _fell_back(self, relay: str, exc: BaseException, fallback: str) -> None:
        log.warning("%s: weight relay %s does not answer (%s); taking weights from %s until "
                    "it is back", self.name, relay, str(exc).splitlines()[0], fallback)
        self._stats["num_weight_fallbacks"] = self._stats.get("num_weight_fallbacks", 0) + 1
        self._relay_retry_at = time.monotonic() + RELAY_RETRY_S

    async def _ask_weights(self, have: dict[str, int], up_to: int | None = None) -> Any:
        """``get_weights`` where this runner is subscribed. A relay is asked only once it
        answers a small call within RELAY_TIMEOUT_S (its reply may take long on a busy node,
        which is no reason to leave it); one that does not is left for the fallback
        (subscribed to at once) and the question asked there."""
        on_relay = self._ps_on == self._ps_name and self._ps_fallback not in (None, self._ps_name)
        args = (have,) if up_to is None else (have, up_to)
        if not on_relay:
            return await self._ps.call("get_weights", *args)
        try:
            await self._ps.call("version", timeout=RELAY_TIMEOUT_S)
            return await self._ps.call("get_weights", *args, timeout=RELAY_REPLY_TIMEOUT_S)
        except (ActorUnavailable, RemoteError) as exc:
            self._fell_back(self._ps_name, exc, self._ps_fallback)
            await self._subscribe(skip_relay=True)
            return await self._ps.call("get_weights", *args)

    def _retry_relay(self) -> None:
        """On the fallback: every RELAY_RETRY_S, see (in the background) whether the relay
        answers again; if so, go back to it (a relay restarted says so itself, but one that
        was only slow to answer does not)."""
        on_fallback = self._ps is not None and self._ps_on != self._ps_name
        if not on_fallback or time.monotonic() < self._relay_retry_at:
            return
        self._relay_retry_at = time.monotonic() + RELAY_RETRY_S

        async def probe() -> None:
            try:
                relay = await self.job.get_actor(self._ps_name, timeout=RELAY_TIMEOUT_S)
                await relay.call("version", timeout=RELAY_TIMEOUT_S)
            except (ActorUnavailable, KeyError, RemoteError):
                return
            await self.weights_source_back(self._ps_name)

        self._probe = asyncio.ensure_future(probe())  # held: a task nobody holds may vanish

    async def weights_source_back(self, relay: str) -> None:
        """Relay ``relay`` (re)started and serves this runner: subscribe to it at the next
        fragment boundary (a restarted relay knows no subscriber), and leave the fallback
        if this runner was taking its weights there meanwhile."""
        if relay != self._ps_name:
            return
        if self._ps is not None and self._ps_on != relay:
            fallback = self._ps
            try:
                await fallback.call("unsubscribe", self.name, timeout=RELAY_TIMEOUT_S)
            except Exception as exc:  # noqa: BLE001 - a push or two more from there is harmless
                log.debug("%s: not unsubscribed from %s: %s", self.name, self._ps_on, exc)
        self._ps = None
        self._ps_on = None

    def _take_pushed(self, up_to: int | None = None) -> None:
        """Load what was pushed for the policies wanted now (none newer than ``up_to``);
        the rest waits in the inbox."""
        if not self._inbox:
            return
        for pid in self._wanted_versions():
            entry = self._inbox.get(pid)
            if entry is not None and (up_to is None or entry[0] <= up_to):
                del self._inbox[pid]
                self._take_weights({pid: list(entry)})

    def _wanted_versions(self) -> dict[str, int]:
        """The policies whose new weights to load, with the versions held: all of them."""
        return dict(self.versions)

    def _take_weights(self, got: dict[str, list[Any]] | None) -> None:
        for pid, (version, weights) in (got or {}).items():
            if pid in self.policies and version > self.versions[pid]:
                self.set_weights(version, weights, pid)

    def set_weights(self, version: int, weights: dict[str, Any],
                    policy_id: str = DEFAULT_POLICY_ID) -> None:
        """Load ``{name: array}`` into policy ``policy_id`` as its version ``version``."""
        if policy_id not in self.policies:
            raise KeyError(f"this runner has no policy {policy_id!r} (it has {sorted(self.policies)})")
        self.policies[policy_id].set_weights(weights)
        self.versions[policy_id] = version
        self._stats["num_weight_updates"] += 1

    def get_weights(self, policy_id: str = DEFAULT_POLICY_ID) -> dict[str, np.ndarray]:
        """The weights policy ``policy_id`` acts with here (the default model's: only the
        policy trunk and head)."""
        return self.policies[policy_id].get_weights()


#: ``caller(obs, state_batches, prev_action_batch, prev_reward_batch, explore, noise=None)``.
ActionsCaller = Callable[..., tuple[Any, list[Any], dict[str, Any]]]


def actions_caller(policy: Policy) -> ActionsCaller:
    """How a runner calls ``policy.compute_actions``: positionally up to what its signature
    takes (RLlib's ``compute_actions(self, obs_batch, state_batches, prev_action_batch=None,
    ...)`` has no default for ``state_batches``), ``explore`` where it takes it. rlmesh's own
    policies are called directly; a user's has its extra outputs checked: numbers pass, other
    values that cross the wire (strings, lists, dicts) become one object per row, anything
    else is refused in one line naming the key."""
    method = policy.compute_actions
    own = type(policy).compute_actions.__module__.startswith(("rlmesh.policy.", "rlmesh.algorithms."))
    if own and type(policy).compute_actions.__module__ != "rlmesh.policy.template_calls":
        def own_call(obs: Any, s: Any, pa: Any, pr: Any, explore: Any, noise: Any = None) -> Any:
            if noise is None:
                return method(obs, s, pa, pr, explore=explore)
            return method(obs, s, pa, pr, explore=explore, noise=noise)
        return own_call
    params = list(inspect.signature(method).parameters.values())
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        positional = 4
    else:
        positional = sum(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in params)
    takes_explore = any(p.name == "explore" or p.kind is p.VAR_KEYWORD for p in params)
    name = f"{type(policy).__name__}.compute_actions"
    torch_policy = _is_torch_policy(policy)
    seen: set[str] = set()

    def call(obs: Any, states: Any, prev_actions: Any, prev_rewards: Any, explore: Any,
             noise: Any = None) -> Any:
        if noise is not None:
            raise TypeError(f"{name} does not take held noise (noise_hold_steps > 1): only "
                            "rlmesh's own policies draw from it")
        args = (obs, states, prev_actions, prev_rewards)
        if positional < 4 and any(a is not None for a in args[positional:]):
            raise TypeError(f"{name} takes {positional} inputs; this policy declares recurrent "
                            "state or previous actions/rewards: take state_batches, "
                            "prev_action_batch, prev_reward_batch")
        out = method(*args[:positional], **({"explore": explore} if takes_explore else {}))
        actions, state_outs, extras = out
        return actions, state_outs, _checked_extras(extras, seen, name, torch_policy, len(obs))

    return call


def call_actions(policy: Policy, obs: Any, states: Any = None, prev_actions: Any = None,
                 prev_rewards: Any = None, explore: Any = None,
                 noise: Any = None) -> tuple[Any, list[Any], dict[str, Any]]:
    """``policy.compute_actions`` through its ``actions_caller``, made once per policy object
    (the samplers that hold no caller of their own: vector, multi-agent, central inference);
    ``noise``: held standard-normal draws for a Gaussian policy (``takes_held_noise``)."""
    caller = policy.__dict__.get("_rlmesh_actions_caller")
    if caller is None:
        caller = policy.__dict__["_rlmesh_actions_caller"] = actions_caller(policy)
    return caller(obs, states, prev_actions, prev_rewards, explore, noise)


def takes_held_noise(policy: Policy) -> bool:
    """Whether ``policy.compute_actions`` draws a Gaussian's actions from the ``noise`` a
    sampler holds (``noise_hold_steps``): rlmesh's own ``compute_actions`` that say so; an
    override in a subclass does not inherit the mark."""
    return bool(getattr(type(policy).compute_actions, "takes_held_noise", False))


def _is_torch_policy(policy: Policy) -> bool:
    module = sys.modules.get("rlmesh.policy.torch_policy")
    return module is not None and isinstance(policy, module.TorchPolicy)


def _checked_extras(extras: dict[str, Any], seen: set[str], name: str, torch_policy: bool,
                    n: int) -> dict[str, Any]:
    """Extra outputs as sample columns: numeric arrays as they are; strings and other plain
    data as object arrays of one entry per row (checked to cross the wire on first sight)."""
    out = {}
    for key, values in (extras or {}).items():
        arr = values if isinstance(values, np.ndarray) else np.asarray(values)
        if arr.dtype.kind in "biuf":
            out[key] = arr
            continue
        if torch_policy:
            raise TypeError(f"{name}: extra output {key!r} holds {arr.dtype} values; a "
                            "TorchPolicy learns from tensors, so return numbers (or subclass "
                            "Policy, whose learn_on_batch takes any plain data)")
        rows = list(values)
        if len(rows) != n:
            raise ValueError(f"{name}: extra output {key!r} has {len(rows)} entries for {n} "
                             "observations; return one per observation")
        if key not in seen:
            try:
                encode([_plain(r) for r in rows])
            except EncodeError as exc:
                raise TypeError(f"{name}: extra output {key!r} cannot reach the learner: "
                                f"{exc}") from None
            seen.add(key)
        column = np.empty(n, dtype=object)
        for i, r in enumerate(rows):
            column[i] = _plain(r)
        out[key] = column
    return out


def _plain(value: Any) -> Any:
    """numpy's scalars as Python's (a string column's entries are numpy str_)."""
    return value.item() if isinstance(value, np.generic) else value
