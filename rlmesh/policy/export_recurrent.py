"""The graph ``export_model`` traces for a recurrent model (``use_lstm``): one step for N envs
with the recurrent state as inputs (``state_in_i``) and outputs (``state_out_i``), so the
exported file remembers exactly as the live policy does. Docs: docs/export.md."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from rlmesh.rl.columns import Columns, optional_columns
from rlmesh.rl.nested_spaces import to_column


@dataclass
class StepGraph:
    """What ``export_model`` traces and names: the module, its input and output names in
    call order, their meanings, and the initial state metadata records."""

    module: nn.Module
    input_names: list[str]
    output_names: list[str]
    inputs: dict[str, str]
    outputs: dict[str, str]
    initial_state: list[np.ndarray] = field(default_factory=list)


class RecurrentStep(nn.Module):
    """``(obs [N, ...], state_in_0..k [N, ...] [, prev_actions [N, ...]] [, prev_rewards [N]])
    -> (dist_inputs [N, n], value [N], state_out_0..k)``: ``forward_seq`` over sequences of
    length one, as ``TorchPolicy`` steps the model when it acts."""

    def __init__(self, model: nn.Module, num_states: int) -> None:
        super().__init__()
        self.model, self.num_states = model, num_states
        self.prev_action = bool(getattr(model, "use_prev_action", False))
        self.prev_reward = bool(getattr(model, "use_prev_reward", False))

    def forward(self, obs: torch.Tensor, *rest: torch.Tensor) -> tuple[torch.Tensor, ...]:
        states, extra = list(rest[:self.num_states]), list(rest[self.num_states:])
        prev_actions = extra.pop(0).unsqueeze(1) if self.prev_action else None
        prev_rewards = extra.pop(0).unsqueeze(1) if self.prev_reward else None
        dist_inputs, values, state_out = self.model.forward_seq(
            obs.unsqueeze(1), states, prev_actions, prev_rewards)
        return (dist_inputs[:, 0], values[:, 0], *state_out)


def recurrent_graph(model: nn.Module, action_space: gym.Space | None) -> StepGraph:
    """The step graph of a recurrent ``model`` (``forward_seq``, ``get_initial_state``)."""
    initial = [np.asarray(s) for s in model.get_initial_state()]
    step = RecurrentStep(model, len(initial))
    if step.prev_action and action_space is None:
        raise ValueError(f"export_model: {type(model).__name__} reads the previous action "
                         "(lstm_use_prev_action); pass action_space=policy.action_space")
    names = ["obs", *(Columns.state_in(i) for i in range(len(initial)))]
    inputs = {
        "obs": "[N, *obs_shape]: one observation per env, raw as the env returns it",
        **{Columns.state_in(i): f"[N, {', '.join(map(str, s.shape))}] {s.dtype.name}: the "
           f"recurrent state before this step: initial_state[{i}] at an episode's first step, "
           f"else the {Columns.state_out(i)} of the env's previous step"
           for i, s in enumerate(initial)},
    }
    if step.prev_action:
        names.append(Columns.PREV_ACTIONS)
        inputs[Columns.PREV_ACTIONS] = ("[N, *action_shape]: the env's previous action as the "
                                        "policy gave it (int64 for Discrete); zeros at an "
                                        "episode's first step")
    if step.prev_reward:
        names.append(Columns.PREV_REWARDS)
        inputs[Columns.PREV_REWARDS] = "[N] float32: the env's previous reward; 0 at an episode's first step"
    outputs = {
        "dist_inputs": "[N, num_outputs] float32: the inputs of the action distribution at this step",
        "value": "[N] float32: the value function's estimate at this step",
        **{Columns.state_out(i): f"the recurrent state after this step; feed it back as "
           f"{Columns.state_in(i)} at the env's next step" for i in range(len(initial))},
    }
    return StepGraph(step, names, list(outputs), inputs, outputs, initial)


def sample_inputs(graph: StepGraph, obs: torch.Tensor, action_space: gym.Space | None,
                  seed: int) -> tuple[torch.Tensor, ...]:
    """The step graph's inputs for the observations ``obs``: random states far from the
    initial one (a trace that ignored them, or baked them in, fails the check), random
    previous actions and rewards."""
    n = obs.shape[0]
    rng = np.random.default_rng(seed)
    out = [obs, *(torch.as_tensor(rng.normal(size=(n, *s.shape)).astype(s.dtype))
                  for s in graph.initial_state)]
    if Columns.PREV_ACTIONS in graph.inputs:
        space = copy.deepcopy(action_space)
        space.seed(seed)
        spec = optional_columns(space)[Columns.PREV_ACTIONS]
        actions = [to_column(space, space.sample(), "action") for _ in range(n)]
        out.append(torch.as_tensor(np.stack(actions).astype(spec.dtype)))
    if Columns.PREV_REWARDS in graph.inputs:
        out.append(torch.as_tensor(rng.normal(size=n).astype(np.float32)))
    return tuple(out)


def check_step_outputs(graph: StepGraph, out: object, n: int) -> tuple[torch.Tensor, ...]:
    """The eager step's outputs, or a one-line error saying what ``forward_seq`` returned."""
    shapes = [(n, -1), (n,), *((n, *s.shape) for s in graph.initial_state)]
    ok = isinstance(out, tuple) and len(out) == len(shapes) and all(
        isinstance(t, torch.Tensor) and t.ndim == len(shape)
        and all(d in (-1, got) for d, got in zip(shape, t.shape)) for t, shape in zip(out, shapes))
    if not ok:
        got = tuple(tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__
                    for t in (out if isinstance(out, tuple) else (out,)))
        raise ValueError(
            f"export_model: {type(graph.module.model).__name__}.forward_seq(obs [N, 1, ...], state) "
            f"must return (dist_inputs [N, 1, k], values [N, 1], state_out shaped as "
            f"get_initial_state() per env); one step for N={n} gave {got}")
    return out
