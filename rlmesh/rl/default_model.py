"""The default actor-critic model (an observation encoder, policy and value trunks and
heads, action masking), and ``build_model``, which validates a ``model_config`` and builds
the default model or a user's (a class, an import path or a registered name). The model
contract is written down in docs/models.md.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from rlmesh.rl.distributions import distribution_for
from rlmesh.rl.encoders import ObsEncoder
from rlmesh.rl.layers import ACTIVATIONS, check_action_mask, free_log_std, layer_init, mlp
from rlmesh.rl.nested_spaces import build, is_nested, leaves, pack_list
from rlmesh.rl.spec import MODEL_DEFAULTS, check_model_config, custom_model_path, obs_size
from rlmesh.rl.torch_spaces import unpack_tensor



def preprocess_obs(obs: torch.Tensor, obs_space: gym.Space) -> torch.Tensor:
    """A batch of raw observations ``[N, *obs_space.shape]`` -> float32 ``[N, obs_size]``.

    Box observations are flattened; Discrete(n) ones become one-hot vectors.
    """
    if isinstance(obs_space, gym.spaces.Box):
        return obs.reshape(*obs.shape[: obs.ndim - len(obs_space.shape)], -1).float()
    if isinstance(obs_space, gym.spaces.Discrete):
        return F.one_hot(obs.long() - int(obs_space.start), int(obs_space.n)).float()
    obs_size(obs_space)  # raises the error that names the space
    raise AssertionError("unreachable")


class SmallInputLinear(nn.Linear):
    """``nn.Linear`` for a layer of a few inputs (a small observation's first layer, up to
    ``MAX_IN``): on the CPU, where the product needs gradients, its weight enters ``addmm``
    as a contiguous ``[in, out]`` copy instead of the transposed view ``F.linear`` passes.
    The same product; only the layout differs, and with it the weight gradient's kernel:
    autograd computes ``x.T @ grad`` where it computed ``grad.T @ x``, which MKL ran 3-6x
    slower for 4 inputs (an AMD EPYC: 300 against 45 us at 4096 rows; a CartPole layer's
    forward and backward 340 -> 150 us at 64 units, 1.8 -> 0.4 ms at 256). Elsewhere (no
    gradient, another device, inputs of more than 2 dims, a trace) it is ``nn.Linear``;
    its parameters and their names are the same either way."""

    MAX_IN = 8

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if (x.dim() == 2 and x.device.type == "cpu" and torch.is_grad_enabled()
                and self.weight.requires_grad and self.bias is not None
                and not torch.jit.is_tracing()):
            return torch.addmm(self.bias, x, self.weight.t().contiguous())
        return F.linear(x, self.weight, self.bias)


def small_input_layers(trunk: nn.Module | None) -> None:
    """The trunk's first layer made a ``SmallInputLinear`` where it has few inputs (the
    same module and parameters, its class changed: nothing is drawn or copied)."""
    first = trunk[0] if isinstance(trunk, nn.Sequential) and len(trunk) else None
    if type(first) is nn.Linear and first.in_features <= SmallInputLinear.MAX_IN:
        first.__class__ = SmallInputLinear


class ActorCriticMLP(nn.Module):
    """obs -> (distribution inputs ``[N, num_outputs]``, value ``[N]``).

    ``encoder`` (``rl/encoders.py``: one encoder per observation leaf, concatenated; no
    parameters for a flat Box or Discrete observation) -> ``pi_trunk`` / ``vf_trunk``
    (``fcnet_hiddens`` then ``post_fcnet_hiddens``; one shared trunk with
    ``vf_share_layers``) -> ``pi_head`` / ``vf_head``. The encoder is shared by both
    trunks. The policy head starts near zero (gain 0.01) so the first policy is close to
    uniform / zero-mean; the value head uses gain 1. An ``action_mask`` observation key
    sets the logits of invalid actions to the dtype's minimum.
    """

    def __init__(self, obs_space: gym.Space, action_space: gym.Space, num_outputs: int, model_config: dict):
        super().__init__()
        config = {**MODEL_DEFAULTS, **model_config}
        self.obs_space = obs_space
        hiddens = list(config["fcnet_hiddens"]) + list(config["post_fcnet_hiddens"])
        activation = config["fcnet_activation"]
        self.encoder = ObsEncoder(obs_space, config, ACTIVATIONS[config["conv_activation"]])
        in_size = self.encoder.out_size
        self.masked = self.encoder.mask_leaf is not None
        if self.masked:
            check_action_mask(self.encoder.mask_leaf, action_space, num_outputs)

        num_outputs = free_log_std(self, config, action_space, num_outputs)

        self.pi_trunk, pi_out = mlp(in_size, hiddens, activation)
        self.vf_trunk = None
        vf_out = pi_out
        if not config["vf_share_layers"]:
            self.vf_trunk, vf_out = mlp(in_size, hiddens, activation)
        small_input_layers(self.pi_trunk)
        small_input_layers(self.vf_trunk)
        self.pi_head = layer_init(nn.Linear(pi_out, num_outputs), gain=0.01)
        self.vf_head = layer_init(nn.Linear(vf_out, 1), gain=1.0)
        self.num_features = in_size

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        dist_inputs, value = self.heads(self.encoder(obs))
        return self.mask_logits(dist_inputs, obs), value

    def policy_inputs(self, obs: torch.Tensor) -> torch.Tensor:
        """Only the distribution inputs: what acting needs (the value trunk skipped)."""
        dist_inputs = self.pi_head(self.pi_trunk(self.encoder(obs)))
        if self.free_log_std:
            dist_inputs = torch.cat([dist_inputs, self.log_std.expand_as(dist_inputs)], dim=-1)
        return self.mask_logits(dist_inputs, obs)

    def values(self, obs: torch.Tensor) -> torch.Tensor:
        """Only the values ``[N]``: what GAE needs of the whole batch (the policy trunk
        skipped where the value function has its own: half the forward pass)."""
        features = self.encoder(obs)
        trunk = self.pi_trunk if self.vf_trunk is None else self.vf_trunk
        return self.vf_head(trunk(features)).squeeze(-1)

    def heads(self, features: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Encoded observations ``[..., num_features]`` -> (dist_inputs, value)."""
        pi_features = self.pi_trunk(features)
        vf_features = pi_features if self.vf_trunk is None else self.vf_trunk(features)
        dist_inputs = self.pi_head(pi_features)
        if self.free_log_std:
            dist_inputs = torch.cat([dist_inputs, self.log_std.expand_as(dist_inputs)], dim=-1)
        return dist_inputs, self.vf_head(vf_features).squeeze(-1)

    def mask_logits(self, dist_inputs: torch.Tensor, obs: torch.Tensor) -> torch.Tensor:
        """Logits of the actions the observation's ``action_mask`` rules out set to the
        dtype's minimum (so they are never sampled, and score ~0 probability in the loss)."""
        if not self.masked:
            return dist_inputs
        mask = self.encoder.action_mask(obs)
        return dist_inputs.masked_fill(~mask, torch.finfo(dist_inputs.dtype).min)


