"""The driver of a training run: ``Algorithm`` with RLlib's train/save/restore/compute API.

It holds the mesh (a Job with a param server, env runners and the learner group), whose
synchronous facade makes every remote call on the event loop the mesh owns, on a thread of
its own; the user's thread stays free for the learner's computation, so heartbeats and
weight fetches are served during an update. ``train()`` is
one ``training_step()`` plus the result; a subclass overrides ``training_step`` with the
public helpers (``synchronous_parallel_sample``, ``self.learner_group.update_from_batch``,
``self.env_runners.sync_weights``).
"""

from __future__ import annotations

import logging
import time
from collections import deque
from pathlib import Path
from contextlib import contextmanager
from typing import Any, Callable, Iterator

import numpy as np
import torch

from rlmesh.driver import acting, checkpoints, export, live_runs, policies
from rlmesh.driver.checkpoint_kinds import check_kinds
from rlmesh.driver.env_runner_group import EnvRunnerGroup, synchronous_parallel_sample
from rlmesh.driver.evaluation import EvaluationGroup
from rlmesh.driver.iteration_result import (  # noqa: F401  (public here too)
    ENTROPY_COLLAPSE, client_rejections, iteration_result,
)
from rlmesh.driver.learner_group import LearnerGroup
from rlmesh.driver.trained_nothing import TrainingWatch
from rlmesh.driver.worker_set import WorkerSet
from rlmesh.driver.mesh import Mesh, check_lambdas_can_go
from rlmesh.driver.trainer_args import trainer_config
from rlmesh.callbacks import load_callbacks
from rlmesh.config.batch_memory import check_batch_memory
from rlmesh.config.base import AlgorithmConfig
from rlmesh.driver.inference import env_action
from rlmesh.envs import EnvContext, as_space, env_registry, spaces_of
from rlmesh.policy.policy import POLICY_ERRORS, Policy
from rlmesh.preprocessing import model_obs_space
from rlmesh.policy.policy_spec import PolicySpec, build_policy_from_data
from rlmesh.rl.columns import DEFAULT_POLICY_ID, merge_by_policy
from rlmesh.rl.filters import make_filter
from rlmesh.config.learner_gpus import check_learner_gpus
from rlmesh.runtime import ActorUnavailable, RemoteError
from rlmesh.runtime.import_path import stop_if_importing_script
from rlmesh.runtime.logtail import LogTail, level_number

log = logging.getLogger(__name__)


# How long a learner's failed collective waits for the supervisor to name the learner that
# is gone: its heartbeat timeout (5 s), and a node's loss seen through its agent.
PEER_FAILURE_WAIT_S = 20.0


class LearnerFailed(RuntimeError):
    """A learner died or its update loop raised: the run cannot go on. ``log_path``: the
    learner process's log, with the traceback (None for a learner in this process, whose
    traceback went to this process's logging, and for one that wrote nothing: killed)."""

    def __init__(self, message: str, log_path: Path | None = None) -> None:
        super().__init__(message)
        self.log_path = log_path


