"""Observation filters (RLlib's ``observation_filter``): ``MeanStdFilter`` normalises each
observation by running statistics, ``NoFilter`` passes it through. Numpy only: runners,
the driver and the policy client all use it.

Statistics merge exactly in parallel (Chan et al.'s pairwise update of count, mean and the
sum of squared deviations), so the driver can add every runner's new observations into one
global filter and hand that back: each runner keeps ``buffer``, what it saw since it last
handed its statistics over.
"""

from __future__ import annotations

from typing import Any

import numpy as np

FILTER_NAMES = ("NoFilter", "MeanStdFilter")
CLIP = 10.0  # normalised values are clipped to [-CLIP, CLIP], as RLlib does


class RunningStat:
    """Count, mean and sum of squared deviations (M2) of the rows pushed, per element."""

    def __init__(self, shape: tuple[int, ...]) -> None:
        self.n = 0
        self.mean = np.zeros(shape, np.float64)
        self.m2 = np.zeros(shape, np.float64)

    def push(self, rows: np.ndarray) -> None:
        """Add a batch of observations ``[N, *shape]``."""
        rows = np.asarray(rows, np.float64)
        if len(rows) == 1:  # one observation (a runner's step): Welford's update, in place
            self.n += 1
            delta = rows[0] - self.mean
            self.mean += delta / self.n
            self.m2 += delta * (rows[0] - self.mean)
        elif len(rows):
            other = RunningStat(self.mean.shape)
            other.n, other.mean = len(rows), rows.mean(0)
            other.m2 = ((rows - other.mean) ** 2).sum(0)
            self.merge(other)

    def merge(self, other: "RunningStat") -> None:
        """Become the statistics of both sets of rows."""
        if other.n == 0:
            return
        n = self.n + other.n
        delta = other.mean - self.mean
        self.mean = self.mean + delta * (other.n / n)
        self.m2 = self.m2 + other.m2 + delta ** 2 * (self.n * other.n / n)
        self.n = n

    @property
    def std(self) -> np.ndarray:
        var = self.m2 / (self.n - 1) if self.n > 1 else np.ones_like(self.m2)
        return np.sqrt(np.maximum(var, 0.0))

    def copy(self) -> "RunningStat":
        out = RunningStat(self.mean.shape)
        out.n, out.mean, out.m2 = self.n, self.mean.copy(), self.m2.copy()
        return out

    def to_data(self) -> dict[str, Any]:
        return {"n": self.n, "mean": self.mean.copy(), "m2": self.m2.copy()}

    @staticmethod
    def from_data(data: dict[str, Any]) -> "RunningStat":
        mean = np.array(data["mean"], np.float64)
        out = RunningStat(mean.shape)
        out.n, out.mean, out.m2 = int(data["n"]), mean, np.array(data["m2"], np.float64)
        return out


class NoFilter:
    """Observations as they are."""

    name = "NoFilter"

    def __call__(self, obs: np.ndarray, update: bool = True) -> np.ndarray:
        return obs

    def flush(self) -> dict[str, Any] | None:
        return None

    def merge_buffer(self, data: dict[str, Any] | None) -> None:
        pass

    def get_state(self) -> dict[str, Any] | None:
        return None

    def set_state(self, data: dict[str, Any] | None) -> None:
        pass


class MeanStdFilter(NoFilter):
    """``(obs - mean) / std`` by the statistics of every observation seen so far, clipped
    to [-10, 10], as float32. ``rs`` normalises; ``buffer`` is what this copy saw since its
    last ``flush``, the part the global filter does not have yet."""

    name = "MeanStdFilter"

    def __init__(self, shape: tuple[int, ...]) -> None:
        self.shape = tuple(shape)
        self.rs = RunningStat(self.shape)
        self.buffer = RunningStat(self.shape)

    def __call__(self, obs: np.ndarray, update: bool = True) -> np.ndarray:
        """A batch ``[N, *shape]`` (or one observation) normalised; ``update`` first adds it
        to the statistics (runners), without it the statistics stay (evaluation, inference)."""
        obs = np.asarray(obs)
        rows = obs.reshape(-1, *self.shape)
        if update:
            self.rs.push(rows)
            self.buffer.push(rows)
        out = (obs - self.rs.mean) / (self.rs.std + 1e-8)
        return np.clip(out, -CLIP, CLIP).astype(np.float32)

    def flush(self) -> dict[str, Any]:
        """The new statistics since the last flush (for the driver), and a fresh buffer."""
        data, self.buffer = self.buffer.to_data(), RunningStat(self.shape)
        return data

    def merge_buffer(self, data: dict[str, Any] | None) -> None:
        """The driver's global filter takes in one runner's flushed statistics."""
        if data is not None:
            self.rs.merge(RunningStat.from_data(data))

    def get_state(self) -> dict[str, Any]:
        return self.rs.to_data()

    def set_state(self, data: dict[str, Any] | None) -> None:
        """Take the global statistics; what this copy saw since its flush (its buffer) is
        added on top, so it is neither lost here nor counted twice at the next flush."""
        if data is None:
            return
        self.rs = RunningStat.from_data(data)
        self.rs.merge(self.buffer)


