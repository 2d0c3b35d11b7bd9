"""RLlib's ModelV2 calls on any torch model of a template-built policy: ``from_batch`` and
``value_function``. rlmesh's model contract is ``forward(obs) -> (dist_inputs, value)``
(docs/models.md); these two are read off it, so a user's custom model needs nothing more."""

from __future__ import annotations

import types
from typing import Any

import torch
from torch import nn

from rlmesh.policy.recurrent import SEQ_MASK, sequence_outputs
from rlmesh.rl.columns import Columns


def add_model_v2_api(model: nn.Module) -> nn.Module:
    """``model`` with ``from_batch(train_batch) -> (dist_inputs, [])`` and
    ``value_function()`` (the values of its last forward pass), unless its class defines
    them itself. A forward hook keeps the values: only template-built policies pay for it."""
    if model.__dict__.get("_model_v2_api"):
        return model
    model.register_forward_hook(_keep_value)
    for name, fn in (("from_batch", from_batch), ("value_function", value_function)):
        if not callable(getattr(type(model), name, None)):
            setattr(model, name, types.MethodType(fn, model))
    model.__dict__["_model_v2_api"] = True
    return model


def _keep_value(module: nn.Module, inputs: Any, output: Any) -> None:
    if isinstance(output, (tuple, list)) and len(output) == 2:
        module.__dict__["_last_value"] = output[1]


def from_batch(model: nn.Module, train_batch: dict[str, Any], is_training: bool = True
               ) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """RLlib's ``model.from_batch``: the distribution inputs of the batch's observations and
    the state outputs (none here). A batch of sequences (a recurrent model's minibatch,
    ``seq_mask``) gives those of its real steps, flat, in the order of
    ``policy.train_rows(batch)``, which holds the other columns in that order."""
    if SEQ_MASK in train_batch:
        dist_inputs, values = sequence_outputs(model, train_batch)
        model.__dict__["_last_value"] = values
        return dist_inputs, []
    dist_inputs, _ = model(train_batch[Columns.OBS])  # the hook keeps the values
    return dist_inputs, []


def value_function(model: nn.Module) -> torch.Tensor:
    """RLlib's ``model.value_function()``: the values ``[N]`` of the last forward pass."""
    value = model.__dict__.get("_last_value")
    if value is None:
        raise RuntimeError("model.value_function() is read after a forward pass: call "
                           "model.from_batch(train_batch) or model(obs) first")
    return value
