"""The recurrent default model (``use_lstm``, ``rl/lstm_model.py``) on a flat observation, one
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
    actions. Reads ``trunk.*``, ``lstm.*``, ``pi_head.*`` (and ``log_std``) of its weights,
    and ``vf_trunk.*``, ``vf_lstm.*`` where the critic has its own (``vf_share_layers``
    False): the state is ``[h, c]``, or ``[h, c, h_vf, c_vf]`` with the critic's, each
    ``[N, lstm_cell_size]``; the critic's LSTM is stepped only for its state, which the
    learner's sequences start from."""

    def __init__(self, obs_space: gym.Space, action_space: gym.Space, model_config: dict,
                 explore: bool = True, seed: int | None = None) -> None:
        config = check_model_config(model_config)
        if not config["use_lstm"]:
            raise ValueError("NumpyLSTMPolicy computes the use_lstm model; this config has no LSTM")
        self.cell_size = int(config["lstm_cell_size"])
        self.use_prev_action = bool(config["lstm_use_prev_action"])
        self.use_prev_reward = bool(config["lstm_use_prev_reward"])
        # The weights' prefixes: the policy's trunk and LSTM, and the critic's own if it has them.
        self.prefixes = ("",) if config["vf_share_layers"] else ("", "vf_")
        discrete = isinstance(action_space, gym.spaces.Discrete)
        self._action_one_hot = np.eye(int(action_space.n), dtype=np.float32) if discrete else None
        self.prev_action_shape = () if discrete else tuple(action_space.shape)
        self._prev_action_size = (int(action_space.n) if discrete
                                  else int(np.prod(action_space.shape)))
        # The MLP's checks (flat spaces, no custom model) hold for the LSTM's encoder too.
        super().__init__(obs_space, action_space, {**model_config, "use_lstm": False}, explore,
                         seed)

    def get_initial_state(self) -> list[np.ndarray]:
        return [np.zeros(self.cell_size, np.float32)
                for _ in range(2 * len(self.prefixes))]

    def _initial_weights(self, hiddens: list[int]) -> dict[str, np.ndarray]:
        w: dict[str, np.ndarray] = {}
        size, outputs, cell = obs_size(self.obs_space), self.num_inputs, self.cell_size
        if self.free_log_std:
            outputs //= 2
            w["log_std"] = np.zeros(outputs, np.float32)
        for prefix in self.prefixes:
            width_in = size
            for i, width in enumerate(hiddens):
                w[f"{prefix}trunk.{2 * i}.weight"] = orthogonal(self.rng, width, width_in,
                                                                math.sqrt(2))
                w[f"{prefix}trunk.{2 * i}.bias"] = np.zeros(width, np.float32)
                width_in = width
            width_in += self._prev_action_size * self.use_prev_action + int(self.use_prev_reward)
            w[f"{prefix}lstm.weight_ih_l0"] = orthogonal(self.rng, 4 * cell, width_in, 1.0)
            w[f"{prefix}lstm.weight_hh_l0"] = orthogonal(self.rng, 4 * cell, cell, 1.0)
            w[f"{prefix}lstm.bias_ih_l0"] = np.zeros(4 * cell, np.float32)
            w[f"{prefix}lstm.bias_hh_l0"] = np.zeros(4 * cell, np.float32)
        w["pi_head.weight"] = orthogonal(self.rng, outputs, cell, 0.01)
        w["pi_head.bias"] = np.zeros(outputs, np.float32)
        return w

    def _load(self) -> None:
        self._branches = [self._branch(p) for p in self.prefixes]
        w = self.weights
        self._head = (np.ascontiguousarray(w["pi_head.weight"].T), w["pi_head.bias"])

    def _branch(self, prefix: str) -> tuple[list[tuple[np.ndarray, np.ndarray]], np.ndarray,
                                           np.ndarray, np.ndarray]:
        """The dense layers and LSTM weights (input, hidden, summed biases) under ``prefix``."""
        w = self.weights
        trunk = sorted(int(k.split(".")[1]) for k in w
                       if k.startswith(f"{prefix}trunk.") and k.endswith(".weight"))
        layers = [(np.ascontiguousarray(w[f"{prefix}trunk.{i}.weight"].T),
                   w[f"{prefix}trunk.{i}.bias"]) for i in trunk]
        return (layers, np.ascontiguousarray(w[f"{prefix}lstm.weight_ih_l0"].T),
                np.ascontiguousarray(w[f"{prefix}lstm.weight_hh_l0"].T),
                w[f"{prefix}lstm.bias_ih_l0"] + w[f"{prefix}lstm.bias_hh_l0"])

    def recurrent_inputs(self, obs: np.ndarray, state: list[np.ndarray],
                         prev_actions: Any = None, prev_rewards: Any = None
                         ) -> tuple[np.ndarray, list[np.ndarray]]:
        """Distribution inputs ``[N, num_inputs]`` of one step from ``state`` and the
        state after it (torch's LSTM cell: gates i, f, g, o)."""
        encoded = self._preprocess(obs)
        n = len(encoded)
        extra = []
        if self.use_prev_action:
            extra.append(self._encode_actions(prev_actions, n))
        if self.use_prev_reward:
            rewards = np.zeros(n, np.float32) if prev_rewards is None else prev_rewards
            extra.append(np.asarray(rewards, np.float32).reshape(n, 1))
        state_out: list[np.ndarray] = []
        for k, (layers, w_ih, w_hh, bias) in enumerate(self._branches):
            x = encoded
            for weight, b in layers:
                x = self.activation(x @ weight + b)
            x = np.concatenate([x, *extra], -1) if extra else x
            h, c = (np.asarray(s, np.float32).reshape(n, self.cell_size)
                    for s in state[2 * k:2 * k + 2])
            i, f, g, o = np.split(x @ w_ih + h @ w_hh + bias, 4, axis=-1)
            c = _sigmoid(f) * c + _sigmoid(i) * np.tanh(g)
            h = _sigmoid(o) * np.tanh(c)
            state_out += [h.astype(np.float32), c.astype(np.float32)]
        out = state_out[0] @ self._head[0] + self._head[1]
        if self.free_log_std:
            out = np.concatenate([out, np.broadcast_to(self.weights["log_std"], out.shape)], -1)
        return out.astype(np.float32, copy=False), state_out

    def _encode_actions(self, actions: Any, n: int) -> np.ndarray:
        if actions is None:
            return np.zeros((n, self._prev_action_size), np.float32)
        if self._action_one_hot is not None:
            return self._action_one_hot[np.asarray(actions, np.int64).reshape(-1)]
        return np.asarray(actions, np.float32).reshape(n, -1)

    def dist_inputs(self, obs: np.ndarray) -> np.ndarray:
        """One step from the initial state (as the torch model's ``forward``)."""
        zeros = np.zeros((len(obs), self.cell_size), np.float32)
        return self.recurrent_inputs(obs, [zeros] * len(self.get_initial_state()))[0]

    def step(self, obs: np.ndarray, state: list[np.ndarray], prev_actions: Any = None,
             prev_rewards: Any = None, explore: bool | None = None
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[np.ndarray]]:
        inputs, state_out = self.recurrent_inputs(obs, state, prev_actions, prev_rewards)
        return (*self.act(inputs, explore), state_out)
