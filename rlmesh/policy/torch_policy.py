"""``TorchPolicy``: a policy with a torch model, its action distribution, an optimizer and a
loss. The runner side samples from the model; the learner side's ``update`` is
``prepare_batch``, then the one minibatch loop (``policy/sgd.py``: epochs of minibatches,
gradient steps with clipping, the learning-rate schedule, statistics) around ``loss``, then
``update_stats`` and ``after_update``. An algorithm's policy is a subclass that overrides
those (and may write its ``update`` out, as PPO's does, with the same loop).
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from rlmesh.runtime.import_path import import_object
from rlmesh.policy.numpy_mlp import NumpyMLPPolicy
from rlmesh.policy.policy import Policy, class_path
from rlmesh.policy.recurrent import SEQ_MASK, flat_steps, is_recurrent, sequence_outputs
from rlmesh.policy.sgd import MinibatchSGD
from rlmesh.rl.batch import to_tensors
from rlmesh.rl.columns import (ColumnSpec, Columns, SampleBatch, action_dist_columns,
                               optional_columns, postprocessed_samples, space_layout)
from rlmesh.rl.distributions import distribution_for
from rlmesh.rl.finite import NonFiniteError
from rlmesh.rl.default_model import CPU_CHUNK_ROWS, build_model
from rlmesh.rl.optim import Adam
from rlmesh.rl.spec import numpy_fast_path
from rlmesh.policy.module_model import build_module_model, is_default_module, single_spec
from rlmesh.rl.columns import DEFAULT_POLICY_ID

#: The RLModule a spec without module_class builds when the policy takes a module anyway.
_DEFAULT_MODULE = "rlmesh.models.default_modules:DefaultPPOTorchRLModule"

logger = logging.getLogger("rlmesh.policy")

Tensors = dict[str, torch.Tensor]
_FULL_PRECISION = contextlib.nullcontext()  # reusable: no autocast


def weights_to_numpy(model: torch.nn.Module) -> dict[str, np.ndarray]:
    """A copy of ``model``'s state_dict as numpy arrays. A copy even on the CPU, where
    ``.numpy()`` would share the parameters' memory: the arrays are published or sent
    while the next update changes the parameters in place."""
    return {k: v.detach().to("cpu", copy=True).numpy() for k, v in model.state_dict().items()}


def load_weights(model: torch.nn.Module, weights: dict[str, Any]) -> None:
    model.load_state_dict({k: torch.as_tensor(np.array(v)) for k, v in weights.items()})


class TorchPolicy(Policy):
    """A torch model acting and learning. Subclasses define ``loss`` (and, where the
    algorithm needs them, ``prepare_batch`` and ``after_update``)."""

    def __init__(self, observation_space: gym.Space, action_space: gym.Space, config: Any,
                 device: str | torch.device = "cpu") -> None:
        super().__init__(observation_space, action_space, config)
        self.device = torch.device(device)
        self.squash = bool(config.model.get("squash_actions", False))
        self.dist_class, self.num_dist_inputs = distribution_for(action_space, self.squash)
        self._check_takes_module(config)
        self.model = self.make_model().to(self.device)
        self.action_dtype = space_layout(action_space).dtype  # actions as the column stores them
        self.view_requirements = {**action_dist_columns(self.num_dist_inputs),
                                  **type(self).view_requirements}
        self.recurrent = is_recurrent(self.model)
        if self.recurrent:  # runners record what the LSTM reads
            self.view_requirements.update(self._recurrent_columns())
        self.optimizer: Any = None  # made by the learner (make_optimizer): runners need none
        self.state: dict[str, float] = {}  # what after_update adapts; checkpoints keep it
        self.num_updates = 0
        self.num_env_steps_trained = 0
        self.num_nonfinite_updates_skipped = 0  # minibatch steps never applied: NaN/inf loss or gradient
        self.data_parallel: Any = None  # a DataParallel when learners train together
        # A user's Learner with its own compute/apply_gradients steps here (MinibatchSGD.step).
        self.gradient_step: Any = None
        # Read once: a config lookup per gradient step cost ~3 us (see precision()).
        self.bf16 = getattr(config, "torch_autocast", None) == "bf16"
        after = getattr(config, "after_train_step", None)
        self.after_train_step = import_object(after) if isinstance(after, str) else after

    # --- construction (override to change) ---

    #: Whether this policy's loss trains a value function (an RLModule must then give values).
    trains_values = True

    def make_model(self) -> torch.nn.Module:
        """The default actor-critic model, ``model.custom_model`` (``rl/default_model.py``),
        or the config's RLModule (``module_spec``, policy/module_model.py)."""
        data = self.module_data(self.config)
        if data is not None:
            return build_module_model(data, self.observation_space, self.action_space,
                                      self.module_model_config(self.config), _DEFAULT_MODULE,
                                      self.trains_values)
        return build_model(self.observation_space, self.action_space, self.config.model)

    @staticmethod
    def module_model_config(config: Any) -> dict[str, Any]:
        """What a user's RLModule gets as ``self.model_config`` under its spec's own: the
        model keys, then RLlib's other model_config keys (an algorithm with networks of its
        own adds its network settings: DQN's hiddens, SAC's q_model_config)."""
        return {**config.model, **getattr(config, "module_model_config", {})}

    @staticmethod
    def module_data(config: Any) -> dict[str, Any] | None:
        """The user's RLModule spec this policy builds (None: rlmesh's model). A policy of a
        multi-agent run gets its own through its config; a single-agent run takes the
        module of ``default_policy`` from a MultiRLModuleSpec."""
        data = single_spec(getattr(config, "module_spec", None), DEFAULT_POLICY_ID)
        return None if is_default_module(data) else data

    def _check_takes_module(self, config: Any) -> None:
        if getattr(config, "module_spec", None) is None:
            return
        if (type(self).make_model is not TorchPolicy.make_model
                and not getattr(type(self), "takes_rl_modules", False)):
            raise ValueError(f"{type(self).__name__} builds its own networks (make_model), so it "
                             "takes no rl_module_spec; PPO, APPO, IMPALA, PG, A2C, A3C, DQN and "
                             "SAC do "
                             "(docs/new_api_stack.md)")

    def _recurrent_columns(self) -> dict[str, ColumnSpec]:
        optional = optional_columns(self.action_space)
        keys = [k for k, used in ((Columns.PREV_ACTIONS, self.model.use_prev_action),
                                  (Columns.PREV_REWARDS, self.model.use_prev_reward)) if used]
        return {k: optional[k] for k in keys}

    def get_initial_state(self) -> list[Any]:
        return self.model.get_initial_state() if self.recurrent else []

    def make_optimizer(self) -> Any:
        return Adam(self.model.parameters(), lr=self.config.lr)

    def for_learning(self) -> "TorchPolicy":
        """Ready this copy to learn (the learner calls it once): the optimizer."""
        if self.optimizer is None:
            self.optimizer = self.make_optimizer()
            if getattr(self.config, "torch_compile_learner", False):
                self.loss = _compiled_loss(self)  # type: ignore[method-assign]
        return self

    @classmethod
    def runner_class(cls, config: Any, observation_space: gym.Space | None = None,
                     action_space: gym.Space | None = None) -> str:
        """The numpy fast path when the model is the default MLP on a flat observation
        (``spec.numpy_fast_path``: no conv, nested spaces or custom model) and this class
        acts as ``TorchPolicy`` does; this class otherwise."""
        default_acting = (cls.compute_actions is TorchPolicy.compute_actions
                          and cls.make_model is TorchPolicy.make_model)
        flat = (config.model.get("custom_model") is None and not config.model.get("use_lstm")
                if observation_space is None
                else numpy_fast_path(observation_space, action_space, config.model))
        flat = flat and getattr(config, "module_spec", None) is None  # a module acts in torch
        if default_acting and flat:
            return class_path(NumpyMLPPolicy)
        return class_path(cls)

    # --- runner side ---

    def seed(self, seed: int | None) -> None:
        if seed is not None:
            torch.manual_seed(seed)

    def compute_actions(self, obs_batch: np.ndarray, state_batches: Any = None,
                        prev_action_batch: Any = None, prev_reward_batch: Any = None,
                        explore: bool | None = None, timestep: int | None = None,
                        noise: np.ndarray | None = None,
                        **kwargs: Any) -> tuple[np.ndarray, list[np.ndarray], dict[str, np.ndarray]]:
        explore = self.config.explore if explore is None else explore
        state_out: list[np.ndarray] = []
        values = None
        acting = getattr(self.model, "acting", None)  # an RLModule: forward_exploration/inference
        with torch.no_grad(), (acting(explore) if acting is not None else _FULL_PRECISION):
            obs = torch.as_tensor(np.asarray(obs_batch), device=self.device)
            if self.recurrent:
                inputs, state_out = self._step_recurrent(obs, state_batches, prev_action_batch,
                                                         prev_reward_batch)
            else:
                inputs, values = self._acting_outputs(obs)
            dist = self.dist_class.from_inputs(inputs)
            if not explore:
                actions = dist.deterministic_sample()
            elif noise is not None:
                actions = self._sample_with(dist, noise)
            else:
                actions = dist.sample()
            logp = dist.logp(actions)
        extras = {Columns.ACTION_LOGP: logp.cpu().numpy().astype(np.float32, copy=False),
                  Columns.ACTION_DIST_INPUTS: inputs.cpu().numpy().astype(np.float32, copy=False)}
        if values is not None:
            extras[Columns.VF_PREDS] = values.cpu().numpy().astype(np.float32, copy=False)
        return actions.cpu().numpy().astype(self.action_dtype, copy=False), state_out, extras

    compute_actions.takes_held_noise = True  # noise: a Gaussian's draws the sampler holds

    def _sample_with(self, dist: Any, noise: np.ndarray) -> torch.Tensor:
        """Actions from the sampler's held standard-normal draws (``noise_hold_steps``)."""
        if not hasattr(dist, "sample_with"):
            raise ValueError(f"noise_hold_steps: held noise moves a Gaussian's draws; "
                             f"{type(dist).__name__} (this policy's action distribution) is "
                             "not one, set noise_hold_steps=1")
        return dist.sample_with(torch.as_tensor(noise, dtype=dist.mean.dtype,
                                                device=dist.mean.device).reshape(dist.mean.shape))

    def _acting_outputs(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The distribution inputs, and the values where they come almost free: the default
        model with one shared trunk (``vf_share_layers``) adds only its value head, and the
        learner's GAE then takes them instead of a forward pass over the whole batch (a
        sixth of an Atari PPO update). A separate value trunk is skipped when acting."""
        if getattr(self.model, "vf_trunk", False) is None:
            return self.model(obs)
        if hasattr(self.model, "policy_inputs"):
            return self.model.policy_inputs(obs), None
        return self.model(obs)[0], None

    def _step_recurrent(self, obs: torch.Tensor, states: Any, prev_actions: Any,
                        prev_rewards: Any) -> tuple[torch.Tensor, list[np.ndarray]]:
        """One step of the recurrent model for a batch of envs, each from its own state
        (the initial state where none is given)."""
        n = len(obs)
        if not states:
            states = [np.repeat(s[None], n, 0) for s in self.get_initial_state()]

        def tensor(x: Any) -> torch.Tensor | None:
            return None if x is None else torch.as_tensor(np.asarray(x), device=self.device)[:, None]

        inputs, _, state_out = self.model.forward_seq(
            obs[:, None], [torch.as_tensor(np.asarray(s), device=self.device) for s in states],
            tensor(prev_actions), tensor(prev_rewards))
        return inputs[:, 0], [s.cpu().numpy() for s in state_out]

    def model_outputs(self, mb: Tensors) -> tuple[torch.Tensor, torch.Tensor]:
        """The model's ``(dist_inputs, values)`` on a minibatch of train samples: flat
        ones, or whole sequences (``seq_mask``: then of their real steps, flat, in the order
        of ``train_rows``)."""
        if SEQ_MASK in mb:
            return sequence_outputs(self.model, mb)
        return self.model(mb["obs"])

    @staticmethod
    def train_rows(mb: Tensors) -> Tensors:
        """A minibatch's per-step columns, flat: sequences at their real steps."""
        return flat_steps(mb) if SEQ_MASK in mb else mb

    def score_actions(self, obs_batch: np.ndarray, actions: np.ndarray, state_batches: Any = None,
                      prev_action_batch: Any = None, prev_reward_batch: Any = None
                      ) -> dict[str, np.ndarray]:
        """A recurrent model scores from ``state_batches`` and also returns the state the
        step leaves (``state_out_i``)."""
        state_out: list[np.ndarray] = []
        with torch.no_grad():
            obs = torch.as_tensor(np.asarray(obs_batch), device=self.device)
            if self.recurrent:
                inputs, state_out = self._step_recurrent(obs, state_batches, prev_action_batch,
                                                         prev_reward_batch)
            else:
                inputs = self.model(obs)[0]
            logp = self.dist_class.from_inputs(inputs).logp(
                torch.as_tensor(np.asarray(actions), device=self.device))
        return {Columns.ACTION_LOGP: logp.cpu().numpy().astype(np.float32, copy=False),
                Columns.ACTION_DIST_INPUTS: inputs.cpu().numpy().astype(np.float32, copy=False),
                **{Columns.state_out(i): s for i, s in enumerate(state_out)}}

    # --- learner side: what an algorithm overrides ---

    def prepare_batch(self, batch: Tensors) -> Tensors:
        """Time-major columns ``[T, B]`` (and ``next_obs``, ``trunc_index``, ``trunc_obs``) in,
        the flat train samples the loss reads out. By default: the valid samples, each
        trajectory through ``postprocess_trajectory`` (RLlib's flow). An algorithm that
        computes its targets vectorised over the time-major batch (GAE, V-trace)
        overrides this; returning ``{..., "_whole_batch": True}`` keeps the batch
        whole and time-major, one step on all of it per epoch."""
        post = (self.postprocess_trajectory
                if type(self).postprocess_trajectory is not Policy.postprocess_trajectory else None)
        numpy_batch = {k: v.cpu().numpy() for k, v in batch.items()}
        return to_tensors(postprocessed_samples(numpy_batch, post), self.device)

    def loss(self, train_batch: Tensors) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The loss of one minibatch and statistics to report."""
        raise NotImplementedError(f"{type(self).__name__} defines no loss(train_batch)")

    def update_stats(self, train: Tensors, chunk: int) -> dict[str, Any]:
        """Statistics of the whole batch after the epochs, computed once and without
        gradients (``outputs_after_update``): diagnostics (entropy, KL, explained variance)
        that need not cost a dozen ops on every minibatch step. They join the update's
        result before ``after_update`` reads it. None by default."""
        return {}

    def outputs_after_update(self, train: Tensors, chunk: int
                             ) -> tuple[torch.Tensor, torch.Tensor, Tensors]:
        """The model's ``(dist_inputs, values)`` on every train row now, in chunks of
        ``chunk`` rows (sequences, for a recurrent model; flat rows on the CPU at most
        ``CPU_CHUNK_ROWS``), without gradients; and the rows they belong to
        (``train_rows``), in the same order."""
        n = len(train[SEQ_MASK] if SEQ_MASK in train else next(iter(train.values())))
        if self.device.type == "cpu" and SEQ_MASK not in train:
            chunk = min(chunk, CPU_CHUNK_ROWS)  # big minibatches: cache-sized passes
        with torch.no_grad():
            parts = [self.model_outputs({k: v[i:i + chunk] for k, v in train.items()})
                     for i in range(0, n, max(chunk, 1))]
        return (torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts]),
                self.train_rows(train))

    def after_update(self, stats: dict[str, float]) -> None:
        """Adapt state after the epochs of one update (a KL coefficient, target networks)."""

    def extra_grad_process(self) -> dict[str, torch.Tensor]:
        """Process the gradients before the optimizer steps: clipping per ``grad_clip``;
        returns statistics (the gradients' norm)."""
        if self.config.grad_clip is None:
            return {}
        return {"gradients_norm": self._clip_gradients()}

    # --- learner side: the update (the loop itself: policy/sgd.py) ---

    def update(self, batch: dict[str, Any], timesteps: int, num_epochs: int | None = None,
               minibatch_size: int | None = None, num_minibatches: int | None = None
               ) -> dict[str, float]:
        """One update from the time-major batch the learner received: ``prepare_batch``,
        then ``num_epochs`` (default: the config's) passes of minibatch SGD on ``loss``;
        mean statistics. ``num_minibatches`` cuts each epoch into that many parts
        (data-parallel learners, so every rank steps equally often)."""
        sgd = MinibatchSGD(self, timesteps)
        train = self.prepare_batch(sgd.on_device(batch))
        for mb in sgd.minibatches(train, num_epochs, minibatch_size, num_minibatches):
            with self.precision():
                loss, stats = self.loss(mb)
            sgd.step(loss, stats)
        return sgd.finish()

    def learn_on_batch(self, samples: SampleBatch | dict[str, Any]) -> dict[str, float]:
        """Minibatch SGD on flat samples as given (no ``prepare_batch``)."""
        sgd = MinibatchSGD(self, self.global_timestep)
        for mb in sgd.minibatches(sgd.on_device(samples)):
            with self.precision():
                loss, stats = self.loss(mb)
            sgd.step(loss, stats)
        return sgd.finish()

    def apply_learning_rates(self, timesteps: int) -> dict[str, float]:
        """Set the optimizer's learning rate for ``timesteps`` env steps sampled (``lr``,
        or ``lr_schedule``); what results report it as."""
        lr = self.config.lr_at(timesteps)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        return {"cur_lr": lr}

    def precision(self) -> contextlib.AbstractContextManager[Any]:
        """Where the learner computes the loss: under bf16 autocast where the config asks
        for it (the weights and their gradients stay float32)."""
        if not self.bf16:
            return _FULL_PRECISION
        return torch.autocast(self.device.type, dtype=torch.bfloat16)

    def learner_loss(self, mb: Tensors) -> tuple[torch.Tensor, dict[str, Any]]:
        """``loss`` as the learner computes it (``precision``, compiled where configured),
        its statistics in float32."""
        with self.precision():
            loss, stats = self.loss(mb)
        if self.bf16:
            stats = {k: v.float() if isinstance(v, torch.Tensor) and v.is_floating_point() else v
                     for k, v in stats.items()}
        return loss, stats

    def finite_update(self, loss: torch.Tensor | None, norm: torch.Tensor | None) -> bool:
        """False (counted, or NonFiniteError with on_nonfinite "raise") if the loss or the
        gradient norm is NaN or inf: such a step would poison the weights and the optimizer
        state for good. Data-parallel ranks decide on the averaged gradient alone, which is
        the same on every rank, so that they all skip the same steps."""
        if norm is None:
            grads = [p.grad for p in self.trainable_parameters() if p.grad is not None]
            norm = (torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads))) if grads
                    else torch.zeros((), device=self.device))
        checked = [norm.detach().float()]
        if loss is not None and self.data_parallel is None:
            checked.append(loss.detach().float())
        # One sum, one read: finite exactly when every term is (inf - inf is NaN).
        if bool(torch.isfinite(sum(checked))):
            return True
        self.num_nonfinite_updates_skipped += 1
        if self.config.on_nonfinite != "skip":
            what = ", ".join(f"{name} {float(v)}" for name, v in zip(("gradient norm", "loss"), checked))
            raise NonFiniteError(
                f"non-finite update ({what}) at update {self.num_updates}; it was not applied. "
                "Look for NaN/inf in the data or the loss, or set on_nonfinite='skip' to skip "
                "such updates and count them")
        return False

    def trainable_parameters(self) -> list[torch.nn.Parameter]:
        """The model's parameters, listed once: walking the modules costs ~0.1 ms a step.
        Loading weights keeps the same Parameter objects, so the list stays right."""
        cached = self.__dict__.get("_param_list")
        if cached is None:
            cached = self.__dict__["_param_list"] = list(self.model.parameters())
        return cached

    def _clip_gradients(self) -> torch.Tensor:
        """Clip as ``grad_clip_by`` says; returns the global gradient norm before clipping."""
        cfg, params = self.config, [p for p in self.trainable_parameters() if p.grad is not None]
        if cfg.grad_clip_by == "global_norm":
            # clip_grad_norm_'s arithmetic without its per-call grouping (0.44 -> ~0.1 ms).
            grads = [p.grad for p in params]
            total = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads)))
            torch._foreach_mul_(grads, torch.clamp(cfg.grad_clip / (total + 1e-6), max=1.0))
            return total
        norm = torch.nn.utils.get_total_norm([p.grad for p in params])
        for p in params:
            if cfg.grad_clip_by == "value":
                p.grad.clamp_(-cfg.grad_clip, cfg.grad_clip)
            else:  # "norm": each tensor on its own
                torch.nn.utils.clip_grad_norm_(p, cfg.grad_clip)
        return norm

    # --- gradients apart from the update (A3C: computed on runners, applied by the learner) ---

    def compute_gradients(self, batch: dict[str, Any]) -> tuple[dict[str, np.ndarray], dict[str, float]]:
        """The gradients of the loss on one batch (one pass, no step), by parameter name."""
        train = self.prepare_batch(to_tensors({k: v for k, v in batch.items()
                                               if isinstance(v, (np.ndarray, torch.Tensor))},
                                              self.device))
        train.pop("_whole_batch", None)
        self.model.zero_grad(set_to_none=True)
        loss, stats = self.loss(train)
        loss.backward()
        stats = {**stats, **self.extra_grad_process()}
        grads = {name: p.grad.detach().cpu().numpy().copy()
                 for name, p in self.model.named_parameters() if p.grad is not None}
        return grads, {k: float(v) for k, v in stats.items()}

    def apply_gradients(self, gradients: dict[str, Any]) -> None:
        """One optimizer step with ``gradients`` (by parameter name) as the gradients."""
        self.for_learning().apply_learning_rates(self.global_timestep)
        for name, p in self.model.named_parameters():
            g = gradients.get(name)
            # A copy: arrays off the wire are read-only views of the received message.
            p.grad = None if g is None else torch.as_tensor(np.array(g), device=self.device)
        if self.finite_update(None, None):
            self.optimizer.step()
        self.num_updates += 1

    # --- weights and state ---

    def get_weights(self) -> dict[str, np.ndarray]:
        return weights_to_numpy(self.model)

    def set_weights(self, weights: dict[str, Any]) -> None:
        load_weights(self.model, weights)

    def get_state(self) -> dict[str, Any]:
        # Copies, as get_weights: an update may run while the state is on its way.
        return {"model": {k: v.detach().clone() for k, v in self.model.state_dict().items()},
                "optimizer": self.for_learning().optimizer.state_dict(),
                "state": dict(self.state), "num_updates": self.num_updates,
                "num_env_steps_trained": self.num_env_steps_trained,
                "global_timestep": self.global_timestep}

    def set_state(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        if getattr(self.model, "optimizer_state_obsolete", False):
            # Weights of an older layout, laid out anew (rl/lstm_model.py): the saved moments
            # belong to other parameters.
            logger.warning("this checkpoint's weights are of an older model layout; they "
                           "load, and the optimizer starts afresh")
        else:
            self.for_learning().optimizer.load_state_dict(state["optimizer"])
        self.state = dict(state["state"])
        self.num_updates = state["num_updates"]
        self.num_env_steps_trained = state["num_env_steps_trained"]
        self.global_timestep = int(state.get("global_timestep", 0))

    def export_model(self, export_dir: str, onnx: int | None = None) -> str:
        """The model as TorchScript (or ONNX with ``onnx=OPSET``), loadable without rlmesh."""
        from rlmesh.policy.export import export_model

        return str(export_model(self.model, self.observation_space, export_dir, onnx))


def _compiled_loss(policy: TorchPolicy) -> Any:
    """``policy.loss`` through torch.compile (``torch_compile_learner``), in place of the
    method on this learner's copy. Shapes vary from batch to batch (valid samples, the last
    minibatch): compiled as dynamic."""
    cfg = policy.config
    return torch.compile(policy.loss, backend=cfg.torch_compile_learner_dynamo_backend,
                         mode=cfg.torch_compile_learner_dynamo_mode, dynamic=True)

