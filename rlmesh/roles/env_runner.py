"""The EnvRunner: steps its own envs with a local copy of each policy and ships time-major
fragments stamped with the policy version they were sampled with.

``EnvSampler`` (``env_sampler.py``) is the sampling logic, tested without sockets;
``EnvRunner`` is the actor around it: config, policies and weights from the param server,
streaming, metrics, calls into the envs.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import os
import time
from typing import Any, Callable

import gymnasium as gym
import numpy as np

from rlmesh.callbacks import load_callbacks
from rlmesh.env.multi_agent_env import is_multi_agent
from rlmesh.env.registry import EnvContext, make_env, space_to_data
from rlmesh.offline.sharded import ShardedInput
from rlmesh.offline.writer import OutputWriter
from rlmesh.preprocessing import wrap_for_model
from rlmesh.rl.columns import DEFAULT_POLICY_ID
from rlmesh.rl.spec import numpy_fast_path
from rlmesh.runtime.work_counter import counter_path, shared_count
from rlmesh.utils.metrics.metrics_logger import RunnerMetricsLogger
from rlmesh.roles.env_sampler import SEED_STRIDE
from rlmesh.roles.gradient_runner import GradientRunner  # A3C's call
from rlmesh.roles.obs_filters import CONNECTOR_FILTER_CALLS, FILTER_CALLS, ObsFilterCalls
from rlmesh.roles.policy_changes import MultiAgentPolicies
from rlmesh.roles.runner_policy import VersionedPolicies, make_runner_policies
from rlmesh.roles.runner_sampler import bind, check_rewards, make_sampler
from rlmesh.roles.runner_streams import FragmentStreams
from rlmesh.roles.specs import RunnerSpec, runner_spec
from rlmesh.runtime import Actor, ActorUnavailable, current_job
from rlmesh.runtime.protocol import Data, Protocol
from rlmesh.runtime.import_path import SentCode

log = logging.getLogger(__name__)

#: What an env runner reports of its work, in heartbeats and in its work counter: the env
#: steps it took; its supervisor counts its crashes against them (max_env_runner_crashes).
RUNNER_WORK = "env_steps"

# A central inference actor's answer: a forward pass takes milliseconds, so no answer in
# this long means it died (its restart takes a few seconds): the request is sent again.
INFERENCE_TIMEOUT_S = 10.0
INFERENCE_WAIT_S = 120.0  # for its name to be registered at start

def runner_config(config: dict[str, Any]) -> tuple[Any, dict[str, Any] | None, dict[str, Any]]:
    """The config object, policy specs and env registry of what a runner was started with
    (``specs.runner_spec``: a RunnerSpec's data, or a config dict with underscore extras)."""
    spec = runner_spec(config)
    return spec.settings(), spec.policy_specs, spec.env_registry


def default_policy_specs(obs_space: gym.Space, action_space: gym.Space, config: Any
                         ) -> dict[str, dict[str, Any]]:
    """One ``default_policy`` of the config's policy class; none set: ``TorchPolicy``,
    named by path so that the default model's runner (the numpy fast path, what
    ``TorchPolicy.runner_class`` picks) never imports torch."""
    from rlmesh.policy.policy_spec import PolicySpec

    if config.policy_class is not None:
        spec = PolicySpec(config.policy_class).resolved(None, obs_space, action_space)
        return {DEFAULT_POLICY_ID: spec.to_data(config)}
    torch_policy = "rlmesh.policy.torch_policy:TorchPolicy"
    runner = ("rlmesh.policy.numpy_mlp:NumpyMLPPolicy"
              if numpy_fast_path(obs_space, action_space, config.model) else torch_policy)
    return {DEFAULT_POLICY_ID: {"policy_class": torch_policy, "runner_class": runner,
                                "observation_space": space_to_data(obs_space),
                                "action_space": space_to_data(action_space), "config": {}}}


class EnvRunner(FragmentStreams, MultiAgentPolicies, VersionedPolicies, GradientRunner,
                ObsFilterCalls, Actor):
    """Samples fragments with ``num_envs_per_env_runner`` envs (RLlib's EnvRunner).

    ``spec`` (a ``RunnerSpec``'s data) holds the config as the user wrote it, the driver's
    env registry, config class and policy specs; its ``worker_index`` counts from 1 (0: the
    runner in the driver). It subscribes to the actor named by its ``param_server``, which
    pushes newer weights; each fragment starts with the newest pushed (None: weights only
    by ``set_weights``).
    """

    # The calls it serves (request and reply types: the methods' signatures below).
    protocol = Protocol(
        calls=("sample", "sample_and_compute_gradients", "compute_actions", "set_weights",
               "take_weights", "get_weights", "add_policy", "remove_policy", "start_streaming",
               "reset_streams", "pop_sampled", *FILTER_CALLS, *CONNECTOR_FILTER_CALLS, "get_spaces", "apply", "foreach_env", "call_env_method",
               "metrics", "offline_stats", "refresh_weights", "weights_source_back"),
        test_hooks=("pid",),
    )

    def __init__(self, spec: dict[str, Any]) -> None:
        spec = self.spec = RunnerSpec.from_data(spec)
        # Where functions named by messages may come from (import_path.startup_code): the
        # packages this runner was started with, never a file or a package a message picks.
        self._main_script = spec.main_script
        self._sent_code = SentCode(spec.trusted_roots(), spec.main_script)
        cfg = self.config = spec.settings()
        self.worker_index = worker_index = spec.worker_index
        self.callbacks = load_callbacks(cfg.callbacks_class)
        # RLlib's env_runner.metrics: the callbacks' MetricsLogger, its values shipped with
        # each fragment; called, still the runner's counters (the ``metrics`` call).
        self.metrics = RunnerMetricsLogger(functools.partial(type(self).metrics, self))
        # Each env as the user's creator (or gym.make) built it, before rlmesh's wrappers
        # (horizon, the model's): what foreach_env and the callbacks' info["env"] hand out.
        self._user_envs: dict[int, gym.Env] = {}
        # Central inference (inference_actor.py): the actor's name, set by the mesh.
        self._inference_name, self._inference = spec.inference_actor, None
        seeds = ([None] * cfg.num_envs_per_env_runner if cfg.seed is None else
                 [cfg.seed + SEED_STRIDE * worker_index + i
                  for i in range(cfg.num_envs_per_env_runner)])
        self.sampler_kind, self.sampler = make_sampler(
            self, self._create_env, spec.env_registry, seeds, self.use_vector_env,
            central=bool(self._inference_name))
        check_rewards(self.sampler_kind, cfg, self.sampler)
        job = current_job()
        if job is not None:  # a blocked env step shows in the heartbeat's status
            job.diagnostics.add_probe(f"env_runner-{worker_index}", self._busy)
            if job.role != "driver" and hasattr(self.sampler, "steps_taken"):
                # Its env steps where its supervisor reads them after a crash.
                self.sampler.steps_taken = shared_count(counter_path(
                    job.run_dir.path, job.name, RUNNER_WORK))
        self._make_policies(spec.policy_specs, own_process=job is None or job.role != "driver")
        self.fragment_length = cfg.get_rollout_fragment_length(worker_index)
        self.complete_episodes = cfg.batch_mode == "complete_episodes"
        self._ps_name, self._ps = spec.param_server, None
        self._ps_fallback = spec.weights_fallback
        self._inbox: dict[str, Any] = {}
        self._stats = {"num_fragments": 0, "num_weight_updates": 0, "sample_time_s": 0.0,
                       "num_fragments_lost": 0, "num_weight_pushes": 0, "num_weight_pulls": 0,
                       "num_inference_retries": 0}
        self.init_streams()
        # ``output``: what this runner samples also goes to files of its own (docs/offline.md).
        self.output_writer = OutputWriter.from_config(cfg, worker_index)
        # ``input`` naming files (MARWIL, BC): this runner serves its shard (offline/sharded.py).
        self.offline_input = ShardedInput.from_config(cfg, worker_index, self)

    def _create_env(self, i: int) -> gym.Env:
        """Env ``i`` as the sampler steps it: the user's, with the horizon and the model's
        wrappers (and a subclass's, ``wrap_env``)."""
        cfg = self.config
        context = EnvContext(cfg.env_config, self.worker_index, i, cfg.num_env_runners)
        env = self._user_envs[i] = make_env(cfg.env, context, self.spec.env_registry,
                                            model=cfg.model, preprocessor_pref=cfg.preprocessor_pref)
        if cfg.horizon is not None:  # RLlib's old horizon: a time limit of its own
            if is_multi_agent(env):
                raise ValueError("horizon: a MultiAgentEnv ends its own episodes; set "
                                 "__all__ truncated in the env instead")
            env = gym.wrappers.TimeLimit(env, max_episode_steps=cfg.horizon)
        env = wrap_for_model(self.wrap_env(env, i), cfg.model)
        if self.callbacks is not None:
            self.callbacks.on_environment_created(env_runner=self, env=env, env_context=context,
                                                  metrics_logger=self.metrics)
        return env

    def _make_policies(self, specs: dict[str, Any] | None, own_process: bool) -> None:
        """This runner's copy of each policy (one default policy when ``specs`` is None)."""
        cfg = self.config
        if specs is None:
            specs = default_policy_specs(self.sampler.observation_space,
                                         self.sampler.action_space, cfg)
        self.policies = make_runner_policies(
            specs, cfg, None if cfg.seed is None else cfg.seed + SEED_STRIDE * self.worker_index,
            own_process=own_process)
        for policy in self.policies.values():  # per-runner exploration (APEX)
            policy.worker_index = self.worker_index
        self.versions = {pid: -1 for pid in self.policies}  # no weights from the param server yet
        self.policy_id = DEFAULT_POLICY_ID if DEFAULT_POLICY_ID in self.policies else next(iter(self.policies))
        self.sampler.policy = self.policies[self.policy_id]
        bind(self.sampler_kind, self.sampler, self.policies, cfg, self._main_script)

    in_evaluation = False  # EvalRunner (roles/eval_runner.py) says True
    use_vector_env = True  # EvalRunner steps one env at a time, to cap and record episodes

    def wrap_env(self, env: gym.Env, index: int) -> gym.Env:
        """The env as made, before the model's wrappers: a subclass adds its own."""
        return env

    @property
    def envs(self) -> list[gym.Env]:
        return self.sampler.envs

    @property
    def user_envs(self) -> list[gym.Env]:
        """Each env as the user built it (a gym.Wrapper of theirs included, rlmesh's own
        wrappers left out); the Atari vector env's games as the sampler holds them."""
        if len(self._user_envs) < len(self.envs):
            return self.envs
        return [self._user_envs[i] for i in range(len(self.envs))]

    # RLlib's RolloutWorker names, for functions given to algo.workers.foreach_worker
    @property
    def policy_map(self) -> dict[str, Any]:
        return self.policies

    def get_policy(self, policy_id: str = DEFAULT_POLICY_ID) -> Any:
        """This runner's copy of policy ``policy_id`` (foreach_worker refreshes its weights
        from the param server before the function runs)."""
        try:
            return self.policies[policy_id]
        except KeyError:
            raise KeyError(f"no policy {policy_id!r}; this runner has "
                           f"{sorted(self.policies)}") from None

    async def refresh_weights(self) -> int:
        """Load the param server's newest weights now, not at the next fragment: a
        function given to ``foreach_worker`` after train() sees the weights train() made,
        as RLlib's synced workers do. The version held afterwards."""
        if self._ps_name is None:
            return self.version
        if self._ps is None:
            await self._refresh_weights()
        else:
            self._keep(await self._ask_weights(self._wanted_versions()))
            self._take_pushed()
        return self.version

    def _busy(self) -> dict[str, Any]:
        """What the loop is in, and the env steps sampled (the supervisor's measure of this
        process's life: max_env_runner_crashes), for the heartbeat (read from the control
        thread)."""
        b = self.sampler.stepping
        taken = getattr(self.sampler, "steps_taken", None)  # EnvSampler's, mid-fragment too
        steps = {RUNNER_WORK: int(self.sampler.counters.get("num_env_steps_sampled", 0)
                                  if taken is None else taken[0])}
        if b < 0:
            return steps
        return {"busy": f"env {b} step() of env runner {self.worker_index}", **steps}

    async def sample(self, explore: bool | None = None,
                     weights_up_to: int | None = None) -> dict[str, Any]:
        """A fragment (see ``EnvSampler.sample``) with ``policy_version`` and ``worker_index``;
        first loads the newest weights the param server pushed, if any (see
        ``_refresh_weights`` for ``weights_up_to``)."""
        await self._refresh_weights(weights_up_to)
        return await self._sample_now(explore)

    async def _sample_now(self, explore: bool | None = None) -> dict[str, Any]:
        start = time.perf_counter()
        fragment = read = None
        if self.offline_input is not None:  # None: this fragment's draw is the env
            fragment = read = self.offline_input.sample(self.fragment_length * len(self.envs))
        if fragment is None:
            fragment = self.sampler.sample(self.fragment_length, self.complete_episodes, explore)
            if inspect.isawaitable(fragment):  # the vector sampler (double buffered, central)
                fragment = await fragment
        self._stats["sample_time_s"] += time.perf_counter() - start
        self._stats["num_fragments"] += 1
        fragment["policy_version"] = self.versions[self.policy_id]
        used = getattr(self.sampler, "versions_used", None)
        if used:  # central inference: the oldest weights the fragment was acted with
            fragment["policy_version"] = min(used)
        fragment["policy_id"] = self.policy_id
        for pid, part in fragment.get("policy_batches", {}).items():  # multi-agent
            part["policy_version"] = self.versions[pid]
            fragment["policy_version"] = min(fragment["policy_version"], part["policy_version"])
        fragment["worker_index"] = self.worker_index
        log.debug("fragment %d: %d env steps, %d episodes ended, policy version %d",
                  self._stats["num_fragments"], fragment["env_steps"],
                  len(fragment["episodes"]), fragment["policy_version"])
        if self.callbacks is not None:
            self.callbacks.on_postprocess_trajectory(
                env_runner=self, policy_id=self.policy_id, policies=self.policies,
                postprocessed_batch=fragment, metrics_logger=self.metrics)
            self.callbacks.on_sample_end(env_runner=self, samples=fragment,
                                         metrics_logger=self.metrics)
        logged = self.metrics.pending_state()
        if logged:  # what the callbacks logged since the last fragment, for the driver
            fragment["runner_metrics"] = logged
        if self.output_writer is not None and read is None:  # what the callbacks left
            self.output_writer.write(fragment, getattr(self.sampler, "last_owners", None))
        return fragment

    def compute_actions(self, obs: np.ndarray, explore: bool | None = None,
                        policy_id: str = DEFAULT_POLICY_ID) -> dict[str, np.ndarray]:
        """Policy ``policy_id`` on a batch of observations: actions (as sampled, before
        clipping or rescaling) and its extra outputs (logp, distribution inputs, ...)."""
        actions, _, extras = self.policies[policy_id].compute_actions(np.array(obs),
                                                                      explore=explore)
        return {"actions": actions, **extras}

    async def _central_act(self, obs: np.ndarray, explore: bool | None
                           ) -> tuple[np.ndarray, dict[str, np.ndarray], int]:
        """Actions from the inference actor; while it is down (killed, restarting) the
        request is sent again until it answers: the runner waits, nothing is lost."""
        while True:
            try:
                if self._inference is None:
                    self._inference = await self.job.get_actor(self._inference_name,
                                                               timeout=INFERENCE_WAIT_S)
                reply = await self._inference.call("compute_actions", obs, explore,
                                                   self.version, timeout=INFERENCE_TIMEOUT_S)
                return reply["actions"], reply["extras"], reply["version"]
            except (ActorUnavailable, KeyError) as exc:
                self._stats["num_inference_retries"] += 1
                log.warning("env runner %d: inference actor unavailable (%s); waiting for it",
                            self.worker_index, str(exc).splitlines()[0])
                await asyncio.sleep(0.2)

    @property
    def obs_filter(self) -> Any:
        """The sampler's observation filter (ObsFilterCalls serves the driver's calls)."""
        return self.sampler.obs_filter

    def get_spaces(self) -> dict[str, Any]:
        """The spaces as plain data (``rlmesh.env.registry.space_from_data`` rebuilds them)."""
        return {"observation_space": space_to_data(self.sampler.observation_space),
                "action_space": space_to_data(self.sampler.action_space)}

    def apply(self, fn_path: str, *args: Data, **kwargs: Data) -> Any:
        """``fn(self, *args, **kwargs)``, ``fn`` named by its import path (RLlib's
        ``foreach_env_runner``): a function of the user's code this runner was started with
        (``SentCode``: never a file, never rlmesh's own, public names only); the arguments
        and the result are plain data."""
        return self._sent_code.resolve(fn_path, "foreach_env_runner function")(self, *args, **kwargs)

    def foreach_env(self, fn_path: str | Callable[..., Any], *args: Data) -> list[Any]:
        """``fn(env, *args)`` for each env as the user built it (``user_envs``: their
        wrappers included), ``fn`` named by its import path ``"pkg.module:func"`` (as
        ``apply``'s: a lambda of this machine's driver comes as the token of the spawn
        channel it was given on), or, called in this process (a function given to
        ``foreach_worker``), the function itself. Results of a served call are plain data."""
        fn = fn_path if callable(fn_path) else self._sent_code.resolve(fn_path,
                                                                        "foreach_env function")
        return [fn(env, *args) for env in self.user_envs]

    def call_env_method(self, name: str, *args: Data, **kwargs: Data) -> list[Any]:
        """``<name>(*args, **kwargs)`` on each env as the user built it, found on the
        outermost wrapper that has it, else on the env inside (gymnasium's
        ``get_wrapper_attr``: a method of the base env under gym.make's wrappers is found
        as before); a public method only (no ``__class__``, ``_private``, no attribute that
        is not a method)."""
        if not name.isidentifier() or name.startswith("_"):
            raise PermissionError(f"env method {name!r}: only public methods can be called")
        methods = [_env_method(env, name) for env in self.user_envs]
        if not all(inspect.ismethod(m) for m in methods):
            raise PermissionError(f"env method {name!r}: the env has no such method")
        return [method(*args, **kwargs) for method in methods]

    def metrics(self) -> dict[str, Any]:
        """Counters since the runner started."""
        stats = {**self.sampler.counters, **self._stats}
        secs = stats["sample_time_s"]
        return {**stats, "worker_index": self.worker_index, "policy_version": self.version,
                "env_steps_per_s": stats["num_env_steps_sampled"] / secs if secs else 0.0}

    def offline_stats(self) -> dict[str, Any]:
        """The files of this runner's ``input`` shard and what it served ({}: none)."""
        if self.offline_input is None:
            return {}
        return {"worker_index": self.worker_index, **self.offline_input.stats()}

    def pid(self) -> int:
        """This runner's process id (tests kill it to exercise restarts)."""
        return os.getpid()

    async def on_stop(self) -> None:
        if self._stream_task is not None:
            self._stream_task.cancel()
        if self.output_writer is not None:
            self.output_writer.close()
        closing = [self.sampler] if hasattr(self.sampler, "close") else self.envs
        for env in closing:
            try:
                env.close()
            except Exception:
                log.warning("env raised in close()", exc_info=True)


def _env_method(env: Any, name: str) -> Any:
    """``env``'s attribute ``name``, or that of the first env inside its wrappers that has it."""
    try:
        return env.get_wrapper_attr(name) if isinstance(env, gym.Wrapper) else getattr(env, name)
    except AttributeError:
        return None
