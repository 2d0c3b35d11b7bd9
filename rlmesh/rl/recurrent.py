"""The recurrent default model (``use_lstm``): the default model's encoder, an LSTM over its
features (and, if asked, the previous action and reward), then the policy and value heads.
Runners step it one step at a time, batched over their envs; learners run it over padded
sequences (``rl/sequences.py``).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from rlmesh.rl.models import layer_init, mlp, preprocess_obs
from rlmesh.rl.spec import MODEL_DEFAULTS, obs_size


def prev_action_size(action_space: gym.Space) -> int:
    """Width of a previous action as the LSTM takes it: one-hot for Discrete, flat for Box."""
    if isinstance(action_space, gym.spaces.Discrete):
        return int(action_space.n)
    return int(np.prod(action_space.shape))


class RecurrentActorCritic(nn.Module):
    """obs ``[S, L, ...]`` and LSTM state ``(h, c)`` of ``[S, cell]`` -> distribution inputs
    ``[S, L, n]``, values ``[S, L]`` and the state after the last step. ``forward(obs)`` is
    one step from the initial state: ``(dist_inputs [N, n], values [N])``, the shape every
    model gives (model checks, export)."""

    is_recurrent = True

    def __init__(self, obs_space: gym.Space, action_space: gym.Space, num_outputs: int,
                 model_config: dict) -> None:
        super().__init__()
        config = {**MODEL_DEFAULTS, **model_config}
        self.obs_space, self.action_space = obs_space, action_space
        self.cell_size = int(config["lstm_cell_size"])
        self.max_seq_len = int(config["max_seq_len"])
        self.use_prev_action = bool(config["lstm_use_prev_action"])
        self.use_prev_reward = bool(config["lstm_use_prev_reward"])
        self.encoder, features = mlp(obs_size(obs_space), list(config["fcnet_hiddens"]),
                                     config["fcnet_activation"])
        inputs = (features + self.use_prev_action * prev_action_size(action_space)
                  + int(self.use_prev_reward))
        self.lstm = nn.LSTM(inputs, self.cell_size, batch_first=True)
        self.free_log_std = bool(config["free_log_std"])
        if self.free_log_std:
            num_outputs //= 2
            self.log_std = nn.Parameter(torch.zeros(num_outputs))
        self.pi_head = layer_init(nn.Linear(self.cell_size, num_outputs), gain=0.01)
        self.vf_head = layer_init(nn.Linear(self.cell_size, 1), gain=1.0)

    def get_initial_state(self) -> list[np.ndarray]:
        return [np.zeros(self.cell_size, np.float32), np.zeros(self.cell_size, np.float32)]

    def forward_seq(self, obs: torch.Tensor, state: list[torch.Tensor],
                    prev_actions: torch.Tensor | None = None,
                    prev_rewards: torch.Tensor | None = None
                    ) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]:
        s, length = obs.shape[:2]
        x = self.encoder(preprocess_obs(obs.flatten(0, 1), self.obs_space)).reshape(s, length, -1)
        parts = [x]
        if self.use_prev_action:
            parts.append(self._prev_actions(prev_actions, s, length, x))
        if self.use_prev_reward:
            rewards = x.new_zeros(s, length) if prev_rewards is None else prev_rewards
            parts.append(rewards.to(x.dtype).reshape(s, length, 1))
        h, c = (st.to(x.dtype).unsqueeze(0).contiguous() for st in state)
        out, (h, c) = self.lstm(torch.cat(parts, -1) if len(parts) > 1 else x, (h, c))
        dist_inputs = self.pi_head(out)
        if self.free_log_std:
            dist_inputs = torch.cat([dist_inputs, self.log_std.expand_as(dist_inputs)], dim=-1)
        return dist_inputs, self.vf_head(out).squeeze(-1), [h[0], c[0]]

    def _prev_actions(self, prev: torch.Tensor | None, s: int, length: int,
                      like: torch.Tensor) -> torch.Tensor:
        size = prev_action_size(self.action_space)
        if prev is None:
            return like.new_zeros(s, length, size)
        if isinstance(self.action_space, gym.spaces.Discrete):
            return F.one_hot(prev.long().reshape(s, length), size).to(like.dtype)
        return prev.reshape(s, length, size).to(like.dtype)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        n = obs.shape[0]
        zeros = obs.new_zeros((n, self.cell_size), dtype=torch.float32)
        dist_inputs, values, _ = self.forward_seq(obs.unsqueeze(1), [zeros, zeros])
        return dist_inputs[:, 0], values[:, 0]


def wants_lstm(model_config: dict) -> bool:
    return bool(model_config.get("use_lstm", False))


def check_recurrent_config(config: dict, custom: Any) -> None:
    """``use_lstm`` wraps the default model only; a custom model brings its own state."""
    if custom is not None:
        raise ValueError("use_lstm wraps the default model; a custom_model keeps its own "
                         "recurrent state (drop use_lstm or the custom_model)")
    if int(config["max_seq_len"]) < 1 or int(config["lstm_cell_size"]) < 1:
        raise ValueError(f"max_seq_len and lstm_cell_size must be at least 1, got "
                         f"{config['max_seq_len']} and {config['lstm_cell_size']}")
