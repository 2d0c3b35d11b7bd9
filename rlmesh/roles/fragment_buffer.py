"""The ``[T, B, ...]`` columns of one fragment as an env sampler fills them, a row per step
of its envs, and the fragment built from them (``EnvSampler``, ``VectorEnvSampler``)."""

from __future__ import annotations

from typing import Any

import numpy as np

from rlmesh.rl.columns import ColumnSpec, Columns


class FragmentBuffer:
    """The ``[T, B, ...]`` columns of one fragment, a row added per step of the envs. A new
    row is padding (zeros, mask False) until an env's step fills its entry. ``specs`` are
    the declared columns (``rl/columns.py``); ``put`` adds an undeclared one (an extra
    action output) on first sight and records it in ``specs`` for the next fragments."""

    def __init__(self, num_rows: int, num_envs: int, specs: dict[str, ColumnSpec]) -> None:
        self.specs = specs
        self.obs_layout = specs[Columns.OBS]
        self.num_envs = num_envs
        self.cols = {k: self._column(max(1, num_rows), spec) for k, spec in specs.items()}
        self.rows = 0
        self.trunc: list[tuple[int, int, Any]] = []  # (t, b, final obs) of truncated steps
        # The same for a batch of envs at once (a vector env): (t, envs, their final obs).
        self.trunc_batches: list[tuple[int, np.ndarray, np.ndarray]] = []

    def _column(self, rows: int, spec: ColumnSpec) -> np.ndarray:
        return np.zeros((rows, self.num_envs, *spec.shape), spec.dtype)

    def put(self, key: str, t: int, idx: Any, values: Any) -> None:
        col = self.cols.get(key)
        if col is None:
            spec = self.specs[key] = ColumnSpec.of(values)
            col = self.cols[key] = self._column(len(self.cols[Columns.MASK]), spec)
        col[t, idx] = values

    def add_truncated(self, t: int, envs: np.ndarray, final_obs: np.ndarray) -> None:
        """Envs ``envs`` were truncated on row ``t``, their last observations ``final_obs``."""
        self.trunc_batches.append((t, np.asarray(envs), np.asarray(final_obs)))

    def add_row(self) -> int:
        capacity = len(self.cols[Columns.MASK])
        if self.rows == capacity:  # complete_episodes runs past T: grow by doubling
            self.cols = {k: np.concatenate([v, np.zeros_like(v)]) for k, v in self.cols.items()}
        self.rows += 1
        return self.rows - 1

    def build(self, next_obs: list[Any] | np.ndarray) -> dict[str, Any]:
        """The fragment: columns cut to the rows used, ``next_obs``, and the final
        observations of truncated steps before the last row (the last row's is next_obs)."""
        T = self.rows
        shape, dtype = self.obs_layout.shape, self.obs_layout.dtype
        out: dict[str, Any] = {k: v[:T] for k, v in self.cols.items()}
        out["next_obs"] = (np.array(next_obs, dtype=dtype) if isinstance(next_obs, np.ndarray)
                           else np.asarray(np.stack(next_obs), dtype=dtype))
        trunc = [(t, b, o) for t, b, o in self.trunc if t < T - 1]
        index = [np.array([(t, b) for t, b, _ in trunc], dtype=np.int64).reshape(-1, 2)]
        finals = [np.asarray(np.stack([o for _, _, o in trunc]), dtype=dtype) if trunc
                  else np.zeros((0, *shape), dtype)]
        for t, envs, obs in self.trunc_batches:
            if t < T - 1:
                index.append(np.stack([np.full(len(envs), t, np.int64),
                                       envs.astype(np.int64)], axis=1))
                finals.append(np.asarray(obs, dtype=dtype).reshape(len(envs), *shape))
        out["trunc_index"] = np.concatenate(index) if len(index) > 1 else index[0]
        out["trunc_obs"] = np.concatenate(finals) if len(finals) > 1 else finals[0]
        return out
