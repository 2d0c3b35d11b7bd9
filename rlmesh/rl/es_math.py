"""The arithmetic of evolution strategies: centered ranks, the mirrored gradient estimates of
OpenAI-ES (Salimans et al. 2017) and ARS (Mania et al. 2018), and the two optimizers that
step the flat parameter vector (Adam for ES, plain SGD for ARS). Numpy only."""

from __future__ import annotations

from typing import Any

import numpy as np

from rlmesh.rl.noise_table import NoiseTable


def centered_ranks(x: np.ndarray) -> np.ndarray:
    """Each value's rank over all of ``x``, scaled to [-0.5, 0.5]: the gradient estimate
    becomes blind to the scale of the returns and to outliers (Salimans et al., sec. 2.2)."""
    ranks = np.empty(x.size, np.float32)
    ranks[np.argsort(x.ravel(), kind="stable")] = np.arange(x.size, dtype=np.float32)
    if x.size > 1:
        ranks = ranks / (x.size - 1) - 0.5
    else:
        ranks[:] = 0.0
    return ranks.reshape(x.shape)


def weighted_noise_sum(noise: NoiseTable, indices: np.ndarray, weights: np.ndarray,
                       dim: int) -> np.ndarray:
    """``sum_i weights[i] * noise.get(indices[i], dim)``, in float64 blocks of 500 rows so the
    stacked perturbations never take much memory."""
    total = np.zeros(dim, np.float64)
    for start in range(0, len(indices), 500):
        idx, w = indices[start:start + 500], weights[start:start + 500]
        rows = np.stack([noise.get(int(i), dim) for i in idx])
        total += w.astype(np.float64) @ rows
    return total


def es_gradient(noise: NoiseTable, indices: np.ndarray, returns: np.ndarray,
                dim: int) -> np.ndarray:
    """OpenAI-ES's ascent direction from mirrored pairs: ``returns[i] = (R(theta + s e_i),
    R(theta - s e_i))``, centered-ranked over the whole batch, each pair weighted by the
    difference of its two ranks, averaged over all episodes (2 per pair)."""
    ranks = centered_ranks(np.asarray(returns, np.float64))
    return weighted_noise_sum(noise, indices, ranks[:, 0] - ranks[:, 1], dim) / ranks.size


def ars_gradient(noise: NoiseTable, indices: np.ndarray, returns: np.ndarray, dim: int,
                 top: int) -> np.ndarray:
    """ARS v2's ascent direction: only the ``top`` directions whose better side returned the
    most, each weighted by its return difference, divided by ``top`` and by the std of the
    returns used (the step adapts to the scale of the returns)."""
    returns = np.asarray(returns, np.float64)
    top = max(1, min(top, len(returns)))
    best = np.argsort(-returns.max(1), kind="stable")[:top]
    used = returns[best]
    std = used.std()
    g = weighted_noise_sum(noise, indices[best], used[:, 0] - used[:, 1], dim) / top
    return g / std if std > 1e-8 else g


class Adam:
    """Adam (Kingma and Ba 2015) on a flat vector; ``step(theta, g)`` ascends along ``g``."""

    def __init__(self, dim: int, stepsize: float, beta1: float = 0.9, beta2: float = 0.999,
                 epsilon: float = 1e-8) -> None:
        self.stepsize, self.beta1, self.beta2, self.epsilon = stepsize, beta1, beta2, epsilon
        self.m = np.zeros(dim, np.float64)
        self.v = np.zeros(dim, np.float64)
        self.t = 0

    def step(self, theta: np.ndarray, direction: np.ndarray) -> np.ndarray:
        """The new parameters after one step along ``direction`` (an ascent direction)."""
        self.t += 1
        self.m = self.beta1 * self.m + (1 - self.beta1) * direction
        self.v = self.beta2 * self.v + (1 - self.beta2) * direction ** 2
        a = self.stepsize * np.sqrt(1 - self.beta2 ** self.t) / (1 - self.beta1 ** self.t)
        return theta + a * self.m / (np.sqrt(self.v) + self.epsilon)

    def get_state(self) -> dict[str, Any]:
        return {"m": self.m.copy(), "v": self.v.copy(), "t": self.t}

    def set_state(self, state: dict[str, Any]) -> None:
        self.m = np.asarray(state["m"], np.float64).copy()
        self.v = np.asarray(state["v"], np.float64).copy()
        self.t = int(state["t"])


class SGD:
    """Plain gradient ascent, as ARS steps: ``theta + stepsize * direction``."""

    def __init__(self, dim: int, stepsize: float) -> None:
        self.stepsize = stepsize

    def step(self, theta: np.ndarray, direction: np.ndarray) -> np.ndarray:
        return theta + self.stepsize * direction

    def get_state(self) -> dict[str, Any]:
        return {}

    def set_state(self, state: dict[str, Any]) -> None:
        pass
