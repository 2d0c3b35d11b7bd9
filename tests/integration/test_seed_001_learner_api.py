"""Seed 001 (RLlib's Learner API, pull request 41235) as an RLlib user writes it against
``algo.learner_group``: ``update_from_batch`` with a single-agent batch, ``update_from_episodes``
with ``episodes=``, ``async_update``, ``minibatch_size`` / ``num_iters`` per call, a ``Learner``
subclass named by ``learner_class`` (and ``_learner_class``) whose hooks run where the learner
runs, the soft-deprecated ``update``; and the bad inputs, each refused in one line. Run with the
learner in the driver and in a process of its own; examples/custom_learner_loss.py trains."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from rlmesh.algorithms.ppo import PPOConfig
from rlmesh.core.learner import Learner
from rlmesh.driver.env_runner_group import synchronous_parallel_sample
from rlmesh.rl.columns import SampleBatch, merge_fragments, trajectories

HOOK_LOG = "RLMESH_TEST_LEARNER_HOOK_LOG"
ROOT = Path(__file__).resolve().parents[2]
STEPS = 200


class HookLearner(Learner):
    """Each hook writes its name and process id to the file HOOK_LOG names, then does what
    rlmesh's own does; the loss adds a small L2 term and reports it."""

    def _log(self, hook: str) -> None:
        with open(os.environ[HOOK_LOG], "a") as f:
            f.write(f"{hook} {os.getpid()}\n")

    def build(self):
        self._log("build")

    def compute_loss_for_module(self, *, module_id, config, batch, fwd_out):
        self._log("compute_loss_for_module")
        loss = super().compute_loss_for_module(module_id=module_id, config=config, batch=batch,
                                               fwd_out=fwd_out)
        l2 = sum((p ** 2).sum() for p in self.module[module_id].parameters())
        assert fwd_out["vf_preds"].shape == batch["value_targets"].shape
        return loss + 1e-6 * l2, {"l2": l2.detach()}

    def compute_gradients(self, loss_per_module, **kwargs):
        self._log("compute_gradients")
        return super().compute_gradients(loss_per_module, **kwargs)

    def apply_gradients(self, gradients, timesteps=None):
        self._log("apply_gradients")
        return super().apply_gradients(gradients, timesteps)

    def _preprocess_train_data(self, *, batch, episodes):
        self._log("_preprocess_train_data")
        return batch, episodes

    def _postprocess_episodes(self, episodes):
        self._log("_postprocess_episodes")
        return episodes


class NotALearner:
    pass


def ppo(num_learners: int, **training) -> PPOConfig:
    return (PPOConfig().environment("CartPole-v1")
            .env_runners(num_env_runners=1, num_envs_per_env_runner=2)
            .training(train_batch_size=STEPS, minibatch_size=50, num_epochs=2,
                      model={"fcnet_hiddens": [16]}, **training)
            .learners(num_learners=num_learners).debugging(seed=0))


@pytest.fixture(scope="module", params=[0, 1], ids=["learner_in_driver", "learner_process"])
def algo(request, tmp_path_factory):
    """PPO with HookLearner (by RLlib's old key ``_learner_class``), the learner in the driver
    or in a process of its own; and a first sample of fragments."""
    log = tmp_path_factory.mktemp("hooks") / "hooks.log"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(HOOK_LOG, str(log))
        with ppo(request.param, _learner_class=HookLearner).build() as algo:
            algo.hook_log = log
            algo.fragments = synchronous_parallel_sample(algo.env_runners, max_env_steps=STEPS)
            yield algo


def steps_of(fragments) -> int:
    return sum(int(f["env_steps"]) for f in fragments)


def test_update_from_batch_takes_one_policys_columns(algo):
    batch = merge_fragments(algo.fragments)  # one policy's time-major columns, no policy ids
    stats = algo.learner_group.update_from_batch(batch, minibatch_size=100, num_iters=3)
    steps = steps_of(algo.fragments)
    assert sorted(stats) == ["default_policy"]
    # minibatch_size and num_iters of this call, not the config's 50 and 2
    assert stats["default_policy"]["num_grad_updates"] == 3 * math.ceil(steps / 100)
    assert stats["default_policy"]["num_env_steps_trained"] == steps
    assert stats["default_policy"]["l2"] > 0  # the subclass's statistic came back


def test_update_from_batch_takes_flat_samples(algo):
    flat = SampleBatch.concat_samples(trajectories(merge_fragments(algo.fragments)))
    stats = algo.learner_group.update_from_batch(batch=flat, num_iters=1)
    assert stats["default_policy"]["num_env_steps_trained"] == len(flat["rewards"])


def test_update_from_episodes_by_keyword_and_position(algo):
    group, steps = algo.learner_group, steps_of(algo.fragments)
    by_keyword = group.update_from_episodes(episodes=algo.fragments)
    assert by_keyword["default_policy"]["num_grad_updates"] == 2 * math.ceil(steps / 50)
    by_position = group.update_from_episodes(algo.fragments, num_iters=1, minibatch_size=STEPS * 2)
    assert by_position["default_policy"]["num_grad_updates"] == 1
    # Finished episodes as {column: per-step array} (the fragments cut at episode ends).
    episodes = [dict(t) for t in trajectories(merge_fragments(algo.fragments))]
    stats = group.update_from_episodes(episodes=episodes, num_iters=1)
    assert stats["default_policy"]["num_env_steps_trained"] == steps


