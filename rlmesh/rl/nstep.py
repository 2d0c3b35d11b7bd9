"""n-step transitions, computed once as fragments arrive: each step's discounted return over
the next n steps (fewer where its episode ends), the observation to bootstrap from, and the
discount of that bootstrap. Episodes run on across fragments, so the last n-1 steps of each
env wait for the next fragment of that env."""

from __future__ import annotations

from typing import Any

import numpy as np

from rlmesh.rl.columns import DEFAULT_POLICY_ID, Columns

STEP_KEYS = ("obs", "actions", "rewards", "terminateds", "truncateds", "next_obs")
RUNNER_Q_KEYS = ("action_q", "max_q")


def step_next_obs(fragment: dict[str, Any]) -> np.ndarray:
    """``[T, B, ...]``: the observation after each step (the next row's, the fragment's
    ``next_obs`` on the last row, the final observation at a truncation). After a
    termination it is the next row's (a reset): never bootstrapped from."""
    obs = np.asarray(fragment["obs"])
    out = np.empty_like(obs)
    out[:-1] = obs[1:]
    out[-1] = fragment["next_obs"]
    index = np.asarray(fragment["trunc_index"]).reshape(-1, 2)
    if len(index):
        out[index[:, 0], index[:, 1]] = fragment["trunc_obs"]
    return out


def nstep_transitions(steps: dict[str, np.ndarray], n: int, gamma: float, cut: bool = False
                      ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """One env's consecutive steps -> (its n-step transitions, the steps left over: those
    whose n-step window runs past the last step without the episode ending there; with
    ``cut`` none: their shorter windows bootstrap from the last step's next_obs)."""
    r = np.asarray(steps["rewards"], np.float64)
    term = np.asarray(steps["terminateds"], bool)
    done = term | np.asarray(steps["truncateds"], bool)
    size = len(r)
    i = np.arange(size)
    ret = np.zeros(size)
    k = np.zeros(size, np.int64)
    last = i.copy()
    ended = np.zeros(size, bool)
    terminated = np.zeros(size, bool)
    alive = np.ones(size, bool)
    for m in range(n):
        j = i + m
        live = alive & (j < size)
        jj = j[live]
        ret[live] += gamma ** m * r[jj]
        k[live] = m + 1
        last[live] = jj
        ended[live] = done[jj]
        terminated[live] = term[jj]
        alive = live.copy()
        alive[live] &= ~done[jj]
    complete = ended | (k == n) | cut
    keep = int(np.argmin(complete)) if not complete.all() else size  # incomplete: a tail
    out = {"obs": steps["obs"][:keep], "actions": steps["actions"][:keep],
           "rewards": ret[:keep].astype(np.float32),
           "next_obs": steps["next_obs"][last[:keep]],
           "terminateds": terminated[:keep],
           "discounts": np.where(terminated[:keep], 0.0, gamma ** k[:keep]).astype(np.float32)}
    if "max_q" in steps:  # the runner's Q-values: the TD error it would see (worker side)
        out.update(runner_td_error(steps, out, last[:keep], done[last[:keep]]))
    return out, {key: v[keep:] for key, v in steps.items()}


def runner_td_error(steps: dict[str, np.ndarray], out: dict[str, np.ndarray],
                    last: np.ndarray, last_done: np.ndarray) -> dict[str, np.ndarray]:
    """``td_error`` of each transition from the runner's own Q-values (APEX's
    worker-side priorities): r + discounts * max Q(next_obs) - Q(obs, action), the max
    taken where the runner acted on next_obs (the step after ``last``, same episode); NaN
    where it did not (a truncation, or past the steps at hand)."""
    nxt = last + 1
    seen = ~last_done & (nxt < len(steps["max_q"]))
    boot = np.full(len(last), np.nan)
    boot[seen] = steps["max_q"][nxt[seen]]
    boot[out["discounts"] == 0] = 0.0  # terminated: nothing to bootstrap
    return {"td_error": (out["rewards"] + out["discounts"] * boot
                         - steps["action_q"][:len(last)]).astype(np.float32)}


class NStepBuilder:
    """Fragments -> n-step transitions (``rl/replay.py``'s columns). Steps whose window
    is not complete are carried per (runner, policy, env) into that env's next fragment; a
    carry whose episode did not go on (the env's next valid step starts an episode: t == 0,
    or the row is invalid after an env error) is dropped and counted."""

    def __init__(self, n_step: int, gamma: float, runner_q: bool = False) -> None:
        if n_step < 1:
            raise ValueError(f"n_step must be at least 1, got {n_step}")
        self.n, self.gamma = int(n_step), float(gamma)
        # The runner's Q-values come along (action_q, max_q): transitions get td_error.
        self.keys = STEP_KEYS + (RUNNER_Q_KEYS if runner_q else ())
        self._carry: dict[tuple[Any, ...], dict[str, np.ndarray]] = {}
        self.counters = {"num_nstep_steps_dropped": 0}

    def add_fragment(self, fragment: dict[str, Any], cut: bool = False) -> dict[str, np.ndarray]:
        """``cut``: a multi-agent policy's part, whose column b is not the same agent from one
        fragment to the next: nothing is carried, windows end at the fragment's end."""
        mask = np.asarray(fragment["mask"], bool)
        if not mask.size:
            return {}
        nxt = step_next_obs(fragment)
        t_col = fragment.get(Columns.T)
        who = (fragment.get("worker_index", 0), fragment.get("policy_id", DEFAULT_POLICY_ID))
        # The runner's Q-values only where its policy shipped them (the numpy Q network).
        keys = [k for k in self.keys if k != "next_obs" and k in fragment]
        parts = []
        for b in range(mask.shape[1]):
            rows = np.flatnonzero(mask[:, b])
            steps = {k: np.asarray(fragment[k])[rows, b] for k in keys}
            steps["next_obs"] = nxt[rows, b]
            carry = self._carry.pop((*who, b), None)
            if carry is not None:
                starts_anew = (not mask[0, b]
                               or (t_col is not None and len(rows) and int(t_col[rows[0], b]) == 0))
                if starts_anew:
                    self.counters["num_nstep_steps_dropped"] += len(carry["rewards"])
                else:
                    steps = {k: np.concatenate([carry[k], steps[k]]) for k in steps
                             if k in carry}
            if not len(steps["rewards"]):
                continue
            out, tail = nstep_transitions(steps, self.n, self.gamma, cut)
            if len(tail["rewards"]):
                self._carry[(*who, b)] = tail
            parts.append(out)
        if not parts:
            return {}
        common = [k for k in parts[0] if all(k in p for p in parts)]
        return {k: np.concatenate([p[k] for p in parts]) for k in common}

    @property
    def num_pending(self) -> int:
        return sum(len(c["rewards"]) for c in self._carry.values())
