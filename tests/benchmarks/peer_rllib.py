"""The RLlib side of the PPO benchmarks: RLlib's PPO (new API stack) on CartPole-v1 with
2 env runners x 8 envs, measured the way bench_ppo.py measures rlmesh.

Runs with RLlib's own venv (``make bench-peers`` makes ``.venv-rllib``), never rlmesh's, and
imports nothing of rlmesh. One role per process, chosen by the first argument:

  sample WARMUP [--fragment auto|N]   serves bench_ppo's sampler protocol on stdin/stdout:
                                      "ready INFO", then one "STEPS SECONDS" per request
  startup --config JSON               prints "result" once the first ``train()`` returns
  train                               prints "session DIR", then "result N" after each
                                      ``train()``, until SIGINT
  learn --seed S                      rlmesh's tuned example (same hyperparameters and
                                      stop) run by RLlib; prints one JSON line
  versions                            prints ray's, torch's and gymnasium's versions

Every role ends with ``algo.stop()`` and ``ray.shutdown()``, then kills any process it
started that outlived them (ray's daemons and workers), so nothing of ray stays behind.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable

ENV = "CartPole-v1"
NUM_RUNNERS, NUM_ENVS = 2, 8
OUT = sys.stdout  # the lines bench_ppo reads; main() keeps everything else off it
ROOT = Path(__file__).resolve().parents[2]
# rlmesh's tuned example, read as YAML: the same network as the rlmesh side ([64, 64], tanh).
TUNED = ROOT / "rlmesh" / "tuned_examples" / "cartpole-ppo.yaml"


def tuned() -> dict[str, Any]:
    """rlmesh's tuned CartPole example (its config keys are RLlib's names)."""
    import yaml

    (experiment,) = yaml.safe_load(TUNED.read_text()).values()
    return experiment


def tuned_model() -> dict[str, Any]:
    return tuned()["config"]["model"]


def make_config(model: dict[str, Any] | None = None, **settings: Any) -> Any:
    """RLlib's PPOConfig with RLlib's defaults, 2 runners x 8 envs, and ``settings``
    (AlgorithmConfig keys, e.g. ``train_batch_size``) on top."""
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig

    config = (PPOConfig().environment(ENV)
              .env_runners(num_env_runners=NUM_RUNNERS, num_envs_per_env_runner=NUM_ENVS))
    if model is not None:
        known = {f.name for f in dataclasses.fields(DefaultModelConfig)}
        if set(model) - known:
            print(f"peer_rllib: model keys RLlib does not know, left out: "
                  f"{sorted(set(model) - known)}", file=sys.stderr)
        config = config.rl_module(model_config=DefaultModelConfig(
            **{k: v for k, v in model.items() if k in known}))
    if settings:
        config = config.update_from_dict(settings)
    return config


class Session:
    """``ray.init()`` (RLlib's default: a local head node), the processes it starts noted as
    they appear, and all of them gone on exit."""

    def __init__(self) -> None:
        import psutil
        import ray

        self.me = psutil.Process()
        self.seen: set[int] = set()
        ray.init()
        self.dir = ray._private.worker._global_node.get_session_dir_path()

    def note(self) -> None:
        import psutil

        try:
            self.seen.update(p.pid for p in self.me.children(recursive=True))
        except psutil.NoSuchProcess:
            pass

    def close(self, algo: Any = None) -> None:
        import psutil
        import ray

        self.note()
        try:
            if algo is not None:
                algo.stop()
        finally:
            ray.shutdown()
            self.note()
            procs = []
            for pid in self.seen:
                try:
                    procs.append(psutil.Process(pid))
                except psutil.NoSuchProcess:
                    pass
            _, alive = psutil.wait_procs(procs, timeout=10)
            for p in alive:
                print(f"peer_rllib: pid {p.pid} outlived ray.shutdown(); killing it",
                      file=sys.stderr)
                try:
                    p.kill()
                except psutil.NoSuchProcess:
                    pass
            psutil.wait_procs(alive, timeout=5)


def run_with_session(body: Callable[[Session], Any]) -> None:
    session = Session()
    algo = None
    try:
        algo = body(session)
    finally:
        session.close(algo)


def sample(args: argparse.Namespace) -> None:
    """The env runner group sampling as ``PPO.training_step`` does it, learning off."""
    from ray.rllib.execution.rollout_ops import synchronous_parallel_sample

    fragment = args.fragment if args.fragment == "auto" else int(args.fragment)
    config = make_config(tuned_model(), rollout_fragment_length=fragment)

    def body(session: Session) -> Any:
        algo = config.build_algo()
        session.note()
        group = algo.env_runner_group

        def run(steps: int) -> tuple[int, float]:
            t0 = time.perf_counter()
            episodes, _ = synchronous_parallel_sample(
                worker_set=group, max_env_steps=steps, sample_timeout_s=config.sample_timeout_s,
                _uses_new_env_runners=True, _return_metrics=True)
            secs = time.perf_counter() - t0
            return sum(e.env_steps() for e in episodes), secs

        run(args.warmup)
        session.note()
        print("ready", config.get_rollout_fragment_length(1), session.dir, file=OUT)
        for line in sys.stdin:
            steps, secs = run(int(line))
            print(steps, secs, file=OUT)
        return algo

    run_with_session(body)


def startup(args: argparse.Namespace) -> None:
    """``ray.init()``, build, one ``train()``; the caller times process start to "result"."""
    config = make_config(None, **json.loads(args.config))

    def body(session: Session) -> Any:
        algo = config.build_algo()
        algo.train()
        print("result", file=OUT)
        return algo

    run_with_session(body)


def train(args: argparse.Namespace) -> None:
    """PPO training with RLlib's defaults (and the tuned example's network) until SIGINT:
    the job whose memory bench_ppo samples."""
    config = make_config(tuned_model())

    def body(session: Session) -> Any:
        algo = config.build_algo()
        print("session", session.dir, file=OUT)
        i = 0
        try:
            while True:
                algo.train()
                i += 1
                print("result", i, file=OUT)
        except KeyboardInterrupt:
            return algo

    run_with_session(body)


def keep_return(*, episode: Any, prev_episode_chunks: Any = None, env_runner: Any = None,
                **_: Any) -> None:
    """on_episode_end, in an env runner: note the whole episode's return (its earlier chunks
    went out with earlier samples) for ``learn`` to collect."""
    ret = episode.get_return() + sum(c.get_return() for c in prev_episode_chunks or ())
    env_runner.__dict__.setdefault("bench_returns", []).append(float(ret))


def learn(args: argparse.Namespace) -> None:
    """rlmesh's tuned example run by RLlib (its hyperparameters, network and stop: the mean
    return of the last 100 episodes >= 475, or its step budget), like ppo_learning's rlmesh
    side. The returns are collected from the runners after each ``train()``: RLlib's own
    ``episode_return_mean`` is not a plain mean of the last 100 episodes."""
    from collections import deque

    from ray.rllib.utils.metrics import ENV_RUNNER_RESULTS, NUM_ENV_STEPS_SAMPLED_LIFETIME

    experiment = tuned()
    settings = dict(experiment["config"])
    model = settings.pop("model")
    if "lr_schedule" in settings:  # the new API stack takes the schedule as ``lr`` itself
        settings["lr"] = settings.pop("lr_schedule")
    threshold = experiment["stop"]["episode_reward_mean"]
    budget = experiment["stop"]["timesteps_total"]
    config = make_config(model, **settings, seed=args.seed).callbacks(on_episode_end=keep_return)
    out: dict[str, Any] = {}

    def body(session: Session) -> Any:
        algo = config.build_algo()
        group = algo.env_runner_group
        t0 = time.perf_counter()
        last: deque[float] = deque(maxlen=100)
        mean, steps, iterations = float("nan"), 0, 0
        while steps < budget:
            result = algo.train()
            iterations += 1
            steps = int(result[ENV_RUNNER_RESULTS][NUM_ENV_STEPS_SAMPLED_LIFETIME])
            for returns in group.foreach_env_runner(
                    lambda r: r.__dict__.pop("bench_returns", []), local_env_runner=False):
                last.extend(returns)
            mean = sum(last) / len(last) if last else float("nan")
            if mean >= threshold:
                break
        out.update(seed=args.seed, solved=mean >= threshold, timesteps=steps,
                   iterations=iterations, episode_reward_mean=mean,
                   learn_s=time.perf_counter() - t0)
        return algo

    run_with_session(body)
    print(json.dumps({**out, **versions()}), file=OUT)


def versions() -> dict[str, str]:
    from importlib.metadata import version

    return {name: version(name) for name in ("ray", "torch", "gymnasium")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    roles = parser.add_subparsers(dest="role", required=True)
    p = roles.add_parser("sample")
    p.add_argument("warmup", type=int)
    p.add_argument("--fragment", default="auto")
    p = roles.add_parser("startup")
    p.add_argument("--config", default="{}", help="AlgorithmConfig keys as JSON")
    roles.add_parser("train")
    p = roles.add_parser("learn")
    p.add_argument("--seed", type=int, default=0)
    roles.add_parser("versions")
    args = parser.parse_args()
    global OUT
    if args.role == "versions":
        print(json.dumps(versions()))
        return
    # Ray prints its workers' output through the driver's stdout: give it stderr, and keep
    # the real stdout for the lines bench_ppo reads.
    OUT = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    {"sample": sample, "startup": startup, "train": train, "learn": learn}[args.role](args)


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        pass
