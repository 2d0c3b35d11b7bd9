"""The policy an env runner or policy server acts with, and how it stays current: numpy
for the default model (``NumpyPolicy``: the process never imports torch), torch for a
custom one (``TorchPolicy``), weights pulled from the param server by version."""

from __future__ import annotations

from typing import Any, Callable

import gymnasium as gym
import numpy as np

from rlmesh.algorithms.config import AlgorithmConfig
from rlmesh.rl.numpy_policy import NumpyPolicy

# policy(obs [N, ...], explore) -> (actions [N, ...], logp [N], dist_inputs [N, n])
PolicyFn = Callable[[np.ndarray, "bool | None"], tuple[np.ndarray, np.ndarray, np.ndarray]]


def column_layout(space: gym.Space) -> tuple[tuple[int, ...], np.dtype]:
    """Shape and dtype of one observation or action in a fragment: int64 for Discrete,
    float32 for Box (uint8 Box observations, i.e. pixels, stay uint8)."""
    if isinstance(space, gym.spaces.Discrete):
        return (), np.dtype(np.int64)
    if isinstance(space, gym.spaces.Box):
        return tuple(space.shape), np.dtype(np.uint8 if space.dtype == np.uint8 else np.float32)
    return tuple(space.shape or ()), np.dtype(space.dtype)


class TorchPolicy:
    """Batched inference with a torch model: one forward pass over the observations of
    all stepping envs. Runners use it for custom models only (the default one runs in
    numpy, ``NumpyPolicy``), so torch is imported here and not at the top."""

    def __init__(self, model: Any, action_space: gym.Space, explore: bool = True,
                 squash: bool = False):
        from rlmesh.rl.distributions import distribution_for

        self.model = model
        self.dist_cls, self.num_inputs = distribution_for(action_space, squash)
        self.explore = explore
        self.action_dtype = column_layout(action_space)[1]

    def __call__(self, obs: np.ndarray, explore: bool | None = None):
        import torch

        explore = self.explore if explore is None else explore
        with torch.no_grad():
            inputs, _ = self.model(torch.as_tensor(obs))
            dist = self.dist_cls.from_inputs(inputs)
            actions = dist.sample() if explore else dist.deterministic_sample()
            logp = dist.logp(actions)
        return (actions.numpy().astype(self.action_dtype, copy=False),
                logp.numpy().astype(np.float32, copy=False),
                inputs.numpy().astype(np.float32, copy=False))

    def dist_inputs(self, obs: np.ndarray) -> np.ndarray:
        import torch

        with torch.no_grad():
            return self.model(torch.as_tensor(obs))[0].numpy().astype(np.float32, copy=False)

    def logp(self, inputs: np.ndarray, actions: np.ndarray) -> np.ndarray:
        """Log-probability of ``actions`` under the distributions ``inputs`` describe."""
        import torch

        dist = self.dist_cls.from_inputs(torch.as_tensor(inputs))
        return dist.logp(torch.as_tensor(actions)).numpy().astype(np.float32, copy=False)

    def set_weights(self, weights: dict[str, Any]) -> None:
        import torch

        self.model.load_state_dict({k: torch.as_tensor(np.array(v)) for k, v in weights.items()})

    def get_weights(self) -> dict[str, np.ndarray]:
        return {k: v.detach().numpy().copy() for k, v in self.model.state_dict().items()}


def make_policy(obs_space: gym.Space, action_space: gym.Space, cfg: AlgorithmConfig,
                seed: int | None, own_process: bool) -> NumpyPolicy | TorchPolicy:
    """The runner's policy: numpy for the default model, torch for a custom one (torch is
    imported only then; in a runner process of its own with one thread and its own seed)."""
    model_config = cfg.model
    squash = bool(model_config.get("squash_actions", False))
    if model_config.get("custom_model") is None:
        return NumpyPolicy(obs_space, action_space, model_config, cfg.explore, seed)
    import torch

    from rlmesh.rl.models import build_model

    if own_process:  # leave the driver's torch settings alone
        torch.set_num_threads(1)
        if seed is not None:
            torch.manual_seed(seed)
    model = build_model(obs_space, action_space, model_config)
    return TorchPolicy(model, action_space, cfg.explore, squash)


class VersionedPolicy:
    """A runner's policy and its version, refreshed from the param server named
    ``self._ps_name`` when it has a newer one (EnvRunner and PolicyServerRunner)."""

    policy: Any
    version: int
    job: Any
    _ps_name: str | None
    _ps: Any
    _stats: dict[str, Any]

    async def _pull_weights(self) -> None:
        if self._ps_name is not None:
            self._take_weights(await self._fetch_weights())

    async def _fetch_weights(self) -> list[Any] | None:
        """``[version, weights]`` from the param server if it has newer ones, else None."""
        if self._ps is None:
            self._ps = await self.job.get_actor(self._ps_name)
        return await self._ps.get_weights(self.version)

    def _take_weights(self, got: list[Any] | None) -> None:
        if got is not None and got[0] > self.version:
            self.set_weights(*got)

    def set_weights(self, version: int, weights: dict[str, Any]) -> None:
        """Load ``{name: array}`` (the model's state_dict) as policy version ``version``."""
        self.policy.set_weights(weights)
        self.version = version
        self._stats["num_weight_updates"] += 1

    def get_weights(self) -> dict[str, np.ndarray]:
        """The policy's weights (the default model's: only the policy trunk and head)."""
        return self.policy.get_weights()
