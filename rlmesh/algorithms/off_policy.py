"""The off-policy family's shared plumbing (DQN, SAC, TD3, DDPG): a replay buffer fed with
n-step transitions, gradient steps at ``training_intensity``, target networks.

How a replay-based algorithm is written on it
---------------------------------------------
- **Config**: subclass ``OffPolicyConfig`` (``off_policy_config.py``: replay_buffer_config,
  n_step, training_intensity, num_steps_sampled_before_learning_starts,
  target_network_update_freq, tau, store_buffer_in_checkpoints); add the loss's settings.
- **Learner side**: subclass ``OffPolicyTorchPolicy``. ``make_model`` builds every network
  the loss needs as one ``nn.Module`` (SAC: actor, twin critics, log alpha as submodules);
  ``self.target_model`` is its copy, made by ``for_learning`` (override ``target_modules``
  to copy only part). Write ``loss(mb) -> (loss, stats)`` for one minibatch of transitions
  (``rl/replay.py``: ``obs, actions, rewards`` (n-step), ``next_obs, terminateds,
  discounts`` (gamma**k, 0 after a termination: every target is ``r + discounts * V'``),
  ``weights`` (importance weights; 1 without prioritized replay)). ``stats["td_error"]``,
  a ``[B]`` tensor, becomes the sampled transitions' new priorities (without it they
  stay). The update runs the one minibatch loop (``policy/sgd.py``): one gradient step
  per replayed minibatch, the same optimizer step, clipping and statistics as every policy;
  a loss over several networks steps them all at once (``rl/optim.Optimizers``), and
  ``before_gradient_step`` says what the coming step moves (TD3). Targets are updated by
  ``maybe_update_target`` (every ``target_network_update_freq`` env steps, or every
  gradient step when 0, by ``tau``).
  Checkpoints keep the target network and ``self.state``; ``get_weights`` adds
  ``_timestep`` (env steps sampled) so runner-side exploration schedules follow the run.
- **Runner side**: the class ``runner_class`` names acts with exploration (epsilon-greedy,
  Gaussian or OU noise) and must declare ``t`` in its ``view_requirements`` so that n-step
  transitions never join two episodes (``rl/nstep.py``).
- **Algorithm**: subclass ``OffPolicy``; override ``check_spaces`` to refuse spaces the
  loss cannot serve. Its ``training_step`` reads top to bottom: sample one round of
  fragments, store their n-step transitions, owe ``training_intensity`` worth of gradient
  steps, sample them all as one ``[K, B]`` batch for one learner call, put the TD errors
  back as priorities, publish the weights. From ``train()`` to DQN's loss: train ->
  OffPolicy.training_step -> Learner.update_from_batch -> OffPolicyTorchPolicy.update ->
  loss.

The replay buffer lives in the driver next to the learner (RLlib's local buffer); sharded
replay actors (APEX) would stand behind the same ``add``/``sample``/``update_priorities``.
Multi-agent: a buffer and an n-step builder per policy (``self.replays``), fed with that
policy's part of each fragment; each trained policy learns from its own buffer.
"""

from __future__ import annotations

import copy
import logging
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rlmesh.driver.algorithm import Algorithm
from rlmesh.driver.env_runner_group import synchronous_parallel_sample
from rlmesh.algorithms.off_policy_config import OffPolicyConfig
from rlmesh.config.base import ConfigError
from rlmesh.config.multi_agent import trainable
from rlmesh.env.registry import as_space
from rlmesh.policy.sgd import MinibatchSGD
from rlmesh.policy.torch_policy import TorchPolicy, load_weights
from rlmesh.rl.columns import DEFAULT_POLICY_ID
from rlmesh.rl.nstep import NStepBuilder
from rlmesh.rl.replay import (PrioritizedReplayBuffer, ReplayBuffer, ReplayMemoryError,
                              transition_columns)

log = logging.getLogger(__name__)

REPLAY_FILE = "replay.npz"


