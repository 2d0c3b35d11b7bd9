"""``ActorCriticReplayPolicy``: the learner side DDPG, TD3 and SAC share, on the off-policy
plumbing (``algorithms/off_policy.py``). One gradient step on a replayed minibatch is one
forward and one backward pass over the sum of the algorithm's losses (each loss reaching
only its own network) and one step of each optimizer. Runners receive the actor alone."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch

from rlmesh.algorithms.off_policy import OffPolicyTorchPolicy
from rlmesh.algorithms.off_policy_config import OffPolicyConfig
from rlmesh.policy.policy import class_path
from rlmesh.rl.action_noise import action_bounds
from rlmesh.rl.columns import Columns, optional_columns
from rlmesh.rl.distributions import Categorical, SquashedGaussian
from rlmesh.rl.optim import Optimizers
from rlmesh.rl.spec import numpy_fast_path


class OwnRates(Optimizers):
    """Optimizers that each keep the learning rate they were built with (actor_lr,
    critic_lr, ...): no param_groups for the shared ``lr`` schedule to overwrite."""

    @property
    def param_groups(self) -> list[dict[str, Any]]:
        return []


class ActorCriticReplayPolicy(OffPolicyTorchPolicy):
    """Subclasses build ``model`` as a ModuleDict with an ``actor`` (what runners act
    with), define ``loss`` (with a ``td_error`` statistic: replay's new priorities), and
    say with ``updates_actor`` whether the coming step moves the actor and the targets
    (TD3's delay). ``numpy_runner`` names the numpy class runners act with in its place
    (``policy/numpy_actor.py``) when the actor is the default one on a flat observation."""

    numpy_runner: str | None = None
    #: What results report each optimizer's learning rate as, in ``make_optimizer``'s order.
    rate_keys: tuple[str, ...] = ("cur_actor_lr", "cur_critic_lr")

    @classmethod
    def runner_class(cls, config: OffPolicyConfig, observation_space: gym.Space | None = None,
                     action_space: gym.Space | None = None) -> str:
        """``numpy_runner`` for the default actor on a flat observation; this class for a
        subclass that acts otherwise or builds another model, or a non-flat observation."""
        owner = next(c for c in cls.__mro__ if "numpy_runner" in c.__dict__)
        default = (cls.compute_actions is owner.compute_actions
                   and cls.make_model is owner.make_model)
        flat = (observation_space is not None
                and numpy_fast_path(observation_space, action_space, config.model))
        return owner.numpy_runner if owner.numpy_runner and default and flat else class_path(cls)

    def __init__(self, observation_space: gym.Space, action_space: gym.Space,
                 config: OffPolicyConfig,
                 device: str | torch.device = "cpu") -> None:
        super().__init__(observation_space, action_space, config, device)
        # No log-probs or distribution inputs recorded; t keeps n-step transitions within
        # their episode (rl/nstep.py).
        self.view_requirements = {Columns.T: optional_columns(action_space)[Columns.T]}
        self._actor_step = True  # whether the current gradient step moves the actor
        self.q_params = list(self.model["q"].parameters())  # what the actor's loss freezes

    def apply_learning_rates(self, timesteps: int) -> dict[str, float]:
        """Each optimizer keeps the rate it was built with (``OwnRates``), reported under
        ``rate_keys``; no ``cur_lr``: the shared ``lr`` drives none of them."""
        return {key: float(opt.param_groups[0]["lr"])
                for key, opt in zip(self.rate_keys, self.optimizer.optimizers, strict=True)}

    def grad_steps(self) -> int:
        return int(self.state.get("num_grad_steps", 0))

    def updates_actor(self) -> bool:
        return True

    def maybe_update_target(self) -> None:
        if self.updates_actor():  # TD3: the targets follow the delayed actor
            super().maybe_update_target()

    def before_gradient_step(self) -> None:
        self._actor_step = self.updates_actor()
        self.state["num_grad_steps"] = self.grad_steps() + 1

    # --- weights: the runners act with the actor alone ---

    def get_weights(self) -> dict[str, np.ndarray]:
        weights = {k: v.detach().to("cpu", copy=True).numpy()
                   for k, v in self.model["actor"].state_dict().items()}
        weights["_timestep"] = np.array(self.global_timestep, np.int64)
        return weights

    def set_weights(self, weights: dict[str, Any]) -> None:
        self.model["actor"].load_state_dict({k: torch.as_tensor(np.array(v))
                                             for k, v in weights.items() if not k.startswith("_")})
        if "_timestep" in weights:  # the run's env steps: exploration schedules follow them
            self.on_timestep(int(np.asarray(weights["_timestep"])))

    def on_timestep(self, timestep: int) -> None:
        """The run has sampled ``timestep`` env steps (runner side)."""

    def export_model(self, export_dir: str, onnx: int | None = None) -> str:
        from rlmesh.policy.export import export_model

        return str(export_model(self.model["actor"], self.observation_space, export_dir, onnx))


class StochasticActorPolicy(ActorCriticReplayPolicy):
    """What SAC, CQL and IQL share: a stochastic actor (``model["actor"]``) drawing from a
    tanh-squashed Gaussian on Box actions, a categorical on Discrete ones (``dist_class``),
    and the log-probabilities of given actions that off-policy estimation asks for."""

    def __init__(self, observation_space: gym.Space, action_space: gym.Space,
                 config: OffPolicyConfig, device: str | torch.device = "cpu") -> None:
        self.discrete = isinstance(action_space, gym.spaces.Discrete)
        if not self.discrete:
            self.low, self.high = action_bounds(action_space, config)
        super().__init__(observation_space, action_space, config, device)
        self.dist_class = (Categorical if self.discrete
                           else SquashedGaussian.with_bounds(self.low, self.high))

    def score_actions(self, obs_batch: Any, actions: Any, *_: Any, **__: Any
                      ) -> dict[str, Any]:
        """log pi(a|s) of given actions (off-policy estimation), from the actor."""
        with torch.no_grad():
            inputs = self.model["actor"](torch.as_tensor(obs_batch, device=self.device))
            logp = self.dist_class.from_inputs(inputs).logp(
                torch.as_tensor(actions, device=self.device))
        return {"action_logp": logp.cpu().numpy(), "action_dist_inputs": inputs.cpu().numpy()}
