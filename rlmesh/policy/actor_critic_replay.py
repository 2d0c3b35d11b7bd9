"""``ActorCriticReplayPolicy``: the learner side DDPG, TD3 and SAC share. One
``learn_on_batch`` on a replayed batch is one forward, one backward pass over the sum of the
algorithm's losses (each loss reaching only its own network) and one step of each
optimizer, then the target update. Runners receive the actor's weights only."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch

from rlmesh.policy.torch_policy import TorchPolicy
from rlmesh.rl.batch import to_tensors


class ActorCriticReplayPolicy(TorchPolicy):
    """Subclasses build ``model`` as a ModuleDict with an ``actor`` (what runners act
    with), define ``loss`` (returning a ``td_error`` statistic: replay's new priorities)
    and ``update_targets``, and say with ``updates_actor`` whether this update steps the
    actor (TD3's delay)."""

    view_requirements: dict = {}

    def __init__(self, observation_space: gym.Space, action_space: gym.Space, config: Any,
                 device: str | torch.device = "cpu") -> None:
        super().__init__(observation_space, action_space, config, device)
        self.view_requirements = {}  # acting records no log-probs or distribution inputs
        self.td_error: np.ndarray | None = None
        self._actor_step = True  # whether the current update steps the actor

    def updates_actor(self) -> bool:
        return True

    def update_targets(self) -> None:
        raise NotImplementedError

    def learn_on_batch(self, samples: dict[str, Any]) -> dict[str, float]:
        """One update on one replayed batch of flat transitions: ``obs``, ``actions``,
        ``rewards``, ``next_obs``, ``terminateds``, and optionally ``weights``
        (prioritized replay's importance weights) and ``n_steps`` (the steps each n-step
        return spans). The new TD errors are left in ``td_error``."""
        self.for_learning()
        batch = to_tensors({k: v for k, v in samples.items()
                            if isinstance(v, (np.ndarray, torch.Tensor))}, self.device)
        self._actor_step = self.updates_actor()
        stats = self._step(batch)
        self.num_updates += 1
        n = len(batch["rewards"])
        self.num_env_steps_trained += n
        out: dict[str, float] = {"num_env_steps_trained": n,
                                 "num_nonfinite_updates_skipped": self.num_nonfinite_updates_skipped}
        if stats is None:  # not applied (non-finite, on_nonfinite "skip")
            self.td_error = None
            return out
        if self._actor_step:
            self.update_targets()
        self.td_error = stats.pop("td_error").cpu().numpy()
        out.update({k: float(v) for k, v in stats.items()}, num_grad_updates=1, **self.state)
        return out

    # --- weights: the runners act with the actor alone ---

    def get_weights(self) -> dict[str, np.ndarray]:
        return {k: v.detach().to("cpu", copy=True).numpy()
                for k, v in self.model["actor"].state_dict().items()}

    def set_weights(self, weights: dict[str, Any]) -> None:
        self.model["actor"].load_state_dict({k: torch.as_tensor(np.array(v))
                                             for k, v in weights.items()})

    def export_model(self, export_dir: str, onnx: int | None = None) -> str:
        from rlmesh.policy.export import export_model

        return str(export_model(self.model["actor"], self.observation_space, export_dir, onnx))