class Algorithm:
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
        # The episodes results smooth over (metrics_num_episodes_for_smoothing).
        self.episode_window: deque[dict[str, Any]] = deque(
            maxlen=config.metrics_num_episodes_for_smoothing)
        self.num_agent_steps_sampled = 0
        self.obs_space, self.action_space = self._spaces(config)
        self.policy_specs = self._policy_specs()
        self.entropy_warned: set[str] = set()  # policies warned of (warn_entropy_collapse)
        self.training_watch = TrainingWatch(self)  # a run whose learner never updates
        # The global observation filter: every runner's statistics merged (sync_filters).
        self.obs_filter = make_filter(config.observation_filter, self.obs_space)
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
            self._publish()
            self._on_started()
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

    def _follow_logs(self) -> LogTail | None:
        """With log_level INFO or DEBUG, every process's records in this one's logging
        (``[env_runner-1] ...``); a run at WARN leaves them in the run directory's logs/."""
        job = self.mesh.job
        if level_number(self.config.log_level) > logging.INFO or job is None:
            return None
        return LogTail(job.run_dir.path / "logs", self.config.log_level).start()

    def _driver_policies(self) -> dict[str, Policy]:
        """The policies ``get_policy`` returns: the learner's own when it runs here, else
        copies that load the param server's newest weights when used (``get_policy``)."""
        self._copy_versions: dict[str, int] = {}  # the version each copy holds
        if self.learner_group.local is not None:
            return self.learner_group.local.policies
        return {pid: build_policy_from_data(spec, self.config, runner=False)
                for pid, spec in self.policy_specs.items()}

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
        return model_obs_space(obs_space, config.model), action_space  # framestack

    # --- training ---

    def train(self) -> dict[str, Any]:
        """One iteration and, every ``evaluation_interval`` iterations, an evaluation (after
        it, or during it with evaluation_parallel_to_training), its metrics under
        ``result["evaluation"]``.

        The iteration's ``training_step()`` calls run here, in train() itself, repeated until
        ``min_time_s_per_iteration`` has passed; ``iteration_result`` then makes the result.
        So an algorithm's loss is at most five frames below: train -> training_step ->
        the learner's update -> policy.update -> loss (learner in the driver). An algorithm
        that runs its iteration otherwise (the asynchronous ones) overrides
        ``training_iteration``, which train() then calls instead."""
        interval = self.config.evaluation_interval
        evaluate_now = bool(interval) and (self.iteration + 1) % interval == 0
        evaluation = self.eval_env_runner_group
        parallel = None
        if evaluate_now and self.config.evaluation_parallel_to_training:
            parallel = evaluation.begin(self.iteration + 1)
        if type(self).training_iteration is not Algorithm.training_iteration:
            result = self.training_iteration()
        else:
            start = self._start_iteration()
            with self._learner_calls():
                while True:  # min_time_s_per_iteration: steps repeat until it has passed
                    stats = self.training_step() or {}
                    if self._iteration_done(start, stats):
                        break
            result = self.iteration_result(start, stats)
        if evaluate_now:
            result["evaluation"] = evaluation.finish(parallel or evaluation.begin(self.iteration))
        self.training_watch.observe(result)
        log.debug("iteration %d: %d env steps in %.2f s", self.iteration,
                  result.get("num_env_steps_sampled_this_iter", 0), result.get("time_this_iter_s", 0))
        if self.callbacks is not None:
            self.callbacks.on_train_result(algorithm=self, result=result)
        return result

    def evaluate(self) -> dict[str, Any]:
        """Evaluate now on the evaluation runners (started on first use): ``{"evaluation":
        metrics}`` with RLlib's keys (episode_reward_mean, ...) and the partial episodes."""
        group = self.eval_env_runner_group
        return {"evaluation": group.finish(group.begin(self.iteration))}

    def training_iteration(self) -> dict[str, Any]:
        """One iteration without the evaluation (RLlib's name): ``training_step()``
        repeated until ``min_time_s_per_iteration`` has passed, then the result. train()
        runs the same loop inline; override this to run an iteration otherwise."""
        return self.run_iteration(self.training_step)

    def run_iteration(self, step: Callable[[], dict[str, dict[str, Any]] | None]) -> dict[str, Any]:
        """One iteration of ``step()`` (a training step: its learner statistics by policy
        id) repeated until ``min_time_s_per_iteration`` has passed, and its result; what
        ``training_iteration`` runs with ``training_step`` (execution plans: their own)."""
        start = self._start_iteration()
        with self._learner_calls():
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
        self.timesteps_total += steps
        self.num_env_steps_trained += self._trained_this_iteration
        self.iteration += 1
        elapsed = time.perf_counter() - start
        self.time_total_s += elapsed
        return self._result(fragments, steps, learner_stats, elapsed,
                            self._timers["sample_time_s"] or elapsed,
                            self._timers["learn_time_s"])

    def training_step(self) -> dict[str, dict[str, float]]:
        """Sample ``train_batch_size`` env steps, update every policy, publish the weights;
        learner statistics by policy id. Override with the same public helpers."""
        with self.timer("sample_time_s"):
            fragments = synchronous_parallel_sample(self.env_runners,
                                                    max_env_steps=self.config.train_batch_size)
        if not any(f["env_steps"] for f in fragments):
            return {}  # policy-server clients sent nothing in time: an idle iteration
        with self.timer("learn_time_s"):
            stats = self.learner_group.update_from_batch(merge_by_policy(fragments),
                                                         timesteps=self.timesteps_sampled)
        self.env_runners.sync_weights(sorted(stats) or None)  # untrained ones stay as they are
        return stats

    @contextmanager
    def _learner_calls(self) -> Iterator[None]:
        """A learner's death (or hang) seen in the block becomes LearnerFailed, naming the
        checkpoint to resume from."""
        try:
            yield
        except (ActorUnavailable, RemoteError) as exc:
            if self.mesh.learner_failure is None and not _learner_raised(exc):
                raise
            raise self._learner_failed(exc) from None

    def _learner_failed(self, exc: BaseException) -> LearnerFailed:
        """``exc``, seen on a learner call, as the one-line LearnerFailed the user gets."""
        return LearnerFailed(self._failure_message(exc), self._learner_log(exc))

    def _wait_for_peer_failure(self, exc: BaseException) -> None:
        """A learner's collective failed because another learner is gone (its node lost):
        wait a little for the supervisor to say which, so that the message names the cause,
        not the symptom on the learner that survived."""
        if "DataParallelError" not in f"{getattr(exc, 'etype', '')} {exc}":
            return
        deadline = time.monotonic() + PEER_FAILURE_WAIT_S
        while self.mesh.learner_failure is None and time.monotonic() < deadline:
            time.sleep(0.2)

    def _learner_log(self, exc: BaseException) -> Path | None:
        """The failed learner process's log file, where it has one."""
        name = self.mesh.failed_learner or getattr(exc, "actor", "") or ""
        job = self.mesh.job
        if not name.startswith("learner-") or job is None or self.config.num_learners == 0:
            return None
        path = job.run_dir.log_path(name)
        # A learner killed by a signal wrote no traceback: its log may be empty.
        return path if path.is_file() and path.stat().st_size > 0 else None

    def _failure_message(self, exc: BaseException) -> str:
        """The cause in one line (the traceback is in the learner's log), and where to resume."""
        self._wait_for_peer_failure(exc)
        what = self.mesh.learner_failure or _one_line_cause(exc)
        where = (f"the last checkpoint is {self.last_checkpoint}: resume with `rlmesh train "
                 f"... --resume` or Algorithm.restore('{self.last_checkpoint}')"
                 if self.last_checkpoint else
                 "no checkpoint was saved in this run (checkpoint_freq or algo.save() "
                 "would give one to resume from)")
        return (f"the learner failed, so the run stops (its weights and optimizer state "
                f"exist nowhere else): {what}\n{where}")

    def sync_filters(self) -> None:
        """Merge the runners' new observation statistics into the global filter and hand
        it back to them (RLlib does it after every training step)."""
        if self.config.observation_filter != "NoFilter":
            self.mesh.sync_filters(self.obs_filter)

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

    def _publish(self, policies: list[str] | None = None) -> int:
        """The learners' weights to the param server, which pushes them to the runners; the
        version (the driver's copies take them when next used: ``get_policy``)."""
        return self.learner_group.publish(policies)

    def publish(self, policies: list[str] | None = None) -> int:
        """The learners' weights (of ``policies``, default all) to the param server, from
        which the runners take them; the new version."""
        return self._publish(policies)

    def _result(self, fragments: list[dict[str, Any]], steps: int, stats: dict[str, float],
                elapsed: float, sample_time: float, learn_time: float) -> dict[str, Any]:
        """The iteration's result in RLlib's keys (see ``iteration_result``)."""
        return iteration_result(self, fragments, steps, stats, elapsed, sample_time, learn_time)

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

    # --- policy access ---

    def get_policy(self, policy_id: str = DEFAULT_POLICY_ID) -> Policy:
        """The policy ``policy_id`` (``compute_actions``, ``.model``, ``export_model``), at
        the newest published weights."""
        try:
            policy = self._policies[policy_id]
        except KeyError:
            raise KeyError(f"no policy {policy_id!r}; this algorithm has {sorted(self._policies)}") from None
        if self.learner_group.local is None:  # a copy: the param server's newest, if newer
            latest = self.mesh.latest_weights(policy_id)
            if latest is not None and latest[0] > self._copy_versions.get(policy_id, -1):
                policy.set_weights(latest[1])
                self._copy_versions[policy_id] = latest[0]
        return policy

    def add_policy(self, policy_id: str, policy_cls: Any = None, **kwargs: Any) -> Policy:
        """Add a policy while training (RLlib's signature: ``observation_space``,
        ``action_space``, ``config``, ``policy_state``, ``policy_mapping_fn``,
        ``policies_to_train``); see ``policies.add_policy``."""
        data = policies.add_policy(self, policy_id, policy_cls, **kwargs)
        if self.learner_group.local is None:  # the driver's copy, at the weights published next
            self._policies[policy_id] = build_policy_from_data(data, self.config, runner=False)
        self._publish([policy_id])
        return self.get_policy(policy_id)

    def remove_policy(self, policy_id: str, **kwargs: Any) -> None:
        """Remove a policy while training (``policy_mapping_fn``, ``policies_to_train``)."""
        policies.remove_policy(self, policy_id, **kwargs)
        self._policies.pop(policy_id, None)

    def get_weights(self, policies: list[str] | None = None) -> dict[str, dict[str, np.ndarray]]:
        """``{policy_id: {name: array}}``."""
        return self.learner_group.get_weights(policies)

    def set_weights(self, weights: dict[str, dict[str, Any]]) -> None:
        """Load ``{policy_id: {name: array}}`` into the learners and publish it."""
        self.env_runners.drop_sample_ahead()
        self.learner_group.set_weights(weights)
        self._publish(list(weights))

    def compute_single_action(self, observation: Any, state: list[Any] | None = None,
                              explore: bool | None = False, policy_id: str = DEFAULT_POLICY_ID,
                              prev_action: Any = None, prev_reward: Any = None,
                              full_fetch: bool = False) -> Any:
        """The action for one observation, from the newest weights (driver-side copy), as
        the env takes it; with ``state`` (a recurrent policy) or ``full_fetch`` (RLlib's)
        ``(action, state_out, extra)`` (start an episode from
        ``get_policy().get_initial_state()``; ``prev_action`` and ``prev_reward`` for a model
        that reads them). A recurrent policy without ``state`` warns once
        (``acting.warn_without_state`` says why it does not refuse)."""
        policy = self.get_policy(policy_id)
        if state is None and policy.is_recurrent():
            acting.warn_without_state(self, policy_id, stacklevel=2)
        # Nested (Tuple/Dict) observations go as they are: MeanStdFilter takes Box ones only.
        obs = self.obs_filter(observation, update=False)
        action, state_out, extra = policy.compute_single_action(
            obs, state, prev_action, prev_reward, explore=explore)
        action = env_action(self.config, policy.action_space, action)
        return (action, state_out, extra) if state is not None or full_fetch else action

    def compute_action(self, observation: Any, state: list[Any] | None = None,
                       prev_action: Any = None, prev_reward: Any = None,
                       policy_id: str = DEFAULT_POLICY_ID, full_fetch: bool = False,
                       explore: bool | None = None) -> Any:
        """RLlib's Trainer-era name and argument order for ``compute_single_action``;
        ``explore`` None follows the config's ``explore``, as the Trainer's did."""
        return self.compute_single_action(observation, state, explore, policy_id, prev_action,
                                          prev_reward, full_fetch)

    def compute_actions(self, observations: dict[Any, Any], state: dict[Any, Any] | None = None,
                        prev_action: dict[Any, Any] | None = None,
                        prev_reward: dict[Any, Any] | None = None,
                        policy_id: str = DEFAULT_POLICY_ID, full_fetch: bool = False,
                        explore: bool | None = None) -> Any:
        """RLlib's old API: ``{key: obs}`` -> ``{key: action}`` (``acting.compute_actions``)."""
        return acting.compute_actions(self, observations, state, prev_action, prev_reward,
                                      policy_id, full_fetch, explore)

    def export_policy_model(self, export_dir: str | Path, policy_id: str = DEFAULT_POLICY_ID,
                            onnx: int | None = None) -> str:
        """RLlib's name for ``get_policy(policy_id).export_model(export_dir, onnx)``
        (docs/export.md); returns the model file's path."""
        return export.export_policy_model(self, self.get_policy(policy_id), export_dir,
                                          policy_id, onnx)

    def export_policy_checkpoint(self, export_dir: str | Path,
                                 policy_id: str = DEFAULT_POLICY_ID) -> str:
        """A checkpoint of policy ``policy_id`` alone (``export.export_policy_checkpoint``:
        ``InferencePolicy.from_checkpoint(dir)`` and ``rlmesh rollout`` load it)."""
        with self._learner_calls():
            state = self.learner_group.get_state()
        return export.export_policy_checkpoint(self, state, export_dir, policy_id)

    # --- checkpoints ---

    def save(self, checkpoint_dir: str | Path | None = None) -> str:
        """Write a checkpoint (atomically) and return its directory."""
        if checkpoint_dir is None:  # a folder per run: clean what killed runs left in theirs
            root = Path.home() / "rlmesh_results" / "checkpoints"
            checkpoints.remove_stale_under(root, depth=1)
            checkpoint_dir = root / (f"{type(self).__name__}_{time.strftime('%Y-%m-%d_%H-%M-%S')}"
                                     f"/checkpoint_{self.iteration:06d}")
        with self._learner_calls():
            state = self.learner_group.get_state()
        self.last_checkpoint = checkpoints.write(Path(checkpoint_dir), self, state)
        return self.last_checkpoint

    def restore(self, path: str | Path, trust_code: bool = False) -> None:
        """Load a checkpoint's learner state and counters. Code it names outside rlmesh and
        this run's own config needs ``trust_code`` (see ``checkpoints.check_code``)."""
        meta, state = checkpoints.read(Path(path), trust_code, trusted=checkpoints.code_of(self))
        try:
            self.learner_group.set_state(state)
        except (RemoteError, RuntimeError, KeyError, ValueError, TypeError) as exc:
            # Another model or algorithm (layer sizes, a different env's spaces): torch's
            # "Error(s) in loading state_dict for X:" says little without its next line.
            text = exc.remote_msg if isinstance(exc, RemoteError) else str(
                exc.args[0] if exc.args else exc)
            lines = [line.strip() for line in str(text).splitlines() if line.strip()]
            raise checkpoints.CheckpointError(
                f"{path} does not fit this {type(self).__name__} run "
                f"({meta.get('algorithm')} checkpoint): {' '.join(lines[:2])[:300]}") from None
        self.env_runners.drop_sample_ahead()
        counters = meta["counters"]
        self.iteration = counters["training_iteration"]
        self.timesteps_total = counters["timesteps_total"]
        self.episodes_total = counters["episodes_total"]
        self.num_env_steps_trained = counters.get("num_env_steps_trained", 0)
        self.time_total_s = counters["time_total_s"]
        self.obs_filter.set_state(meta.get("filters", {}).get(DEFAULT_POLICY_ID))
        self.obs_filter.flush()  # the restored statistics are global already
        if self.config.observation_filter != "NoFilter":
            self.mesh.foreach_runner("set_filter_state", self.obs_filter.get_state())
        self._publish()
        if self.callbacks is not None:
            self.callbacks.on_checkpoint_loaded(algorithm=self)

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


def _learner_raised(exc: BaseException) -> bool:
    """A learner process's update raised something other than a policy error (those are one
    line already, and the CLI prints them so)."""
    return (isinstance(exc, RemoteError) and exc.actor.startswith("learner-")
            and exc.etype not in POLICY_ERRORS)


def _one_line_cause(exc: BaseException) -> str:
    if isinstance(exc, RemoteError):
        first = (exc.remote_msg.strip().splitlines() or [""])[0]
        where = f" in {exc.actor}" if exc.actor else ""
        return first if exc.etype == "LearnerStopped" else f"{exc.etype}{where}: {first}"
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]

