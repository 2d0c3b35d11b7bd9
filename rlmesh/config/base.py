"""AlgorithmConfig: the settings every algorithm shares. Each is one dataclass field made
by ``setting()``; its metadata (doc, builder group, aliases, bounds) drives the RLlib-style
builders, from_dict/to_dict, validate() and fields_table(), so nothing is written twice."""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from rlmesh.config.evaluation import EvaluationSettings
from rlmesh.config.multi_agent import MultiAgentSettings
from rlmesh.config.offline import OfflineSettings
from rlmesh.config.schedules import validate_schedule, value_at
from rlmesh.config.settings import (  # noqa: F401  (ConfigError, Setting, GROUPS: public here)
    _UNSET, GROUPS, ConfigError, Setting, Settings, _jsonable, setting,
)
from rlmesh.rl.spec import MODEL_DEFAULTS
from rlmesh.rl.spec import custom_model_path as _custom_model_path


@dataclass(kw_only=True)
class AlgorithmConfig(EvaluationSettings, MultiAgentSettings, OfflineSettings, Settings):
    """Settings shared by every algorithm, set by chained builders as in RLlib::

        PPOConfig().environment("CartPole-v1").env_runners(num_env_runners=2).training(lr=3e-4)

    A subclass adds its own settings and changes inherited defaults with
    ``class PPOConfig(AlgorithmConfig, defaults={"lr": 5e-5})``. The evaluation,
    multi_agent and offline_data groups are declared in their own modules and mixed in.
    """

    # --- environment ---
    env: str | Callable | None = setting(
        None, "environment",
        doc="The environment: a gymnasium id ('CartPole-v1') or the import path "
            "'pkg.module:make_env' of a factory called with env_config. to_dict() writes a "
            "class or function given from Python as its import path.")
    env_config: dict = setting(
        {}, "environment",
        doc="Passed to the env: keyword arguments of gymnasium.make for a registered id, "
            "the one argument of a factory.")
    clip_rewards: bool | float | None = setting(
        None, "environment",
        doc="True: train on the reward's sign (as for Atari); a float c: clip rewards to "
            "[-c, c]; None or False: raw rewards.")
    normalize_actions: bool = setting(
        True, "environment",
        doc="The policy acts in [-1, 1] on Box action spaces; actions are rescaled to the "
            "space's bounds before the env sees them.")
    clip_actions: bool = setting(
        True, "environment",
        doc="Clip Box actions to the space's bounds before the env sees them (when "
            "normalize_actions does not rescale them). RLlib's default is False; here True, "
            "as gymnasium envs assume actions inside the bounds. The stored and scored "
            "action is always the one sampled.")
    observation_space: Any = setting(
        None, "environment",
        doc="The observation space, for runs without an env of their own (external "
            "simulators through policy_server_address): a gymnasium space, or its plain-data "
            "form (rlmesh.envs.space_to_data). None: taken from the env.")
    action_space: Any = setting(
        None, "environment",
        doc="The action space, as observation_space.")

    # --- env_runners ---
    num_env_runners: int = setting(
        0, "env_runners", ge=0, aliases=("num_workers", "num_rollout_workers"),
        doc="Env-runner processes sampling in parallel; 0 samples in the driver process.")
    num_envs_per_env_runner: int = setting(
        1, "env_runners", ge=1, aliases=("num_envs_per_worker",),
        doc="Envs each runner steps together, with one batched forward pass per step.")
    num_cpus_per_env_runner: float = setting(
        1, "env_runners", ge=0, aliases=("num_cpus_per_worker",),
        doc="CPUs the scheduler reserves for each env runner.")
    num_gpus_per_env_runner: float = setting(
        0, "env_runners", ge=0, aliases=("num_gpus_per_worker",),
        doc="GPUs the scheduler reserves for each env runner (for policy inference).")
    rollout_fragment_length: int | Literal["auto"] = setting(
        200, "env_runners", gt=0,
        doc="Steps per env in each fragment a runner ships; 'auto' splits the train batch "
            "over all envs (see get_rollout_fragment_length).")
    batch_mode: Literal["truncate_episodes", "complete_episodes"] = setting(
        "truncate_episodes", "env_runners",
        doc="'truncate_episodes': fragments of exactly rollout_fragment_length steps per "
            "env, episodes cut at their edges; 'complete_episodes': a fragment runs on to "
            "the ends of its episodes.")
    explore: bool = setting(
        True, "env_runners",
        doc="Sample actions from the policy's distribution; False takes its likeliest one.")
    policy_server_address: str | None = setting(
        None, "env_runners",
        doc="Take experience from PolicyClients (rlmesh.client) embedded in external "
            "simulators instead of stepping envs (RLlib's PolicyServerInput): runners listen "
            "here, e.g. 'tcp://127.0.0.1:9900', or '9900' for that (runner i > 1 on the port "
            "+ i - 1). Needs "
            "observation_space and action_space; env may be None.")
    policy_server_idle_timeout_s: float = setting(
        10.0, "env_runners", gt=0,
        doc="A policy server returns what it has (maybe nothing: an empty iteration) once "
            "this long passes without client experience, so training never blocks for ever.")
    policy_server_episode_timeout_s: float = setting(
        60.0, "env_runners", gt=0,
        doc="A client episode with no call for this long is closed (its client is gone): "
            "its complete steps are trained on as a truncated episode.")
    policy_server_curve_keys: str | None = setting(
        None, "env_runners",
        doc="A directory of CURVE keys (rlmesh.client.make_curve_keys): with it, a policy "
            "server on tcp:// encrypts and accepts only clients whose public key file is in "
            "its clients/ folder.")
    policy_server_spin_wait_us: float = setting(
        300.0, "env_runners", ge=0,
        doc="After answering, a policy server polls this many microseconds for the next "
            "request before its loop sleeps: a simulator waiting on get_action is spared "
            "the server's wake-up from sleep (about half the round trip on a 2-core VM). "
            "It spins only while requests come that fast; 0 never spins (a server sharing "
            "its cores with CPU-bound simulators).")
    policy_server_insecure_plaintext: bool = setting(
        False, "env_runners",
        doc="Let a policy server on tcp:// run without CURVE: any process that reaches the "
            "port may then report experience. Without it, a tcp:// server uses "
            "policy_server_curve_keys, or makes keys in ~/.rlmesh/policy_server_keys (see "
            "docs/security.md).")
    policy_server_max_abs_reward: float = setting(
        1e6, "env_runners", gt=0,
        doc="A policy server refuses a client reward beyond +-this, and an episode return "
            "beyond +-this x policy_server_max_episode_steps (a fake return of 1e300 "
            "otherwise became the mean and stopped the run as a success).")
    policy_server_max_episode_steps: int = setting(
        100_000, "env_runners", ge=1,
        doc="A policy server refuses steps past this many in one client episode.")
    policy_server_max_open_episodes_per_client: int = setting(
        1_000, "env_runners", ge=1,
        doc="Open episodes one client (one CURVE key, else one connection) may hold; "
            "starting one more closes that client's least recently used one.")
    policy_server_max_open_episodes: int = setting(
        10_000, "env_runners", ge=1,
        doc="Open episodes over all clients; starting one more closes the least recently "
            "used one (closed episodes train as truncated, and never count in the "
            "episode_reward_mean).")
    policy_server_max_message_mb: float = setting(
        16.0, "env_runners", gt=0,
        doc="The largest message (MiB) a policy server accepts from a client; a larger "
            "frame drops that client's connection. Raise it for large observations.")
    policy_server_max_connections: int = setting(
        1024, "env_runners", ge=1,
        doc="Connections a policy server keeps open; past it, the oldest that never sent "
            "a valid message is closed first, so idle connections cannot lock clients out.")
    observation_filter: Literal["NoFilter", "MeanStdFilter"] = setting(
        "NoFilter", "env_runners",
        doc="'MeanStdFilter': each observation normalised by the running mean and std of "
            "every observation sampled so far, clipped to [-10, 10] (Box observations). Each "
            "runner updates its copy as it samples; the driver merges all runners' new "
            "statistics every iteration and syncs them back; checkpoints keep them and "
            "compute_single_action, rollout and the policy client apply them. 'NoFilter': "
            "observations as the env gives them.")
    enable_connectors: Literal[True] = setting(
        True, "env_runners",
        doc="RLlib's switch for its runner-side connectors; here observations are always "
            "filtered (observation_filter) and stacked (model framestack) in the runner, so "
            "only True is valid (the key exists so that RLlib configs naming it load).")
    sample_timeout_s: float | None = setting(
        60.0, "env_runners", gt=0,
        doc="Seconds to wait for a runner's fragment before treating the runner as failed; "
            "None waits forever.")

    # --- training ---
    gamma: float = setting(0.99, "training", ge=0, le=1, doc="Discount factor of the MDP.")
    lr: float = setting(
        0.001, "training", ge=0,
        doc="Learning rate of the optimizer; lr_schedule replaces it when set.")
    lr_schedule: list | None = setting(
        None, "training",
        doc="Learning rate by env steps sampled, [[timestep, lr], ...], linear between "
            "points; the first value before the first point, the last after the last.")
    grad_clip: float | None = setting(
        None, "training", gt=0,
        doc="Clip gradients at this threshold, as grad_clip_by says; None: no clipping.")
    grad_clip_by: Literal["value", "norm", "global_norm"] = setting(
        "global_norm", "training",
        doc="'global_norm': scale all gradients so their joint L2 norm is at most "
            "grad_clip; 'norm': each tensor's L2 norm; 'value': each element to "
            "[-grad_clip, grad_clip].")
    train_batch_size: int = setting(
        32, "training", gt=0,
        doc="Env steps per training iteration over all learners (ignored when "
            "train_batch_size_per_learner is set).")
    train_batch_size_per_learner: int | None = setting(
        None, "training", gt=0,
        doc="Env steps each learner trains on per iteration; when set, an iteration "
            "trains on this x max(1, num_learners) steps.")
    minibatch_size: int | None = setting(
        None, "training", gt=0, aliases=("sgd_minibatch_size",),
        doc="Env steps per gradient step; None: the whole train batch at once.")
    num_epochs: int = setting(
        1, "training", ge=1, aliases=("num_sgd_iter",),
        doc="Passes over each train batch per iteration.")
    shuffle_batch_per_epoch: bool = setting(
        False, "training",
        doc="Shuffle the train batch before cutting each epoch's minibatches.")
    model: dict = setting(
        MODEL_DEFAULTS, "training", merge=True,
        doc="Network settings in RLlib's names (fcnet_hiddens, fcnet_activation, conv_filters, "
            "vf_share_layers, free_log_std, custom_model, custom_model_config) and "
            "squash_actions (Box actions tanh-squashed into the bounds instead of clipped), "
            "use_lstm and its lstm_* keys and max_seq_len, framestack "
            "(docs/observations_and_memory.md); "
            "every key with its meaning: rlmesh.rl.spec.MODEL_DEFAULTS. A dict given updates "
            "the current one key by key, as in RLlib.")

    # --- rl_module ---
    policy_class: Any = setting(
        None, "rl_module",
        doc="The policy every env runner acts with and the learner trains: a subclass of "
            "rlmesh.policy.Policy (or its import path 'pkg.module:MyPolicy'). None: the "
            "algorithm's own (PPOTorchPolicy for PPO, ...). See docs/policies.md.")

    # --- learners ---
    num_learners: int = setting(
        0, "learners", ge=0, aliases=("num_learner_workers",),
        doc="Learner processes training data-parallel (torch.distributed); 0 trains in the "
            "driver process.")
    num_gpus_per_learner: float = setting(
        0, "learners", ge=0, aliases=("num_gpus_per_learner_worker",),
        doc="GPUs per learner; 0 trains on CPU.")
    num_cpus_per_learner: int | Literal["auto"] = setting(
        "auto", "learners", ge=0, aliases=("num_cpus_per_learner_worker",),
        doc="CPUs per learner; 'auto': 1 on CPU, 0 when the learner has a GPU.")

    # --- resources ---
    num_cpus_for_main_process: float = setting(
        1, "resources", ge=0, aliases=("num_cpus_for_driver", "num_cpus_for_local_worker"),
        doc="CPUs the scheduler reserves for the driver process.")
    fake_gpus: bool = setting(
        False, "resources", key="_fake_gpus",
        doc="Learners that ask for GPUs (num_gpus_per_learner) run on the CPU when no CUDA "
            "device is visible, through the same code path (data-parallel learners in CI).")

    # --- framework ---
    framework_str: Literal["torch"] = setting(
        "torch", "framework", key="framework",
        doc="Deep-learning framework; rlmesh runs torch only (the key exists so that RLlib "
            "configs naming it load).")

    # --- callbacks ---
    callbacks_class: str | type | None = setting(
        None, "callbacks", aliases=("callbacks",),
        doc="Class (or import path 'pkg.module:Class') whose hooks run on episode, sample "
            "and training events; None: no callbacks.")

    # --- reporting ---
    metrics_num_episodes_for_smoothing: int = setting(
        100, "reporting", ge=1,
        doc="episode_reward_mean (and _min, _max, episode_len_mean) are over this many "
            "newest episodes. A short task (Pendulum in 20k steps: 100 episodes in all) "
            "needs a smaller window to see its progress.")

    # --- debugging ---
    seed: int | None = setting(
        None, "debugging",
        doc="Seed for torch, numpy and the envs (each runner and env derives its own from "
            "it); None: unseeded.")
    log_level: Literal["DEBUG", "INFO", "WARN", "WARNING", "ERROR"] = setting(
        "WARN", "debugging", doc="Log level of every rlmesh process.")

    # --- fault_tolerance ---
    restart_failed_env_runners: bool = setting(
        True, "fault_tolerance", aliases=("recreate_failed_env_runners", "recreate_failed_workers"),
        doc="Start an env runner whose process died again, and go on sampling with the "
            "others meanwhile; False: a dead runner stops the run.")
    max_num_env_runner_restarts: int = setting(
        1000, "fault_tolerance", ge=0,
        doc="Restarts allowed per env runner before it is given up.")
    on_nonfinite: Literal["raise", "skip"] = setting(
        "raise", "fault_tolerance",
        doc="A NaN or infinite observation or reward from an env, value in a train batch, "
            "loss or gradient norm: 'raise' stops the run with a one-line error naming it "
            "(such values are bugs to see, not noise to train on); 'skip' drops the episode "
            "(env data) or the batch or update (learner) and counts it in the result "
            "(num_nonfinite_steps_skipped, info/learner/<pid>/num_nonfinite_*_skipped). "
            "An update with a non-finite loss or gradient is never applied.")

    # --- builders: one per group, each taking exactly that group's keys ---

    def environment(self, env=_UNSET, **kwargs):
        """Set the environment group (see ``fields_table("environment")``)."""
        return self._set("environment", {"env": env, **kwargs})

    def env_runners(self, **kwargs):
        """Set the env_runners group (see ``fields_table("env_runners")``)."""
        return self._set("env_runners", kwargs)

    def training(self, **kwargs):
        """Set the training group, the algorithm's own settings included."""
        return self._set("training", kwargs)

    def rl_module(self, **kwargs):
        """Set the policy class (see ``fields_table("rl_module")``)."""
        return self._set("rl_module", kwargs)

    def learners(self, **kwargs):
        """Set the learners group (see ``fields_table("learners")``)."""
        return self._set("learners", kwargs)

    def resources(self, **kwargs):
        """Set the resources group (see ``fields_table("resources")``)."""
        return self._set("resources", kwargs)

    def framework(self, framework=_UNSET, **kwargs):
        """Set the framework group; only "torch" validates."""
        return self._set("framework", {"framework": framework, **kwargs})

    def callbacks(self, callbacks_class=_UNSET, **kwargs):
        """Set the callbacks class (see ``fields_table("callbacks")``)."""
        return self._set("callbacks", {"callbacks_class": callbacks_class, **kwargs})

    def reporting(self, **kwargs):
        """Set the reporting group (see ``fields_table("reporting")``)."""
        return self._set("reporting", kwargs)

    def debugging(self, **kwargs):
        """Set the debugging group (see ``fields_table("debugging")``)."""
        return self._set("debugging", kwargs)

    def build(self):
        """Validate and start the algorithm this config is for (its processes included)."""
        path = getattr(type(self), "algorithm_path", None)
        if path is None:
            raise ConfigError(f"{type(self).__name__} names no algorithm to build")
        module, _, name = path.partition(":")
        return getattr(importlib.import_module(module), name)(self)

    def fault_tolerance(self, **kwargs):
        """Set the fault_tolerance group (see ``fields_table("fault_tolerance")``)."""
        return self._set("fault_tolerance", kwargs)

    # --- plain data ---

    def to_dict(self) -> dict:
        """Every setting under its key, as JSON-able data (classes become import paths)."""
        out = {}
        for f in dataclasses.fields(self):
            key = f.metadata["key"] or f.name
            value = getattr(self, f.name)
            if f.name == "model" and value.get("custom_model") is not None:
                # A class or a registered name crosses processes as its import path.
                value = {**value, "custom_model": _custom_model_path(value["custom_model"])}
            try:
                out[key] = _jsonable(value)
            except (TypeError, ValueError) as e:
                raise ConfigError(f"{key}: {e}") from None
        return out

    # --- derived values ---

    @property
    def total_train_batch_size(self) -> int:
        """Env steps trained on per iteration, over all learners."""
        if self.train_batch_size_per_learner is not None:
            return self.train_batch_size_per_learner * max(1, self.num_learners)
        return self.train_batch_size

    def get_rollout_fragment_length(self, worker_index: int = 0) -> int:
        """Steps per env in one fragment of runner ``worker_index`` (1..num_env_runners;
        0 is the driver's runner when num_env_runners is 0).

        'auto' is total_train_batch_size / (max(1, num_env_runners) x envs per runner).
        When that is not whole, RLlib's rule applies: the first runners take one more step
        per env, so one round of fragments is never short of a train batch (it may exceed
        it by less than num_envs_per_env_runner x num_env_runners steps).
        """
        if self.rollout_fragment_length != "auto":
            return self.rollout_fragment_length
        envs = self.num_envs_per_env_runner
        length, rest = divmod(self.total_train_batch_size, max(1, self.num_env_runners) * envs)
        if rest and (worker_index - 1) * envs < rest:
            return length + 1
        return length

    def resource_request(self) -> list[Any]:
        """What a run of this config asks of the cluster scheduler (``rlmesh launch``), as
        RLlib's default_resource_request: a group with the driver and the learners, packed
        on one node where it fits (they exchange the most data; the driver's bundle holds
        the learner when num_learners is 0), and the env runners spread over the nodes."""
        from rlmesh.runtime.resources import Bundle, PlacementGroup

        auto = self.num_cpus_per_learner == "auto"
        learner_cpus = (0 if self.num_gpus_per_learner else 1) if auto else self.num_cpus_per_learner
        driver = {"CPU": self.num_cpus_for_main_process + self._driver_side_cpus()}
        if self.num_learners == 0:
            driver["GPU"] = self.num_gpus_per_learner
        learners = [Bundle({"CPU": learner_cpus, "GPU": self.num_gpus_per_learner}, f"learner-{i}")
                    for i in range(self.num_learners)]
        runners = [Bundle({"CPU": self.num_cpus_per_env_runner, "GPU": self.num_gpus_per_env_runner},
                          f"env_runner-{i}") for i in range(1, self.num_env_runners + 1)]
        groups = [PlacementGroup((Bundle(driver, "driver"), *learners), "PACK", "learners")]
        if runners:
            groups.append(PlacementGroup(tuple(runners), "SPREAD", "env_runners"))
        if self.evaluation_interval and self.evaluation_num_env_runners:  # started with the run
            groups.append(PlacementGroup(tuple(
                Bundle({"CPU": self.num_cpus_per_env_runner}, f"eval_runner-{i}")
                for i in range(1, self.evaluation_num_env_runners + 1)), "SPREAD",
                "evaluation_runners"))
        return groups

    def _driver_side_cpus(self) -> float:
        """CPUs of processes placed with the driver besides it (IMPALA's aggregators)."""
        return 0

    def lr_at(self, timestep: int) -> float:
        """The learning rate after ``timestep`` env steps sampled."""
        return value_at(self.lr_schedule, timestep) if self.lr_schedule else self.lr

    # --- checks ---

    def _cross_checks(self) -> list[str]:
        """Checks that read several settings; a subclass extends the list."""
        problems = []
        if self.lr_schedule is not None:
            try:
                validate_schedule(self.lr_schedule)
            except ValueError as e:
                problems.append(f"lr_schedule: {e}")
        per_learner = self.train_batch_size_per_learner or self.train_batch_size
        if self.minibatch_size is not None and self.minibatch_size > per_learner:
            problems.append(f"minibatch_size: expected <= the train batch per learner "
                            f"({per_learner}), got {self.minibatch_size}")
        envs = max(1, self.num_env_runners) * self.num_envs_per_env_runner
        if self.rollout_fragment_length == "auto" and self.total_train_batch_size < envs:
            problems.append(f"rollout_fragment_length: 'auto' needs a train batch of at least "
                            f"one step per env ({envs}), got {self.total_train_batch_size}")
        problems += self._policy_server_checks()
        problems += self._offline_checks()
        problems += self._evaluation_checks()
        try:  # the config crosses process boundaries as plain data, never pickled
            self.to_dict()
        except ConfigError as e:
            problems.append(str(e))
        return problems

    def _policy_server_checks(self) -> list[str]:
        problems = []
        timeout = self.sample_timeout_s
        if (self.policy_server_address is not None and timeout is not None
                and timeout <= self.policy_server_idle_timeout_s):
            problems.append(f"sample_timeout_s: must exceed policy_server_idle_timeout_s "
                            f"({self.policy_server_idle_timeout_s}), or an idle policy server "
                            f"counts as failed; got {timeout}")
        for key in ("observation_space", "action_space"):
            value = getattr(self, key)
            if value is None:
                if self.policy_server_address is not None and self.env is None:
                    problems.append(f"{key}: policy_server_address without an env needs the "
                                    f"spaces; set .environment({key}=...)")
                continue
            try:
                from rlmesh.envs import as_space

                as_space(value)
            except (TypeError, ValueError, KeyError) as e:
                problems.append(f"{key}: not a gymnasium space or its data form: {e}")
        return problems
