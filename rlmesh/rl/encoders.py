"""The default model's observation encoder: one encoder per leaf of the observation space
(conv stack for images, one-hot for Discrete and MultiDiscrete, floats for MultiBinary,
flattened Box vectors), their outputs concatenated into one feature vector. An
``action_mask`` leaf is not encoded; ``action_mask`` hands it to the model's logits.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from rlmesh.rl.nested_spaces import Leaf, is_nested, leaf_layout, leaves
from rlmesh.rl.spec import ACTION_MASK, conv_filters, default_conv_filters, image_shape
from rlmesh.rl.torch_spaces import unpack_tensor


class ConvEncoder(nn.Module):
    """An image ``[N, *shape]`` (HWC, CHW, or HW) -> conv stack -> flattened features.
    uint8 pixels are scaled to [0, 1]."""

    def __init__(self, space: gym.Space, filters: list, activation: type[nn.Module]):
        super().__init__()
        self.chw = image_shape(space)
        self.obs_ndim = len(space.shape)
        self.channels_last = len(space.shape) == 3 and tuple(space.shape) != self.chw
        self.scale = 1.0 / 255.0 if space.dtype == np.uint8 else 1.0
        layers: list[nn.Module] = []
        c, h, w = self.chw
        for out_channels, (kh, kw), stride in conv_filters(filters):
            h, w = (h - kh) // stride + 1, (w - kw) // stride + 1
            if h < 1 or w < 1:
                raise ValueError(f"conv_filters {filters} shrink the image of shape "
                                 f"{tuple(space.shape)} below 1x1; use smaller kernels or strides")
            conv = nn.Conv2d(c, out_channels, (kh, kw), stride)
            nn.init.orthogonal_(conv.weight, np.sqrt(2))
            nn.init.zeros_(conv.bias)
            layers += [conv, activation()]
            c = out_channels
        self.net = nn.Sequential(*layers, nn.Flatten())
        self.out_size = c * h * w

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        lead = x.shape[:x.ndim - self.obs_ndim]
        x = x.reshape(-1, *x.shape[len(lead):])
        if self.channels_last:
            x = x.permute(0, 3, 1, 2)
        # Channels-last memory (a view for HWC frames, a uint8 copy for CHW ones): oneDNN's
        # convolutions run a Nature-CNN step 1.3-1.5x faster so on the CPU than on NCHW.
        x = x.reshape(-1, *self.chw).contiguous(memory_format=torch.channels_last)
        if x.dtype != torch.float32:  # uint8 frames: one float copy, scaled in place
            x = x.float().mul_(self.scale)
        elif self.scale != 1.0:
            x = x * self.scale
        return self.net(x).reshape(*lead, -1)


class FlatEncoder(nn.Module):
    """A non-image leaf as floats: Discrete and MultiDiscrete one-hot, Box and MultiBinary
    flattened. No parameters."""

    def __init__(self, space: gym.Space):
        super().__init__()
        self.space = space
        shape, _ = leaf_layout(space)
        self.event_dims = len(shape)
        if isinstance(space, gym.spaces.Discrete):
            self.out_size = int(space.n)
        elif isinstance(space, gym.spaces.MultiDiscrete):
            self.out_size = int(np.sum(space.nvec))
        else:
            self.out_size = int(np.prod(shape))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        space = self.space
        if isinstance(space, gym.spaces.Discrete):
            return F.one_hot(x.long() - int(space.start), int(space.n)).float()
        if isinstance(space, gym.spaces.MultiDiscrete):
            lead = x.shape[:x.ndim - self.event_dims]
            x = (x.long() - torch.as_tensor(space.start, device=x.device)).reshape(*lead, -1)
            nvec = np.asarray(space.nvec).reshape(-1)
            return torch.cat([F.one_hot(x[..., i], int(n)).float() for i, n in enumerate(nvec)], -1)
        return x.reshape(*x.shape[:x.ndim - self.event_dims], -1).float()


def leaf_encoder(leaf: Leaf, config: dict, activation: type[nn.Module]) -> nn.Module:
    if image_shape(leaf.space) is not None:
        filters = config["conv_filters"] or default_conv_filters(leaf.space)
        return ConvEncoder(leaf.space, filters, activation)
    return FlatEncoder(leaf.space)


class ObsEncoder(nn.Module):
    """Raw observations as the column stores them (packed records for Tuple/Dict) ->
    features ``[N, out_size]``: each leaf encoded, the encodings concatenated."""

    def __init__(self, obs_space: gym.Space, config: dict, activation: type[nn.Module]):
        super().__init__()
        self.nested = is_nested(obs_space)
        try:
            self.all_leaves = leaves(obs_space)
            self.mask_leaf = next((leaf for leaf in self.all_leaves if leaf.path == (ACTION_MASK,)), None)
            self.leaves = [leaf for leaf in self.all_leaves if leaf is not self.mask_leaf]
            self.encoders = nn.ModuleList([leaf_encoder(leaf, config, activation) for leaf in self.leaves])
        except ValueError as e:
            raise ValueError(f"the default model cannot encode observation space {obs_space}: {e}; "
                             f"or write a custom_model (docs/models.md)") from None
        self.out_size = sum(e.out_size for e in self.encoders)

    def unpack(self, obs: torch.Tensor) -> dict[tuple, torch.Tensor]:
        return unpack_tensor(self.all_leaves, obs) if self.nested else {(): obs}

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        if not self.nested:
            return self.encoders[0](obs)
        values = self.unpack(obs)
        return torch.cat([enc(values[leaf.path]) for leaf, enc in zip(self.leaves, self.encoders)], -1)

    def action_mask(self, obs: torch.Tensor) -> torch.Tensor | None:
        """The observations' ``action_mask`` as booleans ``[N, n]`` (None: no mask)."""
        if self.mask_leaf is None:
            return None
        mask = self.unpack(obs)[(ACTION_MASK,)]
        return mask.reshape(*mask.shape[:mask.ndim - len(self.mask_leaf.shape)], -1) > 0
