"""The driver of a training run: ``Algorithm`` with RLlib's train/save/restore/compute API.

It holds the mesh (a Job with a param server, env runners and the learner group), whose
pools (one per role kind) make every remote call on the event loop the mesh owns, on a
thread of its own; the user's thread stays free for the learner's computation, so
heartbeats and weight fetches are served during an update. ``train()`` is one
``training_iteration()``: ``training_step()`` repeated for ``min_time_s_per_iteration``,
then the result. A subclass overrides ``training_step`` with the named steps
(``sample_train_batch``, ``update_learners``, ``publish_trained``) or the public helpers
they call (``synchronous_parallel_sample``, ``self.learner_group.update_from_batch``,
``self.env_runners.sync_weights``). The policy calls live in policy_access.py, save and
restore in save_restore.py, what a learner's failure becomes in learner_failure.py.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from pathlib import Path
from contextlib import contextmanager
from typing import Any, Callable, Iterator

import torch

from rlmesh.driver import checkpoints, live_runs, policies
from rlmesh.driver.checkpoint_kinds import check_kinds
from rlmesh.driver.env_runner_group import EnvRunnerGroup, synchronous_parallel_sample
from rlmesh.driver.evaluation_group import EvaluationGroup
from rlmesh.driver.iteration_result import (  # noqa: F401  (public here too)
    ENTROPY_COLLAPSE, client_rejections, iteration_result,
)
from rlmesh.driver.learner_failure import LearnerFailed, learner_calls  # noqa: F401 (public here too)
from rlmesh.driver.learner_group import LearnerGroup
from rlmesh.driver.policy_access import PolicyAccess
from rlmesh.driver.save_restore import SaveRestore
from rlmesh.driver.trained_nothing import TrainingWatch
from rlmesh.driver.worker_set import WorkerSet
from rlmesh.driver.mesh import Mesh, check_lambdas_can_go
from rlmesh.driver.trainer_args import trainer_config
from rlmesh.callbacks import load_callbacks
from rlmesh.config.batch_memory import check_batch_memory
from rlmesh.config.base import AlgorithmConfig
from rlmesh.env.registry import EnvContext, as_space, env_registry, space_from_data, spaces_of
from rlmesh.policy.policy import Policy
from rlmesh.preprocessing import model_obs_space
from rlmesh.policy.policy_spec import PolicySpec
from rlmesh.rl.columns import DEFAULT_POLICY_ID, merge_by_policy
from rlmesh.connectors.wiring import ConnectorFilterStats
from rlmesh.rl.filters import make_filter
from rlmesh.config.learner_gpus import check_learner_gpus
from rlmesh.runtime.import_path import stop_if_importing_script
from rlmesh.runtime.logtail import LogTail, level_number
from rlmesh.utils.metrics.metrics_logger import MetricsLogger

log = logging.getLogger(__name__)


class Algorithm(PolicyAccess, SaveRestore):
    """Base of every algorithm: subclasses name their config class and default policy class
    and write ``training_step``."""
    config_class: type[AlgorithmConfig] = AlgorithmConfig
    default_policy_class: type[Policy] | str | None = None
    mesh_class: type[Mesh] = Mesh
    #: training_step() itself lasts min_time_s_per_iteration (asynchronous algorithms);
    #: otherwise training_iteration() repeats it until that time has passed.
    times_its_own_iteration: bool = False

    def __init__(self, config: AlgorithmConfig | dict[str, Any] | None = None, env: Any = None,
                 logger_creator: Any = None) -> None:
        """``config``: a config object, or a dict of keys; ``env`` (RLlib's Trainer-era
        ``PPOTrainer(config=..., env=...)``) replaces the config's env (trainer_args.py)."""
        stop_if_importing_script(f"{type(self).__name__}(...)")  # a runner importing the script
        config = trainer_config(self.config_class, config, env, logger_creator)
        config.validate()
        check_lambdas_can_go(config)
        self.config = config
        logging.getLogger("rlmesh").setLevel(level_number(config.log_level))
        if config.seed is not None:
            torch.manual_seed(config.seed)
        self.iteration = 0
        self.timesteps_total = 0
        self.episodes_total = 0
        self.num_env_steps_trained = 0  # what the learner consumed, apart from what was sampled
        self.num_nonfinite_steps_skipped = 0  # env steps with NaN/inf data, dropped (on_nonfinite)
        # The learners' counts of skipped batches (see iteration_result).
        self.nonfinite_counts: dict[str, int] = {}
        self.time_total_s = 0.0
        # RLlib's algorithm.metrics: the driver's MetricsLogger (on_train_result's).
        self.metrics = MetricsLogger()
        # The episodes results smooth over (metrics_num_episodes_for_smoothing).
        self.episode_window: deque[dict[str, Any]] = deque(
            maxlen=config.metrics_num_episodes_for_smoothing)
        self.num_agent_steps_sampled = 0
        self.obs_space, self.action_space = self._spaces(config)
        self.policy_specs = self._policy_specs()
        # Defaults that depend on the observations ('auto'): resolved before any process
        # sees the config, from every policy's observation space.
        config = self.config = config.for_observations(
            [space_from_data(s["observation_space"]) for s in self.policy_specs.values()])
        self.entropy_warned: set[str] = set()  # policies warned of (warn_entropy_collapse)
        self.training_watch = TrainingWatch(self)  # a run whose learner never updates
        # The global observation filter: every runner's statistics merged (sync_filters).
        self.obs_filter = self._initial_obs_filter()
        # The env-to-module connectors' statistics, every runner's merged (sync_filters).
        self.connector_filters = ConnectorFilterStats()
        self.last_checkpoint: str | None = None
        # The trial folder (rlmesh train sets it): evaluation videos go to its videos/.
        self.logdir: str | None = None
        self.run_name = f"{type(self).__name__}_{time.strftime('%Y-%m-%d_%H-%M-%S')}"
        # Loaded before any process starts: a callbacks class with a misspelled hook fails here.
        self.callbacks = load_callbacks(config.callbacks_class)
        check_learner_gpus(config.num_learners, config.num_gpus_per_learner, config.fake_gpus)
        check_batch_memory(config, self.obs_space, self.action_space)
        self.mesh = self.mesh_class(config, self.policy_specs)
        live_runs.built(self)  # a tune trial stops what its function left running
        # The runner processes start (imports, envs) while this thread builds the learner.
        runners = self.mesh.start_runners()
        try:
            for warning in config.warnings() if hasattr(config, "warnings") else ():
                log.warning("%s", warning)
            self.learner_group = LearnerGroup(config, self.policy_specs, self.mesh)
            self.env_runners = EnvRunnerGroup(self)
            self.eval_env_runner_group = EvaluationGroup(self)
            self._policies = self._driver_policies()
            runners.result()
            self._log_tail = self._follow_logs()
            if config.evaluation_interval:
                self.eval_env_runner_group.start()
            self.learner_group.start()
            self.learner_group.publish()
            self._on_started()
            self.mesh.connect()  # the roles' ready calls, then the declared streams
            if self.callbacks is not None:
                self.callbacks.on_algorithm_init(algorithm=self)
        except BaseException:
            try:  # let a spawn in progress finish before the job shuts down
                runners.result(60)
            except BaseException:
                pass
            self.stop()
            raise

    @classmethod
    def with_updates(cls, **overrides: Any) -> type[Algorithm]:
        """RLlib's ``with_updates`` (``rlmesh.algorithms.algorithm_template.with_updates``;
        by path: the template is a higher layer)."""
        from rlmesh.runtime.import_path import import_object

        return import_object("rlmesh.algorithms.algorithm_template:with_updates")(cls, **overrides)

    @classmethod
    def get_default_policy_class(cls, config: AlgorithmConfig) -> type[Policy] | str:
        if cls.default_policy_class is None:
            raise TypeError(f"{cls.__name__} names no default_policy_class; set it, or "
                            "config.rl_module(policy_class=...)")
        return cls.default_policy_class

    def _policy_specs(self) -> dict[str, dict[str, Any]]:
        """Every policy id's spec as plain data: the config's ``policy_class`` or the
        algorithm's default, on the env's spaces."""
        default = self.get_default_policy_class(self.config)
        specs = policies.specs_or_none(self, default)
        if specs is not None:  # a MultiAgentEnv: a spec per policy id (driver/policies.py)
            return specs
        spec = PolicySpec(self.config.policy_class).resolved(default, self.obs_space,
                                                             self.action_space)
        return {DEFAULT_POLICY_ID: spec.to_data(self.config)}

    def _initial_obs_filter(self) -> Any:
        """The global observation filter at the start (``observation_filter``'s, empty)."""
        return make_filter(self.config.observation_filter, self.obs_space)

    def _follow_logs(self) -> LogTail | None:
        """With log_level INFO or DEBUG, every process's records in this one's logging
        (``[env_runner-1] ...``); a run at WARN leaves them in the run directory's logs/."""
        job = self.mesh.job
        if level_number(self.config.log_level) > logging.INFO or job is None:
            return None
        return LogTail(job.run_dir.path / "logs", self.config.log_level).start()


    def _on_started(self) -> None:
        """Called once every process is up and the first weights are published."""

    @staticmethod
    def _spaces(config: AlgorithmConfig) -> tuple[Any, Any]:
        """The spaces the config gives, else those of one env built here."""
        if config.observation_space is not None and config.action_space is not None:
            return as_space(config.observation_space), as_space(config.action_space)
        if config.env is None:
            raise ValueError("no env: set .environment('CartPole-v1') (a gymnasium id or "
                             "'pkg.module:make_env'), or, for external simulators, "
                             "policy_server_address with observation_space and action_space")
        context = EnvContext(config.env_config, 0, 0, config.num_env_runners)  # the driver's
        obs_space, action_space = spaces_of(config.to_dict()["env"], context,
                                            env_registry(), model=config.model,
                                            preprocessor_pref=config.preprocessor_pref)
        obs_space = model_obs_space(obs_space, config.model)  # framestack
        if config.env_to_module_connector is not None:  # what the connectors make of it
            from rlmesh.connectors.wiring import driver_observation_space

            obs_space = driver_observation_space(config, obs_space, action_space)
        return obs_space, action_space

    # --- training ---

    def train(self) -> dict[str, Any]:
        """One iteration (``training_iteration``) and, every ``evaluation_interval``
        iterations, an evaluation (after it, or during it with
        evaluation_parallel_to_training), its metrics under ``result["evaluation"]``."""
        interval = self.config.evaluation_interval
        evaluate_now = bool(interval) and (self.iteration + 1) % interval == 0
        evaluation = self.eval_env_runner_group
        parallel = None
        if evaluate_now and self.config.evaluation_parallel_to_training:
            parallel = evaluation.begin(self.iteration + 1)
        result = self.training_iteration()
        if evaluate_now:
            result["evaluation"] = evaluation.finish(parallel or evaluation.begin(self.iteration))
        self.training_watch.observe(result)
        log.debug("iteration %d: %d env steps in %.2f s", self.iteration,
                  result.get("num_env_steps_sampled_this_iter", 0), result.get("time_this_iter_s", 0))
        if self.callbacks is not None:
            self.callbacks.on_train_result(algorithm=self, result=result,
                                           metrics_logger=self.metrics)
            if self.metrics.stats:  # what it logged, at the result's top level
                _merge_into(result, self.metrics.reduce())
        return result

    def evaluate(self) -> dict[str, Any]:
        """Evaluate now on the evaluation runners (started on first use): ``{"evaluation":
        metrics}`` with RLlib's keys (episode_reward_mean, ...) and the partial episodes."""
        group = self.eval_env_runner_group
        return {"evaluation": group.finish(group.begin(self.iteration))}

    def training_iteration(self) -> dict[str, Any]:
        """One iteration without the evaluation (RLlib's name): ``training_step()``
        repeated until ``min_time_s_per_iteration`` has passed, then the result. Override
        it to run an iteration otherwise (the asynchronous algorithms, APEX)."""
        return self.run_iteration(self.training_step)

    def run_iteration(self, step: Callable[[], dict[str, dict[str, Any]] | None]) -> dict[str, Any]:
        """One iteration of ``step()`` (a training step: its learner statistics by policy
        id) repeated until ``min_time_s_per_iteration`` has passed, and its result; what
        ``training_iteration`` runs with ``training_step`` (execution plans: their own)."""
        start = self._start_iteration()
        with learner_calls(self):
            while True:
                stats = step() or {}
                if self._iteration_done(start, stats):
                    break
        return self.iteration_result(start, stats)

    def _start_iteration(self) -> float:
        self._timers = {"sample_time_s": 0.0, "learn_time_s": 0.0}
        self._trained_this_iteration = 0
        return time.perf_counter()

    def _iteration_done(self, start: float, stats: dict[str, dict[str, Any]]) -> bool:
        """Counts the env steps ``stats`` trained on; whether the iteration is over: its
        step lasts the iteration itself, or ``min_time_s_per_iteration`` has passed."""
        self._trained_this_iteration += sum(int(s.get("num_env_steps_trained", 0))
                                            for s in stats.values())
        return (self.times_its_own_iteration or time.perf_counter() - start
                >= (self.config.min_time_s_per_iteration or 0))

    def iteration_result(self, start: float, learner_stats: dict[str, dict[str, Any]]
                         ) -> dict[str, Any]:
        """The iteration's counters advanced and its result (RLlib's keys) from the last
        step's learner statistics; an algorithm adds its own keys by overriding this."""
        self.sync_filters()
        fragments, steps = self.env_runners.pop_sampled()
        return self._finish_iteration(start, fragments, steps, self._trained_this_iteration,
                                      learner_stats, self._timers["sample_time_s"],
                                      self._timers["learn_time_s"])

    def _finish_iteration(self, start: float, fragments: list[dict[str, Any]], env_steps: int,
                          env_steps_trained: int, learner_stats: dict[str, dict[str, Any]],
                          sample_time: float | None = None, learn_time: float | None = None
                          ) -> dict[str, Any]:
        """The one place the run's counters advance, for every kind of iteration (this
        loop's, the asynchronous algorithms', APEX's): the iteration begun at ``start``
        (perf_counter) sampled ``env_steps`` (its ``fragments``) and trained on
        ``env_steps_trained``; its result (``iteration_result``) from ``learner_stats`` by
        policy id. ``sample_time`` (None or 0) and ``learn_time`` (None): its length."""
        elapsed = time.perf_counter() - start
        self.iteration += 1
        self.timesteps_total += env_steps
        self.num_env_steps_trained += env_steps_trained
        self.time_total_s += elapsed
        return iteration_result(self, fragments, env_steps, learner_stats, elapsed,
                                sample_time or elapsed, elapsed if learn_time is None else learn_time)

    def training_step(self) -> dict[str, dict[str, float]]:
        """Sample ``train_batch_size`` env steps, update every policy, publish the weights;
        learner statistics by policy id. Override with the same named steps."""
        fragments = self.sample_train_batch()
        stats = self.update_learners(fragments)
        self.publish_trained(stats)
        return stats or {}

    def sample_train_batch(self) -> list[dict[str, Any]]:
        """The fragments of ``train_batch_size`` env steps from the runners
        (``synchronous_parallel_sample``), timed as the iteration's sample_time_s."""
        with self.timer("sample_time_s"):
            return synchronous_parallel_sample(self.env_runners,
                                               max_env_steps=self.config.train_batch_size)

    def update_learners(self, fragments: list[dict[str, Any]]) -> dict[str, dict[str, Any]] | None:
        """One update of each policy from its samples in ``fragments``, timed as the
        iteration's learn_time_s; learner statistics by policy id. None where the fragments
        hold no env step (policy-server clients sent nothing in time: an idle step)."""
        if not any(f["env_steps"] for f in fragments):
            return None
        with self.timer("learn_time_s"):
            return self.learner_group.update_from_batch(merge_by_policy(fragments),
                                                        timesteps=self.timesteps_sampled)

    def publish_trained(self, stats: dict[str, dict[str, Any]] | None) -> None:
        """The new weights of the policies in ``stats`` (of every one where it names none)
        to the param server, from which the runners take them; nothing after an idle step
        (None): policies that did not train stay as they are."""
        if stats is not None:
            self.env_runners.sync_weights(sorted(stats) or None)

    def sync_filters(self) -> None:
        """Merge the runners' new observation statistics into the global filter and hand
        it back to them (RLlib does it after every training step)."""
        if self.config.observation_filter != "NoFilter":
            self.mesh.runners.sync_filters(self.obs_filter)
        if self.config.env_to_module_connector is not None:  # MeanStdFilter connectors
            self.mesh.runners.sync_connector_filters(self.connector_filters)

    @property
    def timesteps_sampled(self) -> int:
        """Env steps sampled so far, this iteration's included (what schedules read)."""
        return self.timesteps_total + self.env_runners.env_steps

    @property
    def timers(self) -> dict[str, float]:
        """This iteration's timers so far (``timer`` adds to them)."""
        return self._timers

    @contextmanager
    def timer(self, name: str) -> Iterator[None]:
        """Time the block into this iteration's ``timers`` (sample_time_s, learn_time_s)."""
        start = time.perf_counter()
        try:
            yield
        finally:
            self._timers[name] = self._timers.get(name, 0.0) + time.perf_counter() - start

    @property
    def env_runner_group(self) -> EnvRunnerGroup:
        """RLlib's name of ``env_runners``."""
        return self.env_runners

    @property
    def workers(self) -> WorkerSet:
        """RLlib's Trainer-era ``trainer.workers`` (driver/worker_set.py)."""
        return WorkerSet(self)

    @property
    def __name__(self) -> str:  # RLlib's callbacks print info["trainer"].__name__
        return type(self).__name__

    # --- checkpoints (save and restore: save_restore.py) ---

    @classmethod
    def from_checkpoint(cls, path: str | Path, trust_code: bool = False) -> "Algorithm":
        """The algorithm a checkpoint was saved from, restored. A checkpoint that names code
        outside rlmesh (its env, policy, model, callbacks) needs ``trust_code=True``: loading
        runs that code. A file path (``.py``) is never run."""
        meta, _ = checkpoints.read(Path(path), trust_code)
        check_kinds(Path(path), meta)
        checkpoints.check_handed(Path(path), meta)
        algo_cls = checkpoints.algorithm_class(meta["algorithm"]) if cls is Algorithm else cls
        algo = algo_cls(algo_cls.config_class.from_dict(meta["config"]))
        algo.restore(path, trust_code)
        return algo

    # --- lifecycle ---

    def stop(self) -> None:
        """Stop every process of the run; the algorithm cannot train afterwards."""
        mesh = getattr(self, "mesh", None)
        if mesh is None or getattr(self, "_stopped", False):
            return
        self._stopped = True
        try:
            if getattr(self, "env_runners", None) is not None:
                self.env_runners.drop_sample_ahead()
            if getattr(self, "learner_group", None) is not None:
                self.learner_group.stop()
            if getattr(self, "_log_tail", None) is not None:
                self._log_tail.stop()
        finally:
            mesh.stop()

    def __enter__(self) -> "Algorithm":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def _merge_into(result: dict, logged: dict) -> None:
    """The nested ``logged`` values into ``result``, dicts merged key by key."""
    for key, value in logged.items():
        if isinstance(value, dict) and isinstance(result.get(key), dict):
            _merge_into(result[key], value)
        else:
            result[key] = value
