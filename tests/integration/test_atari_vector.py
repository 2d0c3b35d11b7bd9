"""Atari end to end on ale-py's C++ vector env, in real runner processes: PPO trains with
runner-side and with central inference, frames stay uint8 to the learner, an inference
actor killed with SIGKILL or hung comes back while the runners wait, and bad settings are
refused in one line at build."""

from __future__ import annotations

import os
import signal
import time

import numpy as np
import pytest

pytest.importorskip("ale_py.vector_env", reason="ale-py >= 0.10 (rlmesh[envs]) has the vector env")

from rlmesh.algorithms.ppo import PPOConfig  # noqa: E402


def pong(inference: str, runners: int = 2) -> PPOConfig:
    return (PPOConfig().environment("ALE/Pong-v5", env_config={"atari": {"vector": True}},
                                    clip_rewards=True)
            .env_runners(num_env_runners=runners, num_envs_per_env_runner=4,
                         rollout_fragment_length=16, inference_mode=inference)
            .training(train_batch_size=128, minibatch_size=64, num_epochs=1)
            .debugging(seed=0))


def test_ppo_trains_on_the_vector_env_with_runner_inference():
    with pong("runner").build() as algo:
        results = [algo.train() for _ in range(2)]
        assert results[-1]["timesteps_total"] >= 256
        assert results[-1]["info"]["inference"]["mode"] == "runner"
        fragment = algo.mesh.runners.sample(64)[0]
        assert fragment["obs"].dtype == np.uint8 and fragment["obs"].shape[2:] == (84, 84, 4)
        metrics = algo.env_runners.foreach_env_runner("metrics")
        assert all(m["num_env_steps_sampled"] > 0 for m in metrics)
        # runner inference: one vector env of 4 ("auto" double-buffers central inference only)
        sizes = algo.env_runners.foreach_env_runner("apply", "tests.integration.test_atari_vector:groups")
        assert sizes == [[4], [4]]
        assert np.isfinite(results[-1]["info"]["learner"]["default_policy"]["total_loss"])


def groups(runner) -> list[int]:
    """The sizes of a runner's vector-env groups (foreach_env_runner's function)."""
    return list(runner.sampler.sizes)


def inference_pid(algo, old_pid: int | None = None) -> int:
    """The inference actor's pid, once it answers (and is not ``old_pid``)."""
    deadline = time.monotonic() + 30
    while True:
        try:
            pid = algo.mesh.run(algo.mesh.handle("inference").call("pid", timeout=5))
            if pid != old_pid:
                return pid
        except Exception:
            pass
        assert time.monotonic() < deadline, "the inference actor never came back"
        time.sleep(0.2)


def test_central_inference_survives_sigkill_and_a_hang_of_its_actor():
    with pong("central").build() as algo:
        algo.train()
        before = algo.mesh.run(algo.mesh.handle("inference").call("metrics"))
        sizes = algo.env_runners.foreach_env_runner("apply", "tests.integration.test_atari_vector:groups")
        assert sizes == [[2, 2], [2, 2]]  # double buffered: two halves of 2 envs each
        assert before["num_obs"] > 0 and before["device"] == "cpu"
        pid = inference_pid(algo)
        os.kill(pid, signal.SIGKILL)
        steps = algo.train()["timesteps_total"]  # waits for the restarted actor
        after = algo.train()
        assert after["timesteps_total"] > steps
        restarted = inference_pid(algo, old_pid=pid)
        # A new process counts from zero: what it served came from runners that reached it.
        metrics = algo.mesh.run(algo.mesh.handle("inference").call("metrics"))
        assert metrics["policy_version"] >= 1 and metrics["num_obs"] > 0
        # Whether a runner's request was in flight at the SIGKILL is chance (one sent while
        # the actor is down waits in the socket for the new one). A stopped actor takes
        # requests and never answers: the supervisor kills it after missed heartbeats, and
        # the runners, whose requests time out, send them again to the next one.
        os.kill(restarted, signal.SIGSTOP)
        steps = algo.train()["timesteps_total"]
        assert algo.train()["timesteps_total"] > steps
        assert inference_pid(algo, old_pid=restarted) not in (pid, restarted)
        retries = [m.get("num_inference_retries", 0)
                   for m in algo.env_runners.foreach_env_runner("metrics")]
        assert sum(retries) >= 1  # the runners waited for it


def test_bad_atari_settings_are_one_line_at_build():
    bad_obs = pong("runner", runners=1).environment(
        "ALE/Pong-v5", env_config={"atari": {"vector": True}, "obs_type": "ram"})
    with pytest.raises(Exception, match="obs_type='ram'") as info:
        bad_obs.build()
    assert "\n" not in str(info.value).strip()
    not_ale = pong("runner", runners=1).environment(
        "CartPole-v1", env_config={"atari": {"vector": True}})
    with pytest.raises(Exception, match="not an ALE id"):
        not_ale.build()
    gym_ram = (PPOConfig().environment("ALE/Pong-v5", env_config={"atari": True,
                                                                  "obs_type": "ram"})
               .env_runners(num_env_runners=0))
    with pytest.raises(Exception, match="obs_type='ram'"):
        gym_ram.build()
