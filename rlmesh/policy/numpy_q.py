"""Q-learning's runner side in numpy: the Q network DQN's learner trains (``QModel``: an MLP
trunk, advantage and value branches, distributional heads) read from its weights, and
epsilon-greedy actions with epsilon scheduled by env steps. The runner process never imports
torch."""

from __future__ import annotations

import re
from typing import Any

import gymnasium as gym
import numpy as np

from rlmesh.policy.policy import Policy
from rlmesh.rl.columns import ColumnSpec, Columns
from rlmesh.rl.numpy_policy import ACTIVATIONS

#: What n-step transitions need to tell a new episode from one going on (rl/nstep.py).
STEP_INDEX = {Columns.T: ColumnSpec((), np.dtype(np.int64))}


#: APEX's per-runner epsilons (Horgan et al. 2018, RLlib's PerWorkerEpsilonGreedy).
PER_WORKER_EPS, PER_WORKER_ALPHA = 0.4, 7.0


def per_worker_epsilon(worker_index: int, num_workers: int) -> float:
    """The constant epsilon of runner ``worker_index`` (1..num_workers) of num_workers:
    0.4 ** (1 + (i / (N - 1)) * 7) with i = worker_index - 1, from 0.4 for the first runner
    down to 0.4 ** 8 for the last, so some runners explore while others play greedily."""
    i = max(0, int(worker_index) - 1)
    spread = float(num_workers - 1) if num_workers > 1 else 1.0
    return PER_WORKER_EPS ** (1 + i / spread * PER_WORKER_ALPHA)


def epsilon_at(exploration_config: dict, timestep: int, worker_index: int = 0,
               num_workers: int = 0) -> float:
    """Epsilon-greedy's epsilon after ``timestep`` env steps: linear from initial_epsilon
    to final_epsilon over epsilon_timesteps, then constant. ``PerWorkerEpsilonGreedy``:
    a runner process's constant ``per_worker_epsilon`` (the schedule in the driver's)."""
    ex = exploration_config
    if ex.get("type") == "PerWorkerEpsilonGreedy" and worker_index > 0 and num_workers > 0:
        return per_worker_epsilon(worker_index, num_workers)
    frac = min(1.0, timestep / max(1, ex["epsilon_timesteps"]))
    return float(ex["initial_epsilon"] + frac * (ex["final_epsilon"] - ex["initial_epsilon"]))


def softq_actions(q: np.ndarray, temperature: float, rng: np.random.Generator) -> np.ndarray:
    """SoftQ exploration: one draw per row from softmax(q / temperature) (Gumbel-max)."""
    return (q / temperature + rng.gumbel(size=q.shape)).argmax(-1)


def layers_of(weights: dict[str, np.ndarray], prefix: str) -> list[tuple[np.ndarray, ...]]:
    """The Linear layers ``prefix.<i>.weight/bias`` in order, as (W.T contiguous, b); noisy
    ones (``weight_mu``, ``weight_sigma``, ...) as (mu_W.T, mu_b, sigma_W.T, sigma_b)."""
    index = sorted(int(m.group(1)) for k in weights
                   if (m := re.fullmatch(rf"{re.escape(prefix)}\.(\d+)\.weight(_mu)?", k)))
    return [layer_of(weights, f"{prefix}.{i}") for i in index]


def layer_of(weights: dict[str, np.ndarray], name: str) -> tuple[np.ndarray, ...]:
    def f32(key: str, transpose: bool = False) -> np.ndarray:
        w = np.asarray(weights[f"{name}.{key}"], np.float32)
        return np.ascontiguousarray(w.T) if transpose else w
    if f"{name}.weight_mu" in weights:
        return (f32("weight_mu", True), f32("bias_mu"), f32("weight_sigma", True),
                f32("bias_sigma"))
    return f32("weight", True), f32("bias")


def scaled_noise(rng: np.random.Generator, size: int) -> np.ndarray:
    """f(x) = sign(x) sqrt(|x|) of standard normal draws (``rl/noisy.py``'s)."""
    x = rng.standard_normal(size).astype(np.float32)
    return np.sign(x) * np.sqrt(np.abs(x))


def dense(x: np.ndarray, layer: tuple[np.ndarray, ...], rng: np.random.Generator | None
          ) -> np.ndarray:
    """``x @ W + b``; a noisy layer with factorised noise from ``rng`` (None: its mean)."""
    w, b = layer[0], layer[1]
    if len(layer) == 4 and rng is not None:
        eps_in, eps_out = scaled_noise(rng, w.shape[0]), scaled_noise(rng, w.shape[1])
        w = w + layer[2] * np.outer(eps_in, eps_out)
        b = b + layer[3] * eps_out
    return x @ w + b


