"""The recurrent default model (``use_lstm``, ``rl/recurrent.py``) on a flat observation, one
step at a time in numpy: what a local-inference ``PolicyClient`` acts with, so a simulator
embedding it needs no torch. Same weights (the learner's ``state_dict``), same LSTM cell.
"""

from __future__ import annotations

import math
from typing import Any

import gymnasium as gym
import numpy as np

from rlmesh.rl.numpy_policy import NumpyPolicy, orthogonal
from rlmesh.rl.spec import check_model_config, obs_size


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * x))  # no overflow for large |x|, unlike 1 / (1 + e^-x)


class NumpyLSTMPolicy(NumpyPolicy):
    """``step(obs, state, prev_actions, prev_rewards) -> (actions, logp, dist_inputs,
    state_out)`` for ``RecurrentActorCritic`` on a flat observation with Discrete or 1-D Box
    actions. Reads ``trunk.*``, ``lstm.*``, ``pi_head.*`` (and ``log_std``) of its weights;
    the state is ``[h, c]``, each ``[N, lstm_cell_size]``."""

    def __init__(self, obs_space: gym.Space, action_space: gym.Space, model_config: dict,
                 explore: bool = True, seed: int | None = None) -> None:
        config = check_model_config(model_config)
        if not config["use_lstm"]:
            raise ValueError("NumpyLSTMPolicy computes the use_lstm model; this config has no LSTM")
        self.cell_size = int(config["lstm_cell_size"])
        self.use_prev_action = bool(config["lstm_use_prev_action"])
        self.use_prev_reward = bool(config["lstm_use_prev_reward"])
        discrete = isinstance(action_space, gym.spaces.Discrete)
        self._action_one_hot = np.eye(int(action_space.n), dtype=np.float32) if discrete else None
        self.prev_action_shape = () if discrete else tuple(action_space.shape)
        self._prev_action_size = (int(action_space.n) if discrete
                                  else int(np.prod(action_space.shape)))
        # The MLP's checks (flat spaces, no custom model) hold for the LSTM's encoder too.
        super().__init__(obs_space, action_space, {**model_config, "use_lstm": False}, explore,
                         seed)

    def get_initial_state(self) -> list[np.ndarray]:
        return [np.zeros(self.cell_size, np.float32), np.zeros(self.cell_size, np.float32)]

    def _initial_weights(self, hiddens: list[int]) -> dict[str, np.ndarray]:
        w: dict[str, np.ndarray] = {}
        size, outputs, cell = obs_size(self.obs_space), self.num_inputs, self.cell_size
        if self.free_log_std:
            outputs //= 2
            w["log_std"] = np.zeros(outputs, np.float32)
        for i, width in enumerate(hiddens):
            w[f"trunk.{2 * i}.weight"] = orthogonal(self.rng, width, size, math.sqrt(2))
            w[f"trunk.{2 * i}.bias"] = np.zeros(width, np.float32)
            size = width
        size += self._prev_action_size * self.use_prev_action + int(self.use_prev_reward)
        w["lstm.weight_ih_l0"] = orthogonal(self.rng, 4 * cell, size, 1.0)
        w["lstm.weight_hh_l0"] = orthogonal(self.rng, 4 * cell, cell, 1.0)
        w["lstm.bias_ih_l0"] = np.zeros(4 * cell, np.float32)
        w["lstm.bias_hh_l0"] = np.zeros(4 * cell, np.float32)
        w["pi_head.weight"] = orthogonal(self.rng, outputs, cell, 0.01)
        w["pi_head.bias"] = np.zeros(outputs, np.float32)
        return w

    def _load(self) -> None:
        w = self.weights
        trunk = sorted(int(k.split(".")[1]) for k in w
                       if k.startswith("trunk.") and k.endswith(".weight"))
        self._layers = [(np.ascontiguousarray(w[f"trunk.{i}.weight"].T), w[f"trunk.{i}.bias"])
                        for i in trunk]
        self._w_ih = np.ascontiguousarray(w["lstm.weight_ih_l0"].T)
        self._w_hh = np.ascontiguousarray(w["lstm.weight_hh_l0"].T)
        self._bias = w["lstm.bias_ih_l0"] + w["lstm.bias_hh_l0"]
        self._head = (np.ascontiguousarray(w["pi_head.weight"].T), w["pi_head.bias"])

    def recurrent_inputs(self, obs: np.ndarray, state: list[np.ndarray],
                         prev_actions: Any = None, prev_rewards: Any = None
                         ) -> tuple[np.ndarray, list[np.ndarray]]:
        """Distribution inputs ``[N, num_inputs]`` of one step from ``state`` and the
        state after it (torch's LSTM cell: gates i, f, g, o)."""
        x = self._preprocess(obs)
        for weight, bias in self._layers:
            x = self.activation(x @ weight + bias)
        n = len(x)
        parts = [x]
        if self.use_prev_action:
            parts.append(self._encode_actions(prev_actions, n))
        if self.use_prev_reward:
            rewards = np.zeros(n, np.float32) if prev_rewards is None else prev_rewards
            parts.append(np.asarray(rewards, np.float32).reshape(n, 1))
        x = np.concatenate(parts, -1) if len(parts) > 1 else x
        h, c = (np.asarray(s, np.float32).reshape(n, self.cell_size) for s in state)
        gates = x @ self._w_ih + h @ self._w_hh + self._bias
        i, f, g, o = np.split(gates, 4, axis=-1)
        c = _sigmoid(f) * c + _sigmoid(i) * np.tanh(g)
        h = _sigmoid(o) * np.tanh(c)
        out = h @ self._head[0] + self._head[1]
        if self.free_log_std:
            out = np.concatenate([out, np.broadcast_to(self.weights["log_std"], out.shape)], -1)
        return out.astype(np.float32, copy=False), [h.astype(np.float32), c.astype(np.float32)]

    def _encode_actions(self, actions: Any, n: int) -> np.ndarray:
        if actions is None:
            return np.zeros((n, self._prev_action_size), np.float32)
        if self._action_one_hot is not None:
            return self._action_one_hot[np.asarray(actions, np.int64).reshape(-1)]
        return np.asarray(actions, np.float32).reshape(n, -1)

    def dist_inputs(self, obs: np.ndarray) -> np.ndarray:
        """One step from the initial state (as the torch model's ``forward``)."""
        zeros = np.zeros((len(obs), self.cell_size), np.float32)
        return self.recurrent_inputs(obs, [zeros, zeros])[0]

    def step(self, obs: np.ndarray, state: list[np.ndarray], prev_actions: Any = None,
             prev_rewards: Any = None, explore: bool | None = None
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[np.ndarray]]:
        inputs, state_out = self.recurrent_inputs(obs, state, prev_actions, prev_rewards)
        return (*self.act(inputs, explore), state_out)
