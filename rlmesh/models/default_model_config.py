"""RLlib's ``DefaultModelConfig`` (``ray.rllib.core.rl_module.default_model_config``): the
default network's settings as a dataclass, for ``config.rl_module(model_config=
DefaultModelConfig(...))``. Only the fields a user sets are passed on (``given``): rlmesh's
model reads the ones it has (``fcnet_hiddens``, ``use_lstm``, ...; RLlib's
``head_fcnet_hiddens`` is rlmesh's ``post_fcnet_hiddens``), a user's RLModule gets them
all, and a set field neither reads is the usual unknown-key error."""

from __future__ import annotations

import dataclasses
from typing import Any


@dataclasses.dataclass
class DefaultModelConfig:
    fcnet_hiddens: list = dataclasses.field(default_factory=lambda: [256, 256])
    fcnet_activation: str = "tanh"
    fcnet_kernel_initializer: Any = None
    fcnet_kernel_initializer_kwargs: Any = None
    fcnet_bias_initializer: Any = None
    fcnet_bias_initializer_kwargs: Any = None
    conv_filters: Any = None
    conv_activation: str = "relu"
    conv_kernel_initializer: Any = None
    conv_kernel_initializer_kwargs: Any = None
    conv_bias_initializer: Any = None
    conv_bias_initializer_kwargs: Any = None
    head_fcnet_hiddens: list = dataclasses.field(default_factory=list)
    head_fcnet_activation: str = "relu"
    head_fcnet_kernel_initializer: Any = None
    head_fcnet_kernel_initializer_kwargs: Any = None
    head_fcnet_bias_initializer: Any = None
    head_fcnet_bias_initializer_kwargs: Any = None
    free_log_std: bool = False
    log_std_clip_param: float = 20.0
    vf_share_layers: bool = True
    use_lstm: bool = False
    max_seq_len: int = 20
    lstm_cell_size: int = 256
    lstm_use_prev_action: bool = False
    lstm_use_prev_reward: bool = False
    lstm_kernel_initializer: Any = None
    lstm_kernel_initializer_kwargs: Any = None
    lstm_bias_initializer: Any = None
    lstm_bias_initializer_kwargs: Any = None

    def given(self) -> dict[str, Any]:
        """The fields whose values differ from the defaults: what the user set, in rlmesh's
        names where rlmesh has the setting under another one."""
        out = {}
        for f in dataclasses.fields(self):
            default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
            value = getattr(self, f.name)
            if value != default:
                out[_RLMESH_NAMES.get(f.name, f.name)] = value
        return out


#: RLlib's names of settings rlmesh's model has under another name.
_RLMESH_NAMES = {"head_fcnet_hiddens": "post_fcnet_hiddens"}

__all__ = ["DefaultModelConfig"]