def make_filter(name: str, obs_space: Any) -> NoFilter:
    """The filter ``observation_filter`` names, for observations of ``obs_space``."""
    if name == "NoFilter":
        return NoFilter()
    if name != "MeanStdFilter":
        raise ValueError(f"observation_filter {name!r} is not one of {list(FILTER_NAMES)}")
    dtype = np.dtype(getattr(obs_space, "dtype", None) or np.uint8)
    if type(obs_space).__name__ != "Box" or dtype.kind != "f":
        raise ValueError(f"observation_filter MeanStdFilter normalises float Box observations; "
                         f"the observation space is {obs_space}: use NoFilter (or a wrapper "
                         f"that turns the observations into floats)")
    return MeanStdFilter(tuple(obs_space.shape))


class ReturnNormalizer:
    """``normalize_rewards``: each env's rewards divided by the running std of its discounted
    return, then clipped to [-CLIP, CLIP] -- stable-baselines3's VecNormalize(norm_reward)
    and gymnasium's NormalizeReward, which rl-zoo's MuJoCo PPO settings assume. Statistics
    are this runner's own (one per sampler, as theirs are per process), kept in Python
    floats: a step's update costs well under a microsecond beside a MuJoCo step's ~80."""

    def __init__(self, num_envs: int, gamma: float, epsilon: float = 1e-8) -> None:
        self.gamma, self.epsilon = gamma, epsilon
        self.returns = [0.0] * num_envs
        self.n, self.mean, self.m2 = 0, 0.0, 0.0

    def __call__(self, b: int, reward: float, ended: bool) -> float:
        ret = self.returns[b] * self.gamma + reward
        self.n += 1  # Welford's update with the discounted return so far
        delta = ret - self.mean
        self.mean += delta / self.n
        self.m2 += delta * (ret - self.mean)
        self.returns[b] = 0.0 if ended else ret
        var = self.m2 / self.n if self.n > 1 else 1.0
        return max(-CLIP, min(CLIP, reward / (var + self.epsilon) ** 0.5))

    def batch(self, envs: slice, rewards: np.ndarray, ended: np.ndarray,
              skip: np.ndarray | None = None) -> np.ndarray:
        """The same for envs ``envs`` stepped together (a vector env): their returns added to
        the statistics as one batch (Chan's merge: what adding them one at a time gives),
        each reward scaled by the std after it. ``skip``: steps that only reset an env
        (next-step autoreset), left out of the statistics."""
        if not isinstance(self.returns, np.ndarray):
            self.returns = np.asarray(self.returns, np.float64)
        ret = self.returns[envs] * self.gamma + rewards
        seen = ret if skip is None else ret[~skip]
        if len(seen):
            n, mean = len(seen), float(seen.mean())
            m2 = float(((seen - mean) ** 2).sum())
            total = self.n + n
            delta = mean - self.mean
            self.m2 += m2 + delta * delta * self.n * n / total
            self.mean += delta * n / total
            self.n = total
        self.returns[envs] = np.where(ended, 0.0, ret)
        var = self.m2 / self.n if self.n > 1 else 1.0
        return np.clip(rewards / (var + self.epsilon) ** 0.5, -CLIP, CLIP).astype(np.float32)

    def reset(self, b: int) -> None:
        """Env ``b`` starts over (a discarded episode, a recreated env)."""
        self.returns[b] = 0.0
