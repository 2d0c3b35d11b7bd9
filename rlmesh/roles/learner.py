"""The learner: owns the model and optimizer on its device and runs the update loop.

What to compute from a batch (values, advantages) and what to minimise come from the
algorithm (``prepare_batch``, ``compute_loss``, ``after_update``); the learner does the
epochs, minibatches, learning-rate schedule and gradient clipping. A ``LearnerGroup``
hides whether that happens in the driver process or in a learner process.
"""

from __future__ import annotations

from typing import Any, Protocol

import gymnasium as gym
import numpy as np
import torch

from rlmesh.algorithms.config import AlgorithmConfig, ConfigError
from rlmesh.algorithms.schedules import value_at
from rlmesh.envs import import_object, space_from_data, space_to_data
from rlmesh.rl.batch import minibatches
from rlmesh.rl.distributions import distribution_for
from rlmesh.rl.models import build_model
from rlmesh.rl.optim import Adam
from rlmesh.runtime import Actor


class LearnerHooks(Protocol):
    """The algorithm-specific part of an update (implemented by the algorithm class)."""

    @staticmethod
    def prepare_batch(learner: "Learner", batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Time-major fragments [T, B] in, flat train samples [N] out (values, advantages)."""

    @staticmethod
    def compute_loss(learner: "Learner", mb: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The loss of one minibatch, and statistics to report."""

    @staticmethod
    def after_update(learner: "Learner", stats: dict[str, float]) -> None:
        """Adjust learner state after all epochs (e.g. PPO's KL coefficient)."""


def weights_to_numpy(model: torch.nn.Module) -> dict[str, np.ndarray]:
    """A copy of ``model``'s state_dict as numpy arrays. A copy even on the CPU, where
    ``.numpy()`` would share the parameters' memory: the arrays are published or sent
    while the next update changes the parameters in place."""
    return {k: v.detach().to("cpu", copy=True).numpy() for k, v in model.state_dict().items()}


def load_weights(model: torch.nn.Module, weights: dict[str, Any]) -> None:
    state = {k: torch.as_tensor(np.array(v)) for k, v in weights.items()}
    model.load_state_dict(state)


class Learner:
    """One model and optimizer, updated from batches of fragments."""

    def __init__(self, config: AlgorithmConfig, obs_space: gym.Space, action_space: gym.Space,
                 hooks: type[LearnerHooks], device: str = "cpu") -> None:
        self.config = config
        self.hooks = hooks
        self.device = torch.device(device)
        # torch's default of a thread per core made an update of a small MLP 5-30x slower
        # on 2 cores (OpenMP threads spinning against the env runners and the event loop);
        # "auto" is one thread, as RLlib reserves one CPU per learner by default.
        threads = config.num_cpus_per_learner
        torch.set_num_threads(1 if threads == "auto" else max(1, int(threads)))
        self.obs_space, self.action_space = obs_space, action_space
        self.model = build_model(obs_space, action_space, config.model).to(self.device)
        self.dist_cls, _ = distribution_for(action_space, config.model.get("squash_actions", False))
        make_optimizer = getattr(hooks, "make_optimizer", None)
        self.optimizer = (make_optimizer(self) if make_optimizer is not None
                          else Adam(self.model.parameters(), lr=config.lr))
        self.state: dict[str, float] = {}  # algorithm state that checkpoints keep (kl_coeff)
        self.num_updates = 0
        self.num_env_steps_trained = 0
        self.timesteps = 0  # env steps sampled, as of the batch in hand (schedules read it)
        self.data_parallel: Any = None  # a DataParallel when learners train together
        after = getattr(config, "after_train_step", None)
        self._after_train_step = import_object(after) if isinstance(after, str) else after

    def current_lr(self, timesteps: int) -> float:
        if self.config.lr_schedule:
            return float(value_at(self.config.lr_schedule, timesteps))
        return self.config.lr

    def update_from_episodes(self, fragments: list[dict[str, Any]], timesteps: int) -> dict[str, float]:
        """Update from episode chunks as env runners ship them (time-major fragments)."""
        return self.update_from_batch(merge_fragments(fragments), timesteps)

    def update_from_batch(self, batch: dict[str, Any], timesteps: int,
                          num_epochs: int | None = None) -> dict[str, float]:
        """``num_epochs`` (default: the config's) passes of minibatch SGD over one batch;
        returns mean statistics."""
        self.timesteps = timesteps
        arrays = {k: v for k, v in batch.items() if _is_array(v)}
        if self.device.type == "cuda":  # from page-locked host memory, without blocking
            from rlmesh.roles.data_parallel import to_device

            tensors = to_device(arrays, self.device)
        else:
            tensors = {k: _tensor(v, self.device) for k, v in arrays.items()}
        train = self.hooks.prepare_batch(self, tensors)
        # A hook may keep the batch time-major and step on all of it at once (IMPALA's
        # V-trace from the loss's own forward pass): no minibatches to cut then.
        whole = bool(train.pop("_whole_batch", False))
        n = int(train["mask"].sum()) if whole else len(next(iter(train.values())))
        lr = self.current_lr(timesteps)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        cfg = self.config
        mb_size = min(cfg.minibatch_size or n, n)
        # Only minibatches draw from it (seeding from the OS costs ~35 us an update here).
        rng = None if whole else np.random.default_rng(
            None if cfg.seed is None else cfg.seed + self.num_updates)
        sums: dict[str, float] = {}
        count = 0
        for _ in range(cfg.num_epochs if num_epochs is None else num_epochs):
            for idx in ([None] if rng is None else minibatches(n, mb_size, rng)):
                if idx is None:
                    mb = train
                else:
                    index = torch.as_tensor(idx, device=self.device)
                    mb = {k: v[index] for k, v in train.items()}
                loss, stats = self.hooks.compute_loss(self, mb)
                self.optimizer.zero_grad(set_to_none=True)
                loss.backward()
                if self.data_parallel is not None:  # every learner steps on the mean gradient
                    self.data_parallel.average_gradients(self.model.parameters())
                if cfg.grad_clip is not None:
                    stats["gradients_norm"] = self._clip_gradients()
                self.optimizer.step()
                for k, v in stats.items():
                    sums[k] = sums.get(k, 0.0) + float(v)
                count += 1
        result = {k: v / max(count, 1) for k, v in sums.items()}
        self.num_updates += 1
        self.num_env_steps_trained += n
        self.hooks.after_update(self, result)
        if self._after_train_step is not None:
            self._after_train_step(self, result)
        result.update(cur_lr=lr, num_grad_updates=count, num_env_steps_trained=n, **self.state)
        return result

    def _clip_gradients(self) -> torch.Tensor:
        """Clip as ``grad_clip_by`` says; returns the global gradient norm before clipping."""
        cfg, params = self.config, [p for p in self.model.parameters() if p.grad is not None]
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

    # --- weights and state ---

    def get_weights(self) -> dict[str, np.ndarray]:
        return weights_to_numpy(self.model)

    def set_weights(self, weights: dict[str, Any]) -> None:
        load_weights(self.model, weights)

    def get_state(self) -> dict[str, Any]:
        # Plain dicts: the state crosses a socket when the learner has a process of its own.
        # Copies, as get_weights: an update may run while the reply is on its way.
        return {"model": {k: v.detach().clone() for k, v in self.model.state_dict().items()},
                "optimizer": self.optimizer.state_dict(),
                "state": dict(self.state), "num_updates": self.num_updates,
                "num_env_steps_trained": self.num_env_steps_trained}

    def set_state(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.state = dict(state["state"])
        self.num_updates = state["num_updates"]
        self.num_env_steps_trained = state["num_env_steps_trained"]


def merge_fragments(fragments: list[dict[str, Any]]) -> dict[str, np.ndarray]:
    """Fragments side by side along B, as one time-major batch [T, B].

    Fragments of fewer rows (runners may differ by a step, complete-episode fragments by
    more) are padded at the end with masked rows marked terminated; a padded column's last
    real step, if not already done, becomes a truncation that bootstraps from its next_obs.
    """
    # Fragments without steps (an idle policy server's) only carry episode ends.
    fragments = [f for f in fragments if f["obs"].shape[0] and f["obs"].shape[1]]
    t_max = max(f["obs"].shape[0] for f in fragments)
    cols: dict[str, list[np.ndarray]] = {k: [] for k in _TIME_MAJOR}
    next_obs, trunc_index, trunc_obs = [], [], []
    offset = 0
    for f in fragments:
        t, b = f["obs"].shape[:2]
        pad = t_max - t
        ti, to = np.asarray(f["trunc_index"]).reshape(-1, 2), np.asarray(f["trunc_obs"])
        for k in _TIME_MAJOR:
            a = np.asarray(f[k])
            if pad:
                filler = np.zeros((pad, *a.shape[1:]), dtype=a.dtype)
                if k == "terminateds":
                    filler[:] = True
                a = np.concatenate([a, filler])
            cols[k].append(a)
        if pad:
            done = np.asarray(f["terminateds"][t - 1]) | np.asarray(f["truncateds"][t - 1])
            open_cols = np.flatnonzero(~done)
            cols["truncateds"][-1] = cols["truncateds"][-1].copy()
            cols["truncateds"][-1][t - 1, open_cols] = True
            ti = np.concatenate([ti, np.stack([np.full_like(open_cols, t - 1), open_cols], 1)])
            to = np.concatenate([to.reshape(-1, *f["next_obs"].shape[1:]), f["next_obs"][open_cols]])
        trunc_index.append(ti + [0, offset])
        trunc_obs.append(to.reshape(-1, *f["next_obs"].shape[1:]))
        next_obs.append(f["next_obs"])
        offset += b
    batch = {k: np.concatenate(v, axis=1) for k, v in cols.items()}
    batch["next_obs"] = np.concatenate(next_obs)
    batch["trunc_index"] = np.concatenate(trunc_index).astype(np.int64)
    batch["trunc_obs"] = np.concatenate(trunc_obs)
    return batch


_TIME_MAJOR = ("obs", "actions", "action_logp", "action_dist_inputs", "rewards",
               "terminateds", "truncateds", "mask")


def _is_array(v: Any) -> bool:
    return isinstance(v, (np.ndarray, torch.Tensor))


def _tensor(v: Any, device: torch.device) -> torch.Tensor:
    if isinstance(v, torch.Tensor):
        return v.to(device)
    if not v.flags.writeable:  # a view of a receive buffer: torch wants its own memory
        v = v.copy()
    return torch.from_numpy(v).to(device)


class LearnerActor(Actor):
    """A learner in its own process (``num_learners=1``)."""

    def __init__(self, config: dict[str, Any], config_cls: str, spaces: list[Any],
                 hooks: str, device: str = "cpu") -> None:
        cfg = import_object(config_cls).from_dict(config)
        obs_space, action_space = (space_from_data(s) for s in spaces)
        self.learner = Learner(cfg, obs_space, action_space, import_object(hooks), device)

    def update(self, batch: dict[str, Any], timesteps: int) -> dict[str, float]:
        return self.learner.update_from_batch(batch, timesteps)

    def get_weights(self) -> dict[str, np.ndarray]:
        return self.learner.get_weights()

    def set_weights(self, weights: dict[str, Any]) -> None:
        self.learner.set_weights(weights)

    def get_state(self) -> dict[str, Any]:
        return self.learner.get_state()

    def set_state(self, state: dict[str, Any]) -> None:
        self.learner.set_state(state)


class LearnerGroup:
    """One learner, local (``num_learners=0``) or in its own process (``num_learners=1``).

    Several data-parallel learners come with the IMPALA issue; asking for them now is a
    clear error rather than a silent single learner.
    """

    def __init__(self, config: AlgorithmConfig, obs_space: gym.Space, action_space: gym.Space,
                 hooks: type[LearnerHooks]) -> None:
        if config.num_learners > 1:
            raise ConfigError(f"num_learners={config.num_learners}: data-parallel learners are "
                              "not available yet; use num_learners=0 (in the driver) or 1")
        self.config = config
        self.local: Learner | None = None
        self.remote: Any = None  # ActorHandle, set by start_remote()
        if config.num_learners == 0:
            device = "cuda" if config.num_gpus_per_learner and torch.cuda.is_available() else "cpu"
            self.local = Learner(config, obs_space, action_space, hooks, device)
        self._spaces = [space_to_data(obs_space), space_to_data(action_space)]
        self._hooks_path = f"{hooks.__module__}:{hooks.__qualname__}"

    async def start_remote(self, job: Any) -> None:
        if self.local is not None:
            return
        cfg = self.config
        device = "cuda" if cfg.num_gpus_per_learner else "cpu"
        threads = cfg.num_cpus_per_learner if isinstance(cfg.num_cpus_per_learner, (int, float)) else 1
        self.remote = await job.spawn(
            LearnerActor, cfg.to_dict(), f"{type(cfg).__module__}:{type(cfg).__qualname__}",
            self._spaces, self._hooks_path, device, name="learner",
            env={"OMP_NUM_THREADS": str(max(1, int(threads)))})