def test_update_from_episodes_takes_single_agent_episodes(algo):
    """The pull request's own input: SingleAgentEpisode objects, here two CartPole episodes
    played with the run's policy (its action_logp and dist inputs as extra model outputs)."""
    import gymnasium as gym

    from rlmesh.env.single_agent_episode import SingleAgentEpisode

    policy, env, episodes = algo.get_policy(), gym.make("CartPole-v1"), []
    for seed in (0, 1):
        obs, info = env.reset(seed=seed)
        episode = SingleAgentEpisode()
        episode.add_env_reset(obs, info)
        done = False
        while not done:
            actions, _, extras = policy.compute_actions(obs[None])
            obs, reward, terminated, truncated, info = env.step(int(actions[0]))
            done = terminated or truncated
            episode.add_env_step(obs, int(actions[0]), reward, info, terminated=terminated,
                                 truncated=truncated,
                                 extra_model_outputs={k: v[0] for k, v in extras.items()})
        episodes.append(episode)
    stats = algo.learner_group.update_from_episodes(episodes=episodes, num_iters=1)
    assert stats["default_policy"]["num_env_steps_trained"] == sum(len(e) for e in episodes)


def test_async_update_hands_back_finished_updates_on_a_later_call(algo):
    group, batch = algo.learner_group, merge_fragments(algo.fragments)
    first = group.update_from_batch(batch, async_update=True, num_iters=1)
    assert isinstance(first, list)
    done, deadline = list(first), time.monotonic() + 30
    while len(done) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
        done += group.update_from_episodes(algo.fragments, async_update=True, num_iters=1)
    assert len(done) >= 2, done
    assert all(r["default_policy"]["num_env_steps_trained"] == steps_of(algo.fragments)
               for r in done)
    # A synchronous call waits for its own update, after those queued before it.
    assert "default_policy" in group.update_from_batch(batch, num_iters=1)


def test_the_learner_subclass_hooks_run_where_the_learner_runs(algo):
    algo.train()
    algo.learner_group.update_from_episodes(algo.fragments, num_iters=1)
    pids: dict[str, set[int]] = {}
    for line in algo.hook_log.read_text().splitlines():
        hook, pid = line.split()
        pids.setdefault(hook, set()).add(int(pid))
    assert sorted(pids) == ["_postprocess_episodes", "_preprocess_train_data",
                            "apply_gradients", "build", "compute_gradients",
                            "compute_loss_for_module"]
    where = {pid for seen in pids.values() for pid in seen}
    assert len(where) == 1, pids
    in_driver = algo.learner_group.local is not None
    assert (where == {os.getpid()}) == in_driver, (where, os.getpid())


def test_update_is_soft_deprecated_and_still_updates(algo):
    stats = algo.learner_group.update(merge_fragments(algo.fragments), num_epochs=1)
    assert stats["default_policy"]["num_env_steps_trained"] == steps_of(algo.fragments)


def one_line_error(call, error=ValueError) -> str:
    with pytest.raises(error) as info:
        call()
    message = str(info.value)
    assert "\n" not in message, message
    return message


def test_bad_input_is_refused_in_one_line(algo):
    group, batch = algo.learner_group, merge_fragments(algo.fragments)
    message = one_line_error(lambda: group.update_from_batch({"nope": batch}))
    assert "'nope'" in message and "['default_policy']" in message
    both = one_line_error(lambda: group.update(batch=batch, episodes=algo.fragments))
    assert "update_from_batch(batch)" in both and "update_from_episodes(episodes)" in both
    assert "not both" in one_line_error(lambda: group.update_from_batch(batch, episodes=[batch]))
    assert "pass a non-empty list" in one_line_error(
        lambda: group.update_from_episodes(episodes=batch), TypeError)


def test_a_learner_class_that_is_no_learner_is_refused_in_one_line():
    message = one_line_error(lambda: ppo(0, learner_class=NotALearner).build(), TypeError)
    assert "'NotALearner' is not a Learner" in message and "rlmesh.core.learner.Learner" in message


def test_the_custom_loss_example_trains_cartpole():
    """examples/custom_learner_loss.py as a user runs it: its Learner class crosses to the
    learner process from the script's file."""
    run = subprocess.run([sys.executable, "examples/custom_learner_loss.py", "--stop-reward",
                          "60", "--max-iterations", "25"], cwd=ROOT, capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    rewards = [float(line.split()[3]) for line in run.stdout.splitlines()
               if line.startswith("iter")]
    assert rewards[-1] >= 60 and rewards[-1] > rewards[0], rewards
    assert np.isfinite([float(line.split()[7]) for line in run.stdout.splitlines()
                        if line.startswith("iter")]).all()