#: The default model under the name the docs use.
ActorCritic = ActorCriticMLP


#: Rows per forward pass of a whole batch without gradients on the CPU: [8192, 64]
#: activations stay in the caches. A [65536, 4] CartPole batch's values took 12 ms in one
#: pass and 9.6 ms in chunks of 8192 with [64, 64] trunks, 184 and 116 ms with [256, 256].
CPU_CHUNK_ROWS = 8192


def model_values(model: nn.Module, obs: torch.Tensor) -> torch.Tensor:
    """The values ``[N]`` of ``model`` (``forward(obs)`` returns ``(dist_inputs, value)``)
    on a batch of observations: by ``ActorCriticMLP.values`` where the model computes them
    as the default one does (no override of ``forward``, ``heads`` or ``values`` in a
    subclass), else from the full forward pass; on the CPU in chunks of
    ``CPU_CHUNK_ROWS``."""
    cls = type(model)
    if (isinstance(model, ActorCriticMLP) and cls.forward is ActorCriticMLP.forward
            and cls.heads is ActorCriticMLP.heads and cls.values is ActorCriticMLP.values):
        values = model.values
    else:
        def values(x: torch.Tensor) -> torch.Tensor:
            return model(x)[1]
    n = len(obs)
    if obs.device.type != "cpu" or n <= CPU_CHUNK_ROWS:
        return values(obs)
    return torch.cat([values(obs[i:i + CPU_CHUNK_ROWS]) for i in range(0, n, CPU_CHUNK_ROWS)])


