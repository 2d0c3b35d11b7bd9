"""A recurrent policy behind a policy server: the columns its
steps add (the state read and left, the previous action and reward), ``Episodes``' options
for them, and the check of a client's columns."""

from __future__ import annotations

from typing import Any

import numpy as np

from rlmesh.rl.columns import ColumnSpec, Columns, check_columns, optional_columns
from rlmesh.roles.policy_checks import ClientDataError, ClientLimits, check_actions, finite_as


def recurrent_columns(policy: Any, action_space: Any) -> dict[str, ColumnSpec]:
    """The columns a recurrent policy's steps add: the state read and left (as
    ``get_initial_state`` shapes it) and the previous action/reward if it reads them."""
    specs = {}
    for i, s in enumerate(policy.get_initial_state()):
        s = np.asarray(s)
        specs[Columns.state_in(i)] = specs[Columns.state_out(i)] = ColumnSpec(s.shape, s.dtype)
    optional = optional_columns(action_space)
    specs.update({k: optional[k] for k in (Columns.PREV_ACTIONS, Columns.PREV_REWARDS)
                  if k in policy.view_requirements})
    return specs


def memory_options(initial_state: list[Any], specs: dict[str, ColumnSpec]) -> dict[str, Any]:
    """``Episodes``' recurrent options for a policy with these columns."""
    prev = specs.get(Columns.PREV_ACTIONS)
    return {"initial_state": initial_state,
            "prev_action": None if prev is None else np.zeros(prev.shape, prev.dtype),
            "prev_reward": Columns.PREV_REWARDS in specs}


def check_memory_columns(chunk: dict[str, Any], specs: dict[str, ColumnSpec], action_space: Any,
                         limits: ClientLimits, n: int) -> dict[str, np.ndarray]:
    """A client chunk's recurrent columns of ``specs``, each refused by its own name: a
    state the learner's LSTM cannot read, or a previous action outside the space, is an
    error here, not one inside torch."""
    out = {}
    for key, spec in specs.items():
        try:
            with np.errstate(over="ignore", invalid="ignore"):
                out.update(check_columns(chunk, {key: spec}, n, "chunk"))
        except (TypeError, ValueError, OverflowError) as exc:
            raise ClientDataError(key, f"{exc} (this server's policy is recurrent: its "
                                       f"chunks carry {sorted(specs)})") from None
        finite_as(key, out[key], spec.dtype)
    if Columns.PREV_ACTIONS in out:
        check_actions(action_space, out[Columns.PREV_ACTIONS], Columns.PREV_ACTIONS)
    if Columns.PREV_REWARDS in out:
        finite_as(Columns.PREV_REWARDS, out[Columns.PREV_REWARDS], np.dtype(np.float32),
                  limits.max_abs_reward)
    return out
