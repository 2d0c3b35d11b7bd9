"""Acting from the driver in RLlib's older spellings, on ``Algorithm.compute_single_action``:
``compute_actions`` on a dict of observations, and the one warning a recurrent policy asked
for an action without its state gives."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from rlmesh.rl.columns import DEFAULT_POLICY_ID


class MissingStateWarning(UserWarning):
    """A recurrent policy asked for an action without ``state``."""


def warn_without_state(algo: Any, policy_id: str, stacklevel: int) -> None:
    """Warn, once per algorithm and policy, that a recurrent policy called without ``state``
    answers from its initial state.

    A warning, not a refusal: without state the answer is the right one for an episode's
    first step (what code that asks single questions, and RLlib scripts written so, want),
    but every later step forgets what came before and the state it moved to is dropped.
    Refusing would break those callers; saying nothing left the mistake silent."""
    warned = algo.__dict__.setdefault("_warned_without_state", set())
    if policy_id in warned:
        return
    warned.add(policy_id)
    get = "get_policy()" if policy_id == DEFAULT_POLICY_ID else f"get_policy({policy_id!r})"
    warnings.warn(
        f"policy {policy_id!r} is recurrent and was asked for an action without its state, so it "
        f"answers as at an episode's first step every time; pass state=algo.{get}"
        ".get_initial_state() at an episode's start and then the state each call returns "
        "(action, state, extra = algo.compute_single_action(obs, state=state))",
        MissingStateWarning, stacklevel=stacklevel + 1)


def compute_actions(algo: Any, observations: dict[Any, Any], state: dict[Any, Any] | None,
                    prev_action: dict[Any, Any] | None, prev_reward: dict[Any, Any] | None,
                    policy_id: str, full_fetch: bool, explore: bool | None) -> Any:
    """RLlib's old-API ``compute_actions``: ``{key: observation}`` -> ``{key: action}``, or
    with ``state`` (``{key: state}``; a key without one starts from the initial state) or
    ``full_fetch`` ``(actions, {key: state_out}, extra)``, ``extra`` each extra output
    stacked in the order of ``observations``. Each key goes through
    ``compute_single_action``."""
    if not isinstance(observations, dict):
        raise TypeError(f"compute_actions takes a dict {{key: observation}}, got a "
                        f"{type(observations).__name__}; for one observation call "
                        "algo.compute_single_action(obs)")
    for name, value in (("state", state), ("prev_action", prev_action), ("prev_reward", prev_reward)):
        if value is not None and not isinstance(value, dict):
            raise TypeError(f"compute_actions: {name} must be a dict keyed as the observations, "
                            f"got a {type(value).__name__}")
    policy = algo.get_policy(policy_id)
    if state is None and policy.is_recurrent():
        warn_without_state(algo, policy_id, stacklevel=3)
    initial = policy.get_initial_state()
    actions, states, extras = {}, {}, []
    for key, obs in observations.items():
        action, states[key], extra = algo.compute_single_action(
            obs, None if state is None else state.get(key, initial), explore=explore,
            policy_id=policy_id, prev_action=(prev_action or {}).get(key),
            prev_reward=(prev_reward or {}).get(key), full_fetch=True)
        actions[key] = action
        extras.append(extra)
    if state is None and not full_fetch:
        return actions
    names = extras[0] if extras else {}
    return actions, states, {name: np.stack([e[name] for e in extras]) for name in names}
