"""The RLlib side of the IMPALA/APPO learning benchmark: RLlib's IMPALA or APPO (new API
stack) on CartPole-v1 with 2 env runners x 8 envs, run to rlmesh's stop rule (the mean
return of the last 100 episodes >= 450) or a step budget, timed from process start.

Runs with RLlib's own venv (``make bench-peers`` makes ``.venv-rllib``), never rlmesh's, and
imports nothing of rlmesh. Roles, chosen by the first argument:

  learn --algo impala|appo --seed S [--max-steps N] [--max-wall SECONDS] [--settings JSON]
        prints one JSON line: reached, wall_s (process start to the stop), env_steps
        (sampled; env_steps_trained beside it), iterations, episode_reward_mean, the
        settings used, and the versions; a run cut short by --max-wall says out_of_time
  versions
        prints ray's, torch's and gymnasium's versions

Defaults: RLlib's tuned CartPole examples for ray 2.60 (``rllib/examples/algorithms/
{impala,appo}/cartpole_*.py`` in the ray repository; the wheel does not ship them), on top
of the algorithms' own defaults, in RLlib config keys:

  both   num_env_runners=2, num_envs_per_env_runner=8 (the benchmark's, not the examples'),
         num_learners=1 (IMPALAConfig's default: one learner actor, async updates),
         num_aggregator_actors_per_learner=0, rollout_fragment_length=50,
         gamma=0.99, grad_clip=40.0, grad_clip_by="global_norm", vtrace=True,
         vtrace_clip_rho_threshold=1.0, vtrace_clip_pg_rho_threshold=1.0,
         broadcast_interval=1, num_epochs=1, minibatch_size=None, Adam optimizer,
         model: DefaultModelConfig(fcnet_hiddens=[256, 256], fcnet_activation="tanh",
         vf_share_layers=True, head_fcnet_hiddens=[]) -- a shared torso, linear heads
  impala train_batch_size_per_learner=500, lr=0.0005, vf_loss_coeff=0.05,
         entropy_coeff=0.0, learner_queue_size=3
  appo   train_batch_size_per_learner=500, lr=0.0005, vf_loss_coeff=0.05,
         entropy_coeff=0.0, circular_buffer_num_batches=8,
         circular_buffer_iterations_per_batch=2, clip_param=0.4, use_gae=True,
         lambda_=1.0, use_kl_loss=False, target_network_update_freq=2, tau=1.0,
         target_worker_clipping=2.0

(The keys the examples set themselves: impala train_batch_size_per_learner, grad_clip,
grad_clip_by, lr, vf_loss_coeff, entropy_coeff; appo circular_buffer_iterations_per_batch,
vf_loss_coeff, entropy_coeff; both vf_share_layers. Later upstream versions add a
MeanStdFilter to IMPALA's and lambda_=0.95 with 2 aggregator actors to APPO's; not used.)
And one setting of the benchmark's own: min_time_s_per_iteration=1 (RLlib's default, 10,
would let a run go on up to 10 s past the point where it reached 450 before the stop rule
sees it). ``--settings`` overrides any of these (``{"lr": 0.001, "model":
{"fcnet_hiddens": [64, 64]}}``).

Ray is started with as many logical CPUs as the job asks for (2 runners + 1 learner), even
on a 2-core machine, so the learner actor is scheduled at all. The role ends with
``algo.stop()`` and ``ray.shutdown()``, then kills any process it started that outlived them.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import json
import os
import sys
import time
from collections import deque
from typing import Any

import peer_rllib
from peer_rllib import ENV, NUM_ENVS, NUM_RUNNERS, Session, keep_return, versions

THRESHOLD = 450.0  # mean return of the last 100 episodes
WINDOW = 100
MAX_STEPS = 2_000_000

# RLlib's tuned CartPole examples (ray 2.60), the keys they set.
TUNED: dict[str, dict[str, Any]] = {
    "impala": {"train_batch_size_per_learner": 500, "grad_clip": 40.0,
               "grad_clip_by": "global_norm", "lr": 0.0005, "vf_loss_coeff": 0.05,
               "entropy_coeff": 0.0},
    "appo": {"circular_buffer_iterations_per_batch": 2, "vf_loss_coeff": 0.05,
             "entropy_coeff": 0.0},
}
TUNED_MODEL: dict[str, Any] = {"vf_share_layers": True}
BENCH = {"num_env_runners": NUM_RUNNERS, "num_envs_per_env_runner": NUM_ENVS,
         "min_time_s_per_iteration": 1}

# Reported with every run (resolved values, defaults included), so the rlmesh side can match.
REPORTED = ["num_env_runners", "num_envs_per_env_runner", "num_learners",
            "num_aggregator_actors_per_learner", "rollout_fragment_length",
            "train_batch_size_per_learner", "lr", "gamma", "grad_clip", "grad_clip_by",
            "vf_loss_coeff", "entropy_coeff", "num_epochs", "minibatch_size",
            "broadcast_interval", "learner_queue_size", "vtrace",
            "vtrace_clip_rho_threshold", "vtrace_clip_pg_rho_threshold",
            "min_time_s_per_iteration", "seed"]
REPORTED_APPO = ["circular_buffer_num_batches", "circular_buffer_iterations_per_batch",
                 "use_circular_buffer", "clip_param", "use_gae", "lambda_", "use_kl_loss",
                 "kl_coeff", "target_network_update_freq", "tau", "target_worker_clipping"]
MODEL_REPORTED = ["fcnet_hiddens", "fcnet_activation", "vf_share_layers", "head_fcnet_hiddens"]


def make_config(algo: str, seed: int, overrides: dict[str, Any]) -> Any:
    """The tuned example's config for ``algo``, the benchmark's settings, then ``overrides``
    (AlgorithmConfig keys; ``model`` holds DefaultModelConfig fields)."""
    from ray.rllib.algorithms.appo import APPOConfig
    from ray.rllib.algorithms.impala import IMPALAConfig
    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig

    config = {"impala": IMPALAConfig, "appo": APPOConfig}[algo]().environment(ENV)
    overrides = dict(overrides)
    model = {**TUNED_MODEL, **overrides.pop("model", {})}
    settings = {**TUNED[algo], **BENCH, **overrides, "seed": seed}
    known_model = {f.name for f in dataclasses.fields(DefaultModelConfig)}
    for keys, known, what in ((settings, dir(config), algo.upper() + "Config"),
                              (model, known_model, "DefaultModelConfig")):
        for key in keys:
            # update_from_dict sets unknown keys silently: a typo would go unnoticed.
            if key not in known and key.rstrip("_") + "_" not in known:
                close = difflib.get_close_matches(key, list(known), n=1)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                raise SystemExit(f"peer_rllib_async: {what} has no setting {key!r}{hint}")
    return (config.update_from_dict(settings)
            .rl_module(model_config=DefaultModelConfig(**model))
            .callbacks(on_episode_end=keep_return))


def settings_used(algo: str, config: Any) -> dict[str, Any]:
    keys = REPORTED + (REPORTED_APPO if algo == "appo" else [])
    used = {k: getattr(config, k) for k in keys}
    model = config.model_config
    used["model"] = {k: (model[k] if isinstance(model, dict) else getattr(model, k))
                     for k in MODEL_REPORTED}
    return used


def logical_cpus(config: Any) -> int:
    """CPUs the job reserves in ray: one per env runner and learner actor (ray would wait
    forever for a learner that does not fit), at least the machine's cores."""
    runners = config.num_env_runners * config.num_cpus_per_env_runner
    learner = config.num_cpus_per_learner
    learners = config.num_learners * (1 if learner == "auto" else learner)
    aggregators = config.num_learners * config.num_aggregator_actors_per_learner
    return max(os.cpu_count() or 1, int(runners + learners + aggregators + 0.999))


