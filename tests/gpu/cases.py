"""The GPU suite's cases: every registered algorithm with a CUDA learner for a few
iterations, and the settings around the learner that a device can break (data-parallel
learners on one GPU, NCCL over two, LSTM and conv models, multi-agent, checkpoints moved
between devices, export_model, offline data, evaluation runners).

Each case runs in a process of its own (``python -m tests.gpu.run --case NAME``). With
``--cpu-check`` the same cases run on the CPU with ``_fake_gpus`` and RLMESH_CHECK_DEVICES=1
(``rlmesh/policy/device_check.py``): a tensor made without ``device=`` fails there too, so
the suite itself is tried on a machine without a GPU.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable

import numpy as np

from rlmesh.driver.algorithm_registry import ALGORITHMS, get_config_class

CARTPOLE, PENDULUM = "CartPole-v1", "Pendulum-v1"
ITERATIONS = 3

#: Sized so that each algorithm updates at least once in ITERATIONS iterations.
SMALL = {"num_env_runners": 1, "num_envs_per_env_runner": 2, "rollout_fragment_length": 50,
         "model": {"fcnet_hiddens": [32, 32]}, "seed": 0}
ON_POLICY = {**SMALL, "train_batch_size": 200, "minibatch_size": 100, "num_epochs": 2}
OFF_POLICY = {**SMALL, "train_batch_size": 32, "num_steps_sampled_before_learning_starts": 100,
              "rollout_fragment_length": 25}
ASYNC = {**SMALL, "train_batch_size": 100, "min_time_s_per_iteration": 1}
ALGORITHM_SETTINGS: dict[str, tuple[str, dict[str, Any]]] = {
    "PPO": (CARTPOLE, ON_POLICY),
    "PG": (CARTPOLE, {**SMALL, "train_batch_size": 200}),
    "A2C": (CARTPOLE, {**SMALL, "train_batch_size": 100}),
    "A3C": (CARTPOLE, {**SMALL, "rollout_fragment_length": 20}),
    "IMPALA": (CARTPOLE, ASYNC),
    "APPO": (CARTPOLE, ASYNC),
    "DQN": (CARTPOLE, OFF_POLICY),
    "DDPG": (PENDULUM, OFF_POLICY),
    "TD3": (PENDULUM, OFF_POLICY),
    "SAC": (PENDULUM, OFF_POLICY),
    "APEX": (CARTPOLE, {**OFF_POLICY, "num_env_runners": 2, "num_replay_buffer_shards": 2,
                        "min_sample_timesteps_per_iteration": 300}),
    "APEX_DDPG": (PENDULUM, {**OFF_POLICY, "num_replay_buffer_shards": 1,
                             "min_sample_timesteps_per_iteration": 300}),
    "ES": (CARTPOLE, {"num_env_runners": 1, "episodes_per_batch": 4,
                      "train_batch_size": 200, "noise_size": 1_000_000, "seed": 0}),
    "ARS": (CARTPOLE, {"num_env_runners": 1, "num_rollouts": 2, "rollouts_used": 2,
                       "noise_size": 1_000_000, "seed": 0}),
}
OFFLINE = ("BC", "MARWIL")  # trained on data a PPO run writes (case "offline")


class CaseFailed(AssertionError):
    pass


def device_settings(cpu_check: bool, gpus: float = 1) -> dict[str, Any]:
    """A learner asking for ``gpus``; on the CPU (``--cpu-check``) it gets the CPU instead."""
    return {"num_gpus_per_learner": gpus, **({"_fake_gpus": True} if cpu_check else {})}


def build(run: str, env: str, settings: dict[str, Any]) -> Any:
    config = get_config_class(run).from_dict({"env": env, **settings})
    config.validate()
    return config.build()


def train(algo: Any, iterations: int = ITERATIONS) -> dict[str, Any]:
    """``iterations`` results; the last one, checked for a learner update with finite stats."""
    for _ in range(iterations):
        result = algo.train()
    learner = result.get("info", {}).get("learner", {})
    numbers = {f"{pid}/{k}": v for pid, stats in learner.items() for k, v in stats.items()
               if isinstance(v, (int, float))}
    bad = [k for k, v in numbers.items() if not math.isfinite(v)]
    if bad:
        raise CaseFailed(f"non-finite learner statistics: {bad}")
    return result


def run_algorithm(run: str, cpu_check: bool, **extra: Any) -> None:
    env, settings = ALGORITHM_SETTINGS[run]
    with build(run, env, {**settings, **device_settings(cpu_check), **extra}) as algo:
        result = train(algo)
    if run not in ("ES", "ARS") and not result.get("info", {}).get("learner"):
        raise CaseFailed(f"{run}: no learner statistics in {ITERATIONS} iterations")


def data_parallel_shared(cpu_check: bool) -> None:
    """Two learners on one GPU (0.5 each): gloo through host memory."""
    run_algorithm("PPO", cpu_check, num_learners=2, **device_settings(cpu_check, 0.5))


def impala_data_parallel_shared(cpu_check: bool) -> None:
    run_algorithm("IMPALA", cpu_check, num_learners=2, **device_settings(cpu_check, 0.5))


def nccl(cpu_check: bool) -> str | None:
    """Two learners on two GPUs: NCCL. Skipped (a reason) with fewer than two GPUs."""
    import torch

    if cpu_check or torch.cuda.device_count() < 2:
        return "skipped: needs 2 GPUs"
    run_algorithm("PPO", cpu_check, num_learners=2)
    return None


def lstm(cpu_check: bool) -> None:
    model = {"fcnet_hiddens": [32], "use_lstm": True, "lstm_cell_size": 32, "max_seq_len": 10}
    run_algorithm("PPO", cpu_check, model=model)
    run_algorithm("IMPALA", cpu_check, model=model)


def conv(cpu_check: bool) -> None:
    """A Nature-CNN-sized conv net on 84x84x4 uint8 frames (the default model for them)."""
    settings = {**ON_POLICY, "model": {}, "train_batch_size": 256, "minibatch_size": 128}
    with build("PPO", "tests.gpu.envs:HalfFrameEnv",
               {**settings, **device_settings(cpu_check)}) as algo:
        train(algo, 2)


def atari_central(cpu_check: bool) -> str | None:
    """Pong in ale-py's vector env, its actions from the central inference actor on the
    GPU (double-buffered runners), PPO then IMPALA with a CUDA learner."""
    try:
        import ale_py.vector_env  # noqa: F401
    except ImportError:
        return "skipped: needs ale-py >= 0.10 (rlmesh[envs])"
    settings = {"env_config": {"atari": {"vector": True}}, "clip_rewards": True,
                "num_env_runners": 2, "num_envs_per_env_runner": 4,
                "rollout_fragment_length": 32, "inference_mode": "central",
                "model": {"vf_share_layers": True}, "seed": 0}
    with build("PPO", "ALE/Pong-v5", {**settings, "train_batch_size": 256,
                                       "minibatch_size": 128, "num_epochs": 1,
                                       **device_settings(cpu_check)}) as algo:
        result = train(algo, 2)
    if result["info"]["inference"]["mode"] != "central":
        raise CaseFailed(f"inference: {result['info']['inference']}")
    with build("IMPALA", "ALE/Pong-v5", {**settings, "train_batch_size": 256,
                                          "min_time_s_per_iteration": 1,
                                          **device_settings(cpu_check)}) as algo:
        train(algo, 2)
    return None


def multi_agent(cpu_check: bool) -> None:
    settings = {**ON_POLICY, "env_config": {"num_agents": 2}, "policies": ["p0", "p1"],
                "policy_mapping_fn": "tests.integration.multi_agent_envs:cartpole_two"}
    with build("PPO", "examples.multi_agent_cartpole:make_env",
               {**settings, **device_settings(cpu_check)}) as algo:
        result = train(algo)
    if set(result["info"]["learner"]) != {"p0", "p1"}:
        raise CaseFailed(f"expected both policies to learn, got {sorted(result['info']['learner'])}")


def _actions(algo: Any) -> np.ndarray:
    obs = np.random.default_rng(0).normal(size=(8, 4)).astype(np.float32)
    return np.array([algo.compute_single_action(o, explore=False) for o in obs])


def checkpoint_gpu_to_cpu(cpu_check: bool) -> None:
    """Written by a CUDA learner; in processes that see no CUDA at all, restored into a CPU
    learner (acting as saved, training on) and rolled out by ``rlmesh rollout``."""
    env, settings = ALGORITHM_SETTINGS["PPO"]
    hidden = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    with tempfile.TemporaryDirectory() as tmp:
        with build("PPO", env, {**settings, **device_settings(cpu_check)}) as algo:
            train(algo, 2)
            path = algo.save(Path(tmp) / "checkpoint")
            np.save(Path(tmp) / "expected.npy", _actions(algo))
        code = ("import sys, numpy as np, torch; assert not torch.cuda.is_available(); "
                "from tests.gpu.cases import ALGORITHM_SETTINGS, build, _actions, train; "
                "a = build('PPO', sys.argv[1], ALGORITHM_SETTINGS['PPO'][1]); a.restore(sys.argv[2]); "
                "assert np.array_equal(_actions(a), np.load(sys.argv[3])), 'acts otherwise'; "
                "train(a, 1); a.stop()")
        for cmd in ([sys.executable, "-c", code, env, path, str(Path(tmp) / "expected.npy")],
                    [sys.executable, "-m", "rlmesh.cli.main", "rollout", path, "--steps", "200"]):
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=hidden)
            if done.returncode != 0:
                raise CaseFailed(f"{' '.join(cmd[1:3])} without CUDA: {_last_line(done.stderr)}")


def checkpoint_cpu_to_gpu(cpu_check: bool) -> None:
    """Written by a CPU learner, restored into a CUDA learner that trains on."""
    env, settings = ALGORITHM_SETTINGS["PPO"]
    with tempfile.TemporaryDirectory() as tmp:
        with build("PPO", env, settings) as algo:
            train(algo, 2)
            path = algo.save(tmp)
            expected = _actions(algo)
        with build("PPO", env, {**settings, **device_settings(cpu_check)}) as algo:
            algo.restore(path)
            if not np.array_equal(_actions(algo), expected):
                raise CaseFailed("the restored policy acts unlike the saved one")
            train(algo, 2)


def export(cpu_check: bool) -> None:
    """export_model from a policy whose model lives on the GPU, loaded back with plain torch."""
    import gymnasium as gym
    import torch

    from rlmesh.algorithms.ppo import PPOTorchPolicy

    config = get_config_class("PPO").from_dict({"env": CARTPOLE, **ON_POLICY})
    env = gym.make(CARTPOLE)
    device = "cpu" if cpu_check else "cuda"
    policy = PPOTorchPolicy(env.observation_space, env.action_space, config, device=device)
    with tempfile.TemporaryDirectory() as tmp:
        path = policy.export_model(tmp)
        loaded = torch.jit.load(path)
        obs = torch.zeros(3, 4)
        dist_inputs, value = loaded(obs)
        with torch.no_grad():
            want = policy.model(obs.to(device))[0].cpu()
        if not torch.allclose(dist_inputs, want, atol=1e-5) or value.shape != (3,):
            raise CaseFailed("the exported model computes other outputs than the policy")


def offline(cpu_check: bool) -> None:
    """BC and MARWIL with CUDA learners, on data a short CPU PPO run writes."""
    env, settings = ALGORITHM_SETTINGS["PPO"]
    with tempfile.TemporaryDirectory() as tmp:
        with build("PPO", env, {**settings, "output": tmp}) as algo:
            train(algo, 3)
        for run in OFFLINE:
            with build(run, env, {"input": tmp, "train_batch_size": 200, "minibatch_size": 100,
                                  "model": {"fcnet_hiddens": [32, 32]},
                                  **device_settings(cpu_check)}) as algo:
                result = train(algo, 2)
            if not result["info"]["learner"].get("default_policy", {}).get("num_grad_updates"):
                raise CaseFailed(f"{run}: no gradient step on the data in {tmp}")


def evaluation(cpu_check: bool) -> None:
    run_algorithm("PPO", cpu_check, evaluation_interval=1, evaluation_num_env_runners=1,
                  evaluation_duration=2)


def cuda_unit_tests(cpu_check: bool) -> None:
    """The unit tests that need CUDA (skipped in CI): moving batches to the device from
    pinned memory, the device check beside a real GPU."""
    files = ["tests/unit/test_data_parallel_devices.py", "tests/unit/test_rl_batch.py",
             "tests/unit/test_device_check.py"]
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *files],
                          capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        raise CaseFailed(f"pytest {' '.join(files)}: {_last_line(done.stdout)}")


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""


def _algorithm_case(run: str) -> Callable[[bool], None]:
    return lambda cpu_check: run_algorithm(run, cpu_check)


CASES: dict[str, Callable[[bool], Any]] = {
    **{run: _algorithm_case(run) for run in ALGORITHMS if run not in OFFLINE},
    "offline BC+MARWIL": offline,
    "PPO 2 learners x 0.5 GPU": data_parallel_shared,
    "IMPALA 2 learners x 0.5 GPU": impala_data_parallel_shared,
    "PPO 2 learners NCCL": nccl,
    "LSTM PPO+IMPALA": lstm,
    "conv 84x84x4 PPO": conv,
    "Atari vector env + central inference": atari_central,
    "multi-agent PPO": multi_agent,
    "checkpoint GPU -> CPU": checkpoint_gpu_to_cpu,
    "checkpoint CPU -> GPU": checkpoint_cpu_to_gpu,
    "export_model": export,
    "evaluation runners": evaluation,
    "CUDA unit tests": cuda_unit_tests,
}
