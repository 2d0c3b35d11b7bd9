"""The recurrent default model (``use_lstm``): the default model's encoder, an LSTM over its
features (and, if asked, the previous action and reward), then the policy and value heads.
Runners step it one step at a time, batched over their envs; learners run it over padded
sequences (``rl/sequences.py``).
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from rlmesh.rl.encoders import FlatEncoder, ObsEncoder
from rlmesh.rl.layers import ACTIVATIONS, check_action_mask, free_log_std, layer_init, mlp
from rlmesh.rl.nested_spaces import is_nested, leaves
from rlmesh.rl.spec import MODEL_DEFAULTS
from rlmesh.rl.torch_spaces import unpack_tensor


class ActionEncoder(nn.Module):
    """Previous actions as their column stores them -> floats for the LSTM: each leaf of
    the action space one-hot (Discrete, MultiDiscrete) or flattened (Box, MultiBinary)."""

    def __init__(self, action_space: gym.Space) -> None:
        super().__init__()
        self.nested = is_nested(action_space)
        self.leaves = leaves(action_space)
        self.encoders = nn.ModuleList([FlatEncoder(leaf.space) for leaf in self.leaves])
        self.out_size = sum(e.out_size for e in self.encoders)

    def forward(self, actions: torch.Tensor) -> torch.Tensor:
        values = unpack_tensor(self.leaves, actions) if self.nested else {(): actions}
        return torch.cat([enc(values[leaf.path]) for leaf, enc in zip(self.leaves, self.encoders)], -1)


class RecurrentActorCritic(nn.Module):
    """obs ``[S, L, ...]`` (as the column stores them: packed records for Tuple/Dict) and
    LSTM state ``(h, c)`` of ``[S, cell]`` -> distribution inputs ``[S, L, n]``, values
    ``[S, L]`` and the state after the last step. ``forward(obs)`` is one step from the
    initial state: ``(dist_inputs [N, n], values [N])``, the shape every model gives (model
    checks, export).

    ``encoder`` is the default model's (``rl/encoders.py``: conv for images, one-hot
    discrete leaves, a Dict's leaves concatenated), then ``trunk`` (``fcnet_hiddens`` then
    ``post_fcnet_hiddens``), the LSTM (one for policy and value, as RLlib's wrapper) and
    the heads; an ``action_mask`` observation key masks the logits as in the default model.
    """

    is_recurrent = True
    optimizer_state_obsolete = False  # set when older weights were laid out anew on load

    def __init__(self, obs_space: gym.Space, action_space: gym.Space, num_outputs: int,
                 model_config: dict) -> None:
        super().__init__()
        config = {**MODEL_DEFAULTS, **model_config}
        self.obs_space, self.action_space = obs_space, action_space
        self.cell_size = int(config["lstm_cell_size"])
        self.max_seq_len = int(config["max_seq_len"])
        self.use_prev_action = bool(config["lstm_use_prev_action"])
        self.use_prev_reward = bool(config["lstm_use_prev_reward"])
        self.encoder = ObsEncoder(obs_space, config, ACTIVATIONS[config["conv_activation"]])
        self.masked = self.encoder.mask_leaf is not None
        if self.masked:
            check_action_mask(self.encoder.mask_leaf, action_space, num_outputs)
        hiddens = list(config["fcnet_hiddens"]) + list(config["post_fcnet_hiddens"])
        self.trunk, features = mlp(self.encoder.out_size, hiddens, config["fcnet_activation"])
        self.prev_action_encoder = ActionEncoder(action_space) if self.use_prev_action else None
        inputs = (features + (self.prev_action_encoder.out_size if self.use_prev_action else 0)
                  + int(self.use_prev_reward))
        self.lstm = nn.LSTM(inputs, self.cell_size, batch_first=True)
        # vf_share_layers False (the default): the value function has a trunk and an LSTM of
        # its own, as sb3-contrib's RecurrentPPO (enable_critic_lstm) and RLlib's separate
        # critic encoder; its state rides along in the model's state (entries 2 and 3).
        self.separate_critic = not bool(config["vf_share_layers"])
        if self.separate_critic:
            self.vf_trunk, _ = mlp(self.encoder.out_size, hiddens, config["fcnet_activation"])
            self.vf_lstm = nn.LSTM(inputs, self.cell_size, batch_first=True)
            self.register_load_state_dict_pre_hook(_critic_from_shared)
        num_outputs = free_log_std(self, config, action_space, num_outputs)
        self.pi_head = layer_init(nn.Linear(self.cell_size, num_outputs), gain=0.01)
        self.vf_head = layer_init(nn.Linear(self.cell_size, 1), gain=1.0)

    def get_initial_state(self) -> list[np.ndarray]:
        return [np.zeros(self.cell_size, np.float32)
                for _ in range(4 if self.separate_critic else 2)]

    def forward_seq(self, obs: torch.Tensor, state: list[torch.Tensor],
                    prev_actions: torch.Tensor | None = None,
                    prev_rewards: torch.Tensor | None = None
                    ) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]:
        s, length = obs.shape[:2]
        encoded = self.encoder(obs.flatten(0, 1))
        extra = []
        if self.use_prev_action:
            extra.append(self._prev_actions(prev_actions, s, length, encoded))
        if self.use_prev_reward:
            rewards = encoded.new_zeros(s, length) if prev_rewards is None else prev_rewards
            extra.append(rewards.to(encoded.dtype).reshape(s, length, 1))
        out, state_out = self._run_lstm(self.trunk, self.lstm, encoded, extra, state[:2],
                                        s, length)
        dist_inputs = self.pi_head(out)
        if self.free_log_std:
            dist_inputs = torch.cat([dist_inputs, self.log_std.expand_as(dist_inputs)], dim=-1)
        if self.separate_critic:
            vf_out, vf_state = self._run_lstm(self.vf_trunk, self.vf_lstm, encoded, extra,
                                              state[2:], s, length)
            state_out += vf_state
        else:
            vf_out = out
        return self.mask_logits(dist_inputs, obs), self.vf_head(vf_out).squeeze(-1), state_out

    @staticmethod
    def _run_lstm(trunk: nn.Module, lstm: nn.LSTM, encoded: torch.Tensor,
                  extra: list[torch.Tensor], state: list[torch.Tensor], s: int, length: int
                  ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        x = trunk(encoded).reshape(s, length, -1)
        if extra:
            x = torch.cat([x, *(e.to(x.dtype) for e in extra)], -1)
        h, c = (st.to(x.dtype).unsqueeze(0).contiguous() for st in state)
        out, (h, c) = lstm(x, (h, c))
        return out, [h[0], c[0]]

    def _prev_actions(self, prev: torch.Tensor | None, s: int, length: int,
                      like: torch.Tensor) -> torch.Tensor:
        if prev is None:
            return like.new_zeros(s, length, self.prev_action_encoder.out_size)
        return self.prev_action_encoder(prev.flatten(0, 1)).reshape(s, length, -1).to(like.dtype)

    def mask_logits(self, dist_inputs: torch.Tensor, obs: torch.Tensor) -> torch.Tensor:
        """As the default model's: the actions ``action_mask`` rules out at the dtype's
        minimum (``dist_inputs`` and ``obs`` of the same leading shape)."""
        if not self.masked:
            return dist_inputs
        mask = self.encoder.action_mask(obs)
        return dist_inputs.masked_fill(~mask, torch.finfo(dist_inputs.dtype).min)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        n = obs.shape[0]
        zeros = torch.zeros((n, self.cell_size), dtype=torch.float32, device=obs.device)
        dist_inputs, values, _ = self.forward_seq(obs.unsqueeze(1),
                                                  [zeros] * len(self.get_initial_state()))
        return dist_inputs[:, 0], values[:, 0]


def _critic_from_shared(module: nn.Module, state_dict: dict, prefix: str, *args: object) -> None:
    """Weights saved when one LSTM fed both heads (before the critic had its own) load into
    a model with a separate critic as copies of the shared trunk and LSTM: the same values
    and actions, each branch free to move apart from there."""
    if any(k.startswith(f"{prefix}vf_lstm.") for k in state_dict):
        return
    module.optimizer_state_obsolete = True  # TorchPolicy.set_state: Adam's moments restart
    for name in ("trunk.", "lstm."):
        for key in [k for k in state_dict if k.startswith(prefix + name)]:
            state_dict[prefix + "vf_" + key[len(prefix):]] = state_dict[key].clone()