class NumpyQNet:
    """``QModel``'s forward pass: obs ``[N, ...]`` -> Q-values ``[N, num_actions]``; noisy
    layers draw new noise on each call given an rng, else act on their mean weights.
    Distributional weights (a ``support`` of atoms among them): Q is the mean of each
    action's softmax over the atoms."""

    def __init__(self, obs_space: gym.Space, model_config: dict) -> None:
        self.obs_space = obs_space
        self.activation = ACTIVATIONS[model_config["fcnet_activation"]]
        self._one_hot = (np.eye(int(obs_space.n), dtype=np.float32)
                         if isinstance(obs_space, gym.spaces.Discrete) else None)
        self.loaded = False

    def set_weights(self, weights: dict[str, Any]) -> None:
        self.trunk = layers_of(weights, "trunk")
        self.a_branch = layers_of(weights, "a_branch")
        self.a_head = layer_of(weights, "a_head")
        self.dueling = any(k.startswith("v_head.") for k in weights)
        self.support = (np.asarray(weights["support"], np.float32) if "support" in weights
                        else None)
        if self.dueling:
            self.v_branch = layers_of(weights, "v_branch")
            self.v_head = layer_of(weights, "v_head")
        self.loaded = True

    def __call__(self, obs: np.ndarray, rng: np.random.Generator | None = None) -> np.ndarray:
        if self._one_hot is not None:
            x = self._one_hot[np.asarray(obs, np.int64).reshape(-1) - int(self.obs_space.start)]
        else:
            x = np.asarray(obs, np.float32).reshape(len(obs), -1)
        for layer in self.trunk:
            x = self.activation(dense(x, layer, None))
        a = x
        for layer in self.a_branch:
            a = np.maximum(dense(a, layer, rng), 0.0)
        a = dense(a, self.a_head, rng)
        atoms = () if self.support is None else (len(self.support),)
        a = a.reshape(len(a), -1, *atoms)  # [N, A] or [N, A, atoms]
        if self.dueling:
            v = x
            for layer in self.v_branch:
                v = np.maximum(dense(v, layer, rng), 0.0)
            v = dense(v, self.v_head, rng).reshape(len(a), 1, *atoms)
            a = v + a - a.mean(1, keepdims=True)
        if self.support is None:
            return a
        p = np.exp(a - a.max(-1, keepdims=True))
        return (p * self.support).sum(-1) / p.sum(-1)


class NumpyQPolicy(Policy):
    """Acts epsilon-greedily on the Q-values of DQN's default model; runners only.

    Epsilon follows the run's env steps: the learner's weights carry ``_timestep`` (env
    steps sampled when they were published) and, between two publications, this runner
    counts its own steps times the number of runners."""

    view_requirements = STEP_INDEX

    def __init__(self, observation_space: gym.Space, action_space: gym.Space, config: Any) -> None:
        super().__init__(observation_space, action_space, config)
        if not isinstance(action_space, gym.spaces.Discrete):
            raise ValueError(f"NumpyQPolicy acts on a Discrete action space, got {action_space}")
        self.num_actions = int(action_space.n)
        self.net = NumpyQNet(observation_space, config.model)
        self.exploration = dict(config.exploration_config)
        # APEX: ship the Q-values the initial priorities are computed from.
        self.runner_q = bool(getattr(config, "replay_buffer_config", {}).get(
            "worker_side_prioritization", False))
        self.runners = max(1, int(config.num_env_runners))
        self.timestep = 0
        # Noisy nets explore by their noise (new each step, one draw for the step's envs).
        self.noisy = bool(getattr(config, "noisy", False))
        self.softq = self.exploration.get("type") == "SoftQ"
        self.rng = np.random.default_rng()
        self._weights: dict[str, np.ndarray] = {}

    def seed(self, seed: int | None) -> None:
        self.rng = np.random.default_rng(seed)

    @property
    def epsilon(self) -> float:
        return epsilon_at(self.exploration, self.timestep, self.worker_index,
                          self.config.num_env_runners)

    def compute_actions(self, obs_batch: np.ndarray, state_batches: Any = None,
                        prev_action_batch: Any = None, prev_reward_batch: Any = None,
                        explore: bool | None = None, timestep: int | None = None,
                        **kwargs: Any) -> tuple[np.ndarray, list[np.ndarray], dict[str, np.ndarray]]:
        n = len(obs_batch)
        explore = self.config.explore if explore is None else explore
        eps = self.epsilon if explore and not (self.noisy or self.softq) else 0.0
        q = None
        if not self.net.loaded:  # no weights yet: nothing to be greedy about
            actions = self.rng.integers(0, self.num_actions, n)
        else:
            q = self.net(obs_batch, self.rng if explore and self.noisy else None)
            actions = q.argmax(-1)
            if explore and self.softq:
                actions = softq_actions(q, self.exploration.get("temperature", 1.0), self.rng)
            elif eps > 0:
                rand = self.rng.random(n) < eps
                if rand.any():
                    actions[rand] = self.rng.integers(0, self.num_actions, int(rand.sum()))
        if explore:
            self.timestep += n * self.runners
        return actions.astype(np.int64), [], self._runner_q(q, actions) if self.runner_q else {}

    def _runner_q(self, q: np.ndarray | None, actions: np.ndarray) -> dict[str, np.ndarray]:
        """Q(obs, action) and max Q(obs), the columns APEX's worker-side priorities are
        computed from (``rl/nstep.py``); NaN before the first weights."""
        if q is None:
            nan = np.full(len(actions), np.nan, np.float32)
            return {"action_q": nan, "max_q": nan.copy()}
        return {"action_q": q[np.arange(len(actions)), actions].astype(np.float32),
                "max_q": q.max(-1).astype(np.float32)}

    def get_weights(self) -> dict[str, np.ndarray]:
        return dict(self._weights)

    def set_weights(self, weights: dict[str, Any]) -> None:
        self._weights = {k: np.asarray(v) for k, v in weights.items()}
        if "_timestep" in weights:
            self.timestep = int(np.asarray(weights["_timestep"]))
        self.net.set_weights(weights)