def make_replay(config: OffPolicyConfig, obs_space: Any, action_space: Any) -> ReplayBuffer:
    """The buffer replay_buffer_config describes; refused (ReplayMemoryError) when it would
    not fit this machine's available memory."""
    rb = config.replay_settings()
    specs = transition_columns(obs_space, action_space)
    if config.prioritized_replay:
        return PrioritizedReplayBuffer(rb["capacity"], specs, rb["prioritized_replay_alpha"],
                                       rb["prioritized_replay_eps"], seed=config.seed)
    return ReplayBuffer(rb["capacity"], specs, seed=config.seed)


def replay_beta(config: OffPolicyConfig, timestep: int) -> float:
    """prioritized_replay_beta, annealed linearly over the env steps sampled."""
    return config.replay_beta(timestep)


class OffPolicyTorchPolicy(TorchPolicy):
    """Learner side of a replay-based algorithm: K gradient steps per update on a
    ``[K, B, ...]`` batch of transitions, target networks, TD errors out."""

    target_model: torch.nn.Module | None = None

    def target_modules(self) -> torch.nn.Module:
        """What the target network copies (the whole model by default)."""
        return self.model

    def for_learning(self) -> "OffPolicyTorchPolicy":
        super().for_learning()
        if self.target_model is None:
            self.target_model = copy.deepcopy(self.target_modules()).requires_grad_(False)
            self.state.setdefault("last_target_update_ts", 0)
        return self

    def maybe_update_target(self) -> None:
        cfg = self.config
        due = (cfg.target_network_update_freq == 0 or self.global_timestep
               - self.state["last_target_update_ts"] >= cfg.target_network_update_freq)
        if due:
            self.update_target(cfg.tau)
            self.state["last_target_update_ts"] = self.global_timestep
            self.state["num_target_updates"] = self.state.get("num_target_updates", 0) + 1

    @torch.no_grad()
    def update_target(self, tau: float) -> None:
        online = list(self.target_modules().parameters())
        target = list(self.target_model.parameters())
        if tau >= 1.0:
            torch._foreach_copy_(target, online)
        else:  # target <- target + tau * (online - target)
            torch._foreach_lerp_(target, online, tau)

    def update(self, batch: dict[str, Any], timesteps: int, **_: Any) -> dict[str, Any]:
        """One gradient step per leading row of ``batch`` (``[K, B, ...]`` replayed
        transitions) through the one minibatch loop (``MinibatchSGD``); the target network
        synced by ``maybe_update_target``. Mean statistics, and ``td_error`` ``[K, B]``
        (NaN where a step was skipped): the sampled transitions' new priorities."""
        sgd = MinibatchSGD(self, timesteps)
        train = sgd.on_device({k: v for k, v in batch.items() if k != "batch_indexes"})
        # On the learner's device: one copy to the host after the K steps, not one per step.
        td = torch.full(train["rewards"].shape[:2], float("nan"), device=self.device)
        # Updated by env steps, the target network changes at most once per call (first):
        # what it computes for all K minibatches is then one batched pass.
        fixed_target = self.config.target_network_update_freq > 0
        if fixed_target:
            self.maybe_update_target()
            with torch.no_grad():
                train.update(self.target_outputs(train))
        for k, mb in enumerate(sgd.rows(train)):
            if not fixed_target:
                self.maybe_update_target()
            self.before_gradient_step()
            with self.precision():
                loss, stats = self.loss(mb)
            td_k = stats.pop("td_error", None)  # none: the priorities stay as they are
            if sgd.step(loss, stats) and td_k is not None:
                td[k] = td_k.detach().float()
        result = sgd.finish()
        result["td_error"] = td.cpu().numpy()
        return result

    def before_gradient_step(self) -> None:
        """Called before the loss of each gradient step (TD3: whether it moves the actor)."""

    def target_outputs(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Columns the target network computes for a whole ``[K, B, ...]`` batch at once
        (when it stays fixed over the K steps), added to each minibatch; the loss computes
        them itself where absent."""
        return {}

    # --- weights and state ---

    def get_weights(self) -> dict[str, np.ndarray]:
        return {**super().get_weights(), "_timestep": np.array(self.global_timestep, np.int64)}

    def set_weights(self, weights: dict[str, Any]) -> None:
        load_weights(self.model, {k: v for k, v in weights.items() if not k.startswith("_")})

    def get_state(self) -> dict[str, Any]:
        state = super().get_state()
        state["target_model"] = {k: v.detach().clone()
                                 for k, v in self.target_model.state_dict().items()}
        return state

    def set_state(self, state: dict[str, Any]) -> None:
        super().set_state(state)
        self.target_model.load_state_dict(state["target_model"])


class OffPolicy(Algorithm):
    """Base of replay-based algorithms: see the module docstring."""

    config_class = OffPolicyConfig
    config: OffPolicyConfig

    def check_spaces(self, obs_space: Any, action_space: Any) -> None:
        """Raise a one-line error for spaces this algorithm cannot learn on."""

    def _policy_specs(self) -> dict[str, dict[str, Any]]:
        # Runs before any process starts: a bad space or a buffer too large fails here.
        specs = super()._policy_specs()
        spaces = {pid: (as_space(s["observation_space"]), as_space(s["action_space"]))
                  for pid, s in specs.items()}
        for obs_space, action_space in spaces.values():
            self.check_spaces(obs_space, action_space)
        try:
            self.replays = {pid: make_replay(self.config, *sp) for pid, sp in spaces.items()}
        except ReplayMemoryError as e:  # a setting to change: the CLI's one-line error
            raise ConfigError(str(e)) from None
        self.nsteps = {pid: NStepBuilder(self.config.n_step, self.config.gamma)
                       for pid in specs}
        # Single-agent: the one buffer (results, checkpoints); multi-agent: the first's.
        first = DEFAULT_POLICY_ID if DEFAULT_POLICY_ID in specs else next(iter(specs))
        self.replay, self.nstep = self.replays[first], self.nsteps[first]
        self._updates_owed = 0.0
        return specs

    def training_step(self) -> dict[str, dict[str, float]]:
        """Round after round until ``min_sample_timesteps_per_iteration`` env steps: sample
        -> replay add (n-step transitions) -> for the gradient steps owed, replay sample ->
        update (K steps; the target network synced in the policy's update) -> priorities
        back -> publish. Learner statistics of the last update by policy id."""
        cfg = self.config
        stats: dict[str, dict[str, float]] = {}
        trained = 0  # over every update of the iteration; the other statistics: the last's
        start = self.env_runners.env_steps
        while True:
            with self.timer("sample_time_s"):
                fragments = synchronous_parallel_sample(self.env_runners, max_env_steps=1)
            steps = self.store(fragments)
            learning = self.timesteps_sampled >= cfg.num_steps_sampled_before_learning_starts
            k_steps = self.owed_gradient_steps(steps, len(fragments)) if learning else 0
            samples, batches = self.replay_sample(k_steps)
            if batches:
                with self.timer("learn_time_s"):
                    stats = self.learner_group.update_from_batch(
                        batches, timesteps=self.timesteps_sampled)
                self.update_priorities(samples, stats)
                trained += sum(int(s.get("num_env_steps_trained", 0)) for s in stats.values())
                self.env_runners.sync_weights()
            if self.env_runners.env_steps - start >= cfg.min_sample_timesteps_per_iteration:
                if len(stats) == 1:
                    next(iter(stats.values()))["num_env_steps_trained"] = trained
                return stats

    def store(self, fragments: list[dict[str, Any]]) -> int:
        """The fragments' n-step transitions into the buffer; the env steps they hold."""
        for fragment in fragments:
            parts = fragment.get("policy_batches")
            if parts is not None:  # multi-agent: each policy's agents into its own buffer
                for pid, part in parts.items():
                    if pid in self.replays and part["env_steps"]:
                        part.setdefault("worker_index", fragment.get("worker_index", 0))
                        transitions = self.nsteps[pid].add_fragment(part, cut=True)
                        if transitions:
                            self.replays[pid].add(transitions)
            elif fragment["env_steps"]:
                transitions = self.nstep.add_fragment(fragment)
                if transitions:
                    self.replay.add(transitions)
        return sum(int(f["env_steps"]) for f in fragments)

    def owed_gradient_steps(self, steps: int, rounds: int) -> int:
        """Gradient steps due for ``steps`` new env steps: ``training_intensity`` samples
        per env step, else one step per fragment sampled."""
        cfg = self.config
        if cfg.training_intensity is None:
            self._updates_owed += rounds
        else:
            self._updates_owed += steps * cfg.training_intensity / cfg.train_batch_size
        k_steps = int(self._updates_owed)
        self._updates_owed -= k_steps
        return k_steps

    def replay_sample(self, k_steps: int) -> tuple[dict[str, Any], dict[str, Any]]:
        """``k_steps`` minibatches of ``train_batch_size`` from each trained policy's buffer:
        the samples drawn (their indexes) and the ``[K, B, ...]`` batches by policy id."""
        size = self.config.train_batch_size
        beta = replay_beta(self.config, self.timesteps_sampled)
        samples, batches = {}, {}
        for pid, replay in self.replays.items() if k_steps else ():
            if len(replay) == 0 or (len(self.replays) > 1 and not trainable(self.config, pid)):
                continue
            samples[pid] = sample = replay.sample(k_steps * size, beta=beta)
            batch = {k: v.reshape(k_steps, size, *v.shape[1:]) for k, v in sample.items()}
            if "weights" not in batch:
                batch["weights"] = np.ones((k_steps, size), np.float32)
            batches[pid] = batch
        return samples, batches

    def update_priorities(self, samples: dict[str, Any], stats: dict[str, dict[str, Any]]
                          ) -> None:
        """The update's TD errors (taken out of ``stats``) as the replayed samples' new
        priorities; a step not applied (NaN) leaves its samples' priorities as they were."""
        for pid, sample in samples.items():
            if pid not in stats or "td_error" not in stats[pid]:
                continue
            td = np.asarray(stats[pid].pop("td_error")).reshape(-1)
            ok = np.isfinite(td)
            self.replays[pid].update_priorities(sample["batch_indexes"][ok], td[ok])

    def iteration_result(self, start: float, learner_stats: dict[str, dict[str, Any]]
                         ) -> dict[str, Any]:
        result = super().iteration_result(start, learner_stats)
        replays = self.replays.values()
        result.update(replay_buffer_size_bytes=sum(r.size_bytes for r in replays),
                      replay_buffer_num_transitions=sum(len(r) for r in replays),
                      replay_buffer_num_added=sum(r.num_added for r in replays),
                      num_nstep_steps_dropped=sum(n.counters["num_nstep_steps_dropped"]
                                                  for n in self.nsteps.values()))
        return result

    # --- checkpoints: the buffer's contents with store_buffer_in_checkpoints ---

    def save(self, checkpoint_dir: str | Path | None = None) -> str:
        path = super().save(checkpoint_dir)
        if self.config.store_buffer_in_checkpoints:
            state = self.replay.get_state()
            tmp = Path(path) / f".{REPLAY_FILE}.tmp"
            with open(tmp, "wb") as f:
                np.savez(f, **{f"col_{k}": v for k, v in state.pop("columns").items()},
                         **{k: np.asarray(v) for k, v in state.items()})
            tmp.replace(Path(path) / REPLAY_FILE)
        return path

    def restore(self, path: str | Path, trust_code: bool = False) -> None:
        super().restore(path, trust_code)
        file = Path(path) / REPLAY_FILE
        if self.config.store_buffer_in_checkpoints and file.is_file():
            with np.load(file, allow_pickle=False) as data:
                state = {k: data[k] for k in data.files if not k.startswith("col_")}
                state["columns"] = {k[4:]: data[k] for k in data.files if k.startswith("col_")}
            self.replay.set_state(state)