class AsyncSession(Session):
    """peer_rllib's Session, ray started with ``num_cpus`` logical CPUs."""

    def __init__(self, num_cpus: int) -> None:  # not super().__init__(): it inits ray bare
        import psutil
        import ray

        self.me = psutil.Process()
        self.seen: set[int] = set()
        ray.init(num_cpus=num_cpus)
        self.dir = ray._private.worker._global_node.get_session_dir_path()


def learn(args: argparse.Namespace) -> None:
    """Train until the mean of the last 100 episode returns reaches 450 or ``max_steps``
    env steps were sampled; the returns come from the runners after each ``train()``
    (RLlib's own episode_return_mean is not a plain 100-episode mean)."""
    import psutil
    from ray.rllib.utils.metrics import (ALL_MODULES, ENV_RUNNER_RESULTS, LEARNER_RESULTS,
                                         NUM_ENV_STEPS_SAMPLED_LIFETIME,
                                         NUM_ENV_STEPS_TRAINED_LIFETIME)

    started = psutil.Process().create_time()
    config = make_config(args.algo, args.seed, json.loads(args.settings))
    out: dict[str, Any] = {"algo": args.algo, "seed": args.seed}
    session = AsyncSession(logical_cpus(config))
    algo = None
    try:
        algo = config.build_algo()
        session.note()
        out["build_s"] = time.time() - started
        group = algo.env_runner_group
        last: deque[float] = deque(maxlen=WINDOW)
        mean, steps, trained, iterations, episodes = float("nan"), 0, 0, 0, 0
        while steps < args.max_steps and time.time() - started < args.max_wall:
            result = algo.train()
            iterations += 1
            steps = int(result.get(ENV_RUNNER_RESULTS, {}).get(
                NUM_ENV_STEPS_SAMPLED_LIFETIME, steps))
            # Fewer than sampled where the learner fell behind and batches were dropped.
            trained = int(result.get(LEARNER_RESULTS, {}).get(ALL_MODULES, {}).get(
                NUM_ENV_STEPS_TRAINED_LIFETIME, trained))
            for returns in group.foreach_env_runner(
                    lambda r: r.__dict__.pop("bench_returns", []), local_env_runner=False):
                last.extend(returns)
                episodes += len(returns)
            mean = sum(last) / len(last) if len(last) == WINDOW else float("nan")
            print(f"peer_rllib_async: {time.time() - started:7.1f}s it {iterations:4d} "
                  f"steps {steps:8d} trained {trained:8d} episodes {episodes:6d} "
                  f"mean100 {mean:6.1f}",
                  file=sys.stderr)
            if mean >= THRESHOLD:
                break
        out.update(reached=mean >= THRESHOLD, wall_s=round(time.time() - started, 2),
                   env_steps=steps, env_steps_trained=trained, iterations=iterations,
                   episodes=episodes,
                   episode_reward_mean=mean, max_steps=args.max_steps,
                   out_of_time=mean < THRESHOLD and steps < args.max_steps,
                   settings=settings_used(args.algo, config), ray_num_cpus=logical_cpus(config),
                   cores=os.cpu_count())
        session.note()
    finally:
        session.close(algo)
    print(json.dumps({**out, **versions()}), file=peer_rllib.OUT)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    roles = parser.add_subparsers(dest="role", required=True)
    p = roles.add_parser("learn")
    p.add_argument("--algo", choices=sorted(TUNED), required=True)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-steps", type=int, default=MAX_STEPS)
    p.add_argument("--max-wall", type=float, default=float("inf"),
                   help="give up after this many seconds from process start")
    p.add_argument("--settings", default="{}",
                   help='AlgorithmConfig keys as JSON; "model" holds DefaultModelConfig keys')
    roles.add_parser("versions")
    args = parser.parse_args()
    if args.role == "versions":
        print(json.dumps(versions()))
        return
    # Ray prints its workers' output through the driver's stdout: give it stderr, and keep
    # the real stdout for the one JSON line.
    peer_rllib.OUT = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    learn(args)


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        pass