class NestedObsModel(nn.Module):
    """A custom model of a Tuple/Dict observation space given the observation as its
    nested dicts / tuples of tensors (the column's packed records unpacked)."""

    def __init__(self, model: nn.Module, obs_space: gym.Space):
        super().__init__()
        self.model = model
        self.obs_space = obs_space
        self._leaves = leaves(obs_space)

    def forward(self, obs: torch.Tensor) -> Any:
        return self.model(build(self.obs_space, unpack_tensor(self._leaves, obs)))


def import_model_class(path: Any) -> type[nn.Module]:
    """The class named by ``"package.module:ClassName"`` (or a registered name), imported
    here; a class is taken as it is."""
    if isinstance(path, type):
        cls = path
    else:
        path = custom_model_path(path)
        module_name, sep, attr = path.partition(":")
        from rlmesh.runtime import handed

        if (not sep or not module_name or not attr) and not handed.is_token(path):
            raise ValueError(f"custom_model must be a class, 'package.module:ClassName' or a name "
                             f"given to rlmesh.models.register_custom_model, got {path!r}")
        from rlmesh.runtime.import_path import import_object

        try:
            cls = import_object(path, "custom_model")
        except (ImportError, ValueError, AttributeError) as exc:
            raise ValueError(f"custom_model {path!r}: {exc}") from None
    if not (isinstance(cls, type) and issubclass(cls, nn.Module)):
        raise ValueError(f"custom_model {path!r} is {cls!r}, not a torch.nn.Module subclass")
    return cls


def build_model(obs_space: gym.Space, action_space: gym.Space, model_config: dict) -> nn.Module:
    """The default ``ActorCriticMLP``, or ``model_config["custom_model"]`` if one is given.

    ``num_outputs``, the number of distribution inputs, is what ``distribution_for`` says
    the action space needs (the same with and without squashing). A custom model is a
    ``torch.nn.Module`` subclass constructed as ``Cls(obs_space, action_space, num_outputs,
    model_config)`` (the full config, defaults filled in; its own settings go in
    ``custom_model_config``) whose ``forward(obs)`` takes a batch of raw observations (a
    tensor ``[N, *obs_space.shape]``; for a Tuple/Dict space, the nested dicts / tuples of
    such tensors) and returns ``(dist_inputs [N, num_outputs], value [N])``. That contract
    is checked here on two sampled observations (docs/models.md).
    """
    config = check_model_config(model_config)
    _, num_outputs = distribution_for(action_space, bool(config["squash_actions"]))
    if config["use_lstm"]:
        from rlmesh.rl.lstm_model import RecurrentActorCritic

        model = RecurrentActorCritic(obs_space, action_space, num_outputs, config)
        name = "RecurrentActorCritic"
    elif config["custom_model"] is None:
        model = ActorCriticMLP(obs_space, action_space, num_outputs, config)
        name = "ActorCriticMLP"
    else:
        cls = import_model_class(config["custom_model"])
        model = cls(obs_space, action_space, num_outputs, config)
        if is_nested(obs_space):
            model = NestedObsModel(model, obs_space)
        name = cls.__qualname__
    _check_outputs(model, obs_space, num_outputs, name)
    return model


def sample_obs_batch(obs_space: gym.Space, n: int) -> torch.Tensor:
    """``n`` observations sampled from the space, as their column stores them."""
    samples = [obs_space.sample() for _ in range(n)]
    if is_nested(obs_space):
        return torch.as_tensor(pack_list(obs_space, samples))
    return torch.as_tensor(np.stack(samples))


def _check_outputs(model: nn.Module, obs_space: gym.Space, num_outputs: int, name: str) -> None:
    obs = sample_obs_batch(obs_space, 2)
    with torch.no_grad():
        out = model(obs)
    if not (isinstance(out, (tuple, list)) and len(out) == 2):
        raise ValueError(f"model {name}: forward(obs) must return (dist_inputs, value), got {type(out).__name__}")
    dist_inputs, value = out
    if tuple(dist_inputs.shape) != (2, num_outputs) or tuple(value.shape) != (2,):
        raise ValueError(
            f"model {name}: for a batch of 2 observations forward(obs) must return dist_inputs of "
            f"shape (2, {num_outputs}) and value of shape (2,), got {tuple(dist_inputs.shape)} "
            f"and {tuple(value.shape)}"
        )
