"""AlgorithmConfig: the settings every algorithm shares. Each is one dataclass field made
by ``setting()``; its metadata (doc, builder group, aliases, bounds) drives the RLlib-style
builders, from_dict/to_dict, validate() and fields_table(), so nothing is written twice."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal

from rlmesh.config.connectors import ConnectorSettings
from rlmesh.config.evaluation import EvaluationSettings
from rlmesh.config.multi_agent import MultiAgentSettings
from rlmesh.config.offline import OfflineSettings
from rlmesh.config.sampling import SamplingSettings
from rlmesh.config.schedules import validate_schedule, value_at
from rlmesh.config.settings import (  # noqa: F401  (ConfigError, Setting, GROUPS: public here)
    _UNSET, GROUPS, ConfigError, Setting, Settings, _jsonable, setting,
    _names as _setting_names,
)
from rlmesh.rl.spec import MODEL_DEFAULTS
from rlmesh.rl.spec import check_model_config as _check_model_config
from rlmesh.rl.spec import custom_model_path as _custom_model_path


@dataclass(kw_only=True)
class AlgorithmConfig(SamplingSettings, EvaluationSettings, MultiAgentSettings, OfflineSettings,
                      ConnectorSettings, Settings):
    """Settings shared by every algorithm, set by chained builders as in RLlib::

        PPOConfig().environment("CartPole-v1").env_runners(num_env_runners=2).training(lr=3e-4)

    A subclass adds its own settings and changes inherited defaults with
    ``class PPOConfig(AlgorithmConfig, defaults={"lr": 5e-5})``. The environment and
    env_runners (sampling.py), evaluation, multi_agent and offline_data groups are declared
    in their own modules and mixed in; fields come in the reverse order of the bases.
    """

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
    learner_class: str | type | None = setting(
        None, "training", aliases=("_learner_class",),
        doc="A subclass of rlmesh.core.learner.Learner (or its import path "
            "'pkg.module:MyLearner') that every learner is built as: its overridden hooks "
            "(compute_loss_for_module, compute_gradients, apply_gradients, "
            "_preprocess_train_data) run in the policies' updates. None: rlmesh's Learner. "
            "See docs/learner.md.")
    model: dict = setting(
        MODEL_DEFAULTS, "training", merge=True,
        doc="Network settings in RLlib's names (fcnet_hiddens, fcnet_activation, conv_filters, "
            "vf_share_layers, free_log_std, custom_model, custom_model_config) and "
            "squash_actions (Box actions tanh-squashed into the bounds instead of clipped), "
            "use_lstm and its lstm_* keys and max_seq_len, framestack, and the Atari "
            "keys dim, grayscale, zero_mean (docs/observations_and_memory.md); "
            "every key with its meaning: rlmesh.rl.spec.MODEL_DEFAULTS. A dict given updates "
            "the current one key by key, as in RLlib.")

    # --- rl_module ---
    policy_class: Any = setting(
        None, "rl_module",
        doc="The policy every env runner acts with and the learner trains: a subclass of "
            "rlmesh.policy.Policy (or its import path 'pkg.module:MyPolicy'). None: the "
            "algorithm's own (PPOTorchPolicy for PPO, ...). See docs/policies.md.")

    module_spec: dict | None = setting(
        None, "rl_module",
        doc="RLlib's rl_module_spec as plain data (set it with "
            ".rl_module(rl_module_spec=RLModuleSpec(...)) or a MultiRLModuleSpec, one module per "
            "policy id): the policies' network is that RLModule, acting with "
            "forward_exploration/forward_inference and training with forward_train. None, or "
            "the algorithm's default module class: the default model. docs/new_api_stack.md.")
    module_model_config: dict = setting(
        {}, "rl_module", merge=True,
        doc="The keys of RLlib's model_config that rlmesh's model does not read: a user's "
            "RLModule gets them in self.model_config (with the model keys and its spec's "
            "model_config over them). Without an RLModule they are an error.")

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
        doc="CPUs per learner (its torch threads on CPU); 'auto': 1 on CPU, 0 when the "
            "learner has a GPU; a CPU learner in the driver with no runner process sampling "
            "meanwhile (num_learners and num_env_runners 0) times one thread against the "
            "driver's cores as it trains and keeps the faster (learner_threads, "
            "roles/thread_choice.py).")
    learner_rendezvous_private_only: bool = setting(
        True, "learners",
        doc="Data-parallel learners on several nodes meet at rank 0's node address over "
            "torch.distributed, whose traffic is neither authenticated nor encrypted: refuse "
            "an address outside loopback and the private ranges (docs/security.md). False "
            "sends it anyway, e.g. over a VPN whose addresses are public.")
    torch_autocast: Literal["bf16"] | None = setting(
        None, "learners", key="_torch_autocast",
        doc="'bf16': the learner computes its losses under torch.autocast in bfloat16 (the "
            "forward passes' matmuls and convolutions; the weights, optimizer and gradients "
            "stay float32). Pays on GPUs with bf16 tensor cores (Ampere and newer) for conv "
            "nets and wide MLPs; on the CPU it is usually slower. None: float32.")
    torch_compile_learner: bool = setting(
        False, "learners",
        doc="torch.compile each policy's loss on the learner (the model's weights and "
            "checkpoints are unchanged). The first updates compile (seconds to a minute); "
            "pays for large nets on a GPU, rarely for small MLPs.")
    torch_compile_learner_dynamo_backend: str = setting(
        "inductor", "learners", doc="torch.compile's backend for torch_compile_learner.")
    torch_compile_learner_dynamo_mode: str | None = setting(
        None, "learners", doc="torch.compile's mode for torch_compile_learner ('default', "
                              "'reduce-overhead', 'max-autotune'); None: torch's default.")

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
    callbacks_class: str | type | dict | None = setting(
        None, "callbacks", aliases=("callbacks",),
        doc="Class (or import path 'pkg.module:Class') whose hooks run on episode, sample "
            "and training events; or RLlib's older dict of functions of one info dict, "
            "{'on_episode_end': fn, ...} (rlmesh.callbacks.FunctionCallbacks); None: no "
            "callbacks.")
    named_actors: dict = setting(
        {}, "callbacks",
        doc="Actors the run starts, each in a process of its own that stops with the run, "
            "reached by name from envs, callbacks and the driver with rlmesh.get_actor(name) "
            "(RLlib's named Ray actors): {name: 'pkg.module:Class'} or {name: {'class': ..., "
            "'kwargs': {...}, 'max_restarts': 0}}; the class's public methods are its calls "
            "(docs/named_actors.md).")

    # --- reporting ---
    metrics_num_episodes_for_smoothing: int = setting(
        100, "reporting", ge=1, aliases=("metrics_smoothing_episodes",),
        doc="episode_reward_mean (and _min, _max, episode_len_mean) are over this many "
            "newest episodes. A short task (Pendulum in 20k steps: 100 episodes in all) "
            "needs a smaller window to see its progress.")

    min_time_s_per_iteration: float | None = setting(
        None, "reporting", ge=0, aliases=("min_time_s_per_reporting", "min_iter_time_s"),
        doc="An iteration (one train() call, one result) lasts at least this many seconds: "
            "training steps repeat until it has passed (IMPALA, APPO and APEX wait while "
            "they learn; A3C ends its iteration then, or after train_batch_size env steps "
            "trained, whichever comes first). None: one training step per iteration.")

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
        1000, "fault_tolerance", ge=0, aliases=("max_num_worker_restarts",),
        doc="Restarts allowed per env runner before it is given up.")
    max_env_runner_crashes: int = setting(
        5, "fault_tolerance", ge=0,
        doc="An env runner whose process dies this many times within "
            "env_runner_crash_window of its env steps (its env segfaults, aborts or exits; "
            "or it is killed for a missed heartbeat or over max_runner_memory_mb) ends the "
            "run in one line naming the env and the signal; its crash output stays in its "
            "log. 0: no such limit (max_num_env_runner_restarts alone bounds restarts). An "
            "env's Python exceptions have their own rule: 5 in a row end the run (EnvError).")
    env_runner_crash_window: int = setting(
        10_000, "fault_tolerance", ge=1,
        doc="The env steps of one runner (over its restarts) within which "
            "max_env_runner_crashes deaths end the run: an env crashing every 2,000 steps "
            "or more often is broken; one crashing every 50,000 is restarted on.")
    max_runner_memory_mb: float | None = setting(
        None, "fault_tolerance", gt=0,
        doc="Resident memory (MB) an env runner process may hold, the processes its envs "
            "start included: at 80% a warning names the runner; at 100% the runner is killed "
            "before it takes the machine's memory, and restarted, its death counting toward "
            "max_env_runner_crashes (so an env that leaks fast ends the run in one line "
            "naming the runner and its memory). None: no limit.")
    stuck_learner_warn_s: float = setting(
        10.0, "fault_tolerance", ge=0,
        doc="A learner update running longer than max(this, 5 x the median of the "
            "learner's recent updates) is reported once, naming the learner and the `rlmesh "
            "stack` command that shows where it is stuck (the update goes on). 0: never.")
    on_nonfinite: Literal["raise", "skip"] = setting(
        "raise", "fault_tolerance",
        doc="A NaN or infinite observation or reward from an env, value in a train batch, "
            "loss or gradient norm: 'raise' stops the run with a one-line error naming it "
            "(such values are bugs to see, not noise to train on); 'skip' drops the episode "
            "(env data) or the batch or update (learner) and counts it in the result "
            "(num_nonfinite_steps_skipped, info/learner/<pid>/num_nonfinite_*_skipped). "
            "An update with a non-finite loss or gradient is never applied.")

    # --- RLlib's vocabulary ---

    @classmethod
    def _translate(cls, values: dict) -> tuple[dict, dict]:
        """RLlib's keys of both API stacks that are not settings here, translated (or
        refused) by rlmesh/config/rllib.py; each note said once, as a warning line."""
        from rlmesh.config.rllib import Refused, note, translate

        try:
            translated = translate(cls, values)
        except Refused as e:
            raise ConfigError(str(e)) from None
        note(translated.notes)
        return translated.settings, translated.derived

    @classmethod
    def rllib_defaults(cls, stack: str = "old"):
        """This config with the values RLlib's own config class gives the keys a file leaves
        out (``stack``: 'old' for files of RLlib's classic API stack, 'new' for its new
        stack), so an RLlib tuned example means what it meant there (docs/rllib.md)."""
        from rlmesh.config.rllib import defaults_for

        return cls().update_from_dict(defaults_for(cls, stack))

    # --- builders: one per group, each taking exactly that group's keys ---

    def training(self, **kwargs):
        """Set the training group, the algorithm's own settings included."""
        return self._set("training", kwargs)

    def rl_module(self, **kwargs):
        """Set the policy class, or RLlib's ``rl_module_spec`` (an RLModuleSpec or
        MultiRLModuleSpec) and ``model_config`` (see ``fields_table("rl_module")`` and
        docs/new_api_stack.md)."""
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
        """Set the callbacks class (see ``fields_table("callbacks")``), and RLlib 2.40's
        functions by hook (``on_episode_end=fn`` or a list of them), each called with the
        hook's keyword arguments after the class's own hook."""
        settings = _setting_names(type(self))
        hooks = {k: kwargs.pop(k) for k in list(kwargs)
                 if k.startswith("on_") and k not in settings}  # on_nonfinite is a setting
        if hooks:
            from rlmesh.callbacks import hook_functions_setting

            base = self.callbacks_class if callbacks_class is _UNSET else callbacks_class
            callbacks_class = hook_functions_setting(base, hooks)
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
        from rlmesh.runtime.import_path import import_object  # a script's class by its file

        return import_object(path, "algorithm")(self)

    # RLlib's other builders: old names of the groups above, and its stack switches
    def rollouts(self, **kwargs):
        """RLlib's old name of env_runners()."""
        return self._set("env_runners", kwargs)

    def exploration(self, **kwargs):
        """RLlib's old builder of explore and exploration_config."""
        return self._set("env_runners", kwargs)

    def api_stack(self, **kwargs):
        """RLlib's switch between its API stacks; rlmesh has one (docs/rllib.md)."""
        return self.update_from_dict(kwargs)

    def experimental(self, **kwargs):
        """RLlib's experimental switches (each translated or named as having no effect)."""
        return self.update_from_dict(kwargs)

    def checkpointing(self, **kwargs):
        """RLlib's checkpoint options (rlmesh's checkpoints hold every policy, docs/rllib.md)."""
        return self.update_from_dict(kwargs)

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

    def learner_threads(self, in_driver: bool = False) -> int:
        """torch threads of a CPU learner: ``num_cpus_per_learner``, or for 'auto' one (the
        CPU RLlib reserves per learner: in a mesh on few cores a learner's OpenMP threads
        spin against the runners'). A learner in the driver (``in_driver``) while nothing
        else of the run computes (no env runner processes, no evaluation in parallel: the
        driver samples between updates) may take every physical core this process may use,
        ``OMP_NUM_THREADS`` where set (the tune and launch workers set 1), as torch's
        default would: SAC's [256, 256] step on Pendulum ran 1.5x faster with two threads
        than one on 2 idle cores, and 3-4x slower on busy ones, so with 'auto' LearnerGroup
        times both counts as it trains (ThreadChoice; docs/benchmark_log.md)."""
        if self.num_cpus_per_learner != "auto":
            return max(1, int(self.num_cpus_per_learner))
        alone = (in_driver and self.num_env_runners == 0
                 and not (self.evaluation_parallel_to_training and self.evaluation_num_env_runners))
        if not alone:
            return 1
        from rlmesh.runtime.process import process_cores

        return process_cores()

    def _driver_side_cpus(self) -> float:
        """CPUs of processes placed with the driver besides it (IMPALA's aggregators)."""
        return 0

    def for_observations(self, spaces: list[Any]) -> "AlgorithmConfig":
        """This config with the defaults that depend on the observations resolved (an
        algorithm's 'auto' values: APPOConfig's), given the policies' observation spaces;
        the algorithm does this once it knows the env's spaces. Itself when nothing
        depends on them."""
        return self

    def lr_at(self, timestep: int) -> float:
        """The learning rate after ``timestep`` env steps sampled."""
        return value_at(self.lr_schedule, timestep) if self.lr_schedule else self.lr

    # --- checks ---

    def _cross_checks(self) -> list[str]:
        """Checks that read several settings; a subclass extends the list."""
        problems = []
        try:  # an unknown model key names the closest one, before any process starts
            _check_model_config(self.model)
            if self.module_model_config and self.module_spec is None:
                _check_model_config(self.module_model_config)  # only a module reads them
        except ValueError as e:
            problems.append(f"model: {e}")
        if self.lr_schedule is not None:
            try:
                validate_schedule(self.lr_schedule)
            except ValueError as e:
                problems.append(f"lr_schedule: {e}")
        per_learner = self.train_batch_size_per_learner or self.train_batch_size
        if isinstance(self.minibatch_size, int) and self.minibatch_size > per_learner:
            problems.append(f"minibatch_size: expected <= the train batch per learner "
                            f"({per_learner}), got {self.minibatch_size}")
        envs = max(1, self.num_env_runners) * self.num_envs_per_env_runner
        if self.rollout_fragment_length == "auto" and self.total_train_batch_size < envs:
            problems.append(f"rollout_fragment_length: 'auto' needs a train batch of at least "
                            f"one step per env ({envs}), got {self.total_train_batch_size}")
        problems += self._policy_server_checks()
        problems += self._sequence_checks()
        problems += self._offline_checks()
        problems += self._evaluation_checks()
        connectors = self._connector_checks()
        if connectors:  # said in their own words, not as data that does not cross
            return problems + connectors
        try:  # the config crosses process boundaries as plain data, never pickled
            self.to_dict()
        except ConfigError as e:
            problems.append(str(e))
        return problems
