"""Custom policies as a user writes them (examples/custom_policy.py, policy_template.py,
a3c_style_ppo.py): plugged in by import path, their columns arriving in learn_on_batch on a
learner in its own process, weights travelling both ways, runners and envs reached with
module-level functions, and a trained policy exported and run with plain torch."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from examples.custom_policy import RandomAlgo
from rlmesh.algorithms import PPOConfig

REPO = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.timeout(120),
              pytest.mark.filterwarnings("ignore:`torch.jit.load` is deprecated")]


def learner_stats(result: dict) -> dict:
    return result["info"]["learner"]["default_policy"]


def rlmesh_train(local_dir: Path, *args: str) -> list[dict]:
    """``rlmesh train ARGS`` from the repository root, as docs/policies.md and the README
    give the commands; the results it wrote."""
    run = subprocess.run(
        [sys.executable, "-m", "rlmesh.cli.main", "train", *args, "--local-dir", str(local_dir)],
        capture_output=True, text=True, timeout=120, cwd=REPO)
    assert run.returncode == 0, run.stdout + run.stderr
    (result_file,) = local_dir.glob("*/*/result.json")
    return [json.loads(line) for line in result_file.read_text().splitlines()]


def test_random_algo_trains_from_the_command_line_by_import_path(tmp_path):
    results = rlmesh_train(tmp_path, "--run", "examples.custom_policy:RandomAlgo",
                           "--env", "CartPole-v1", "--stop", '{"training_iteration": 3}')
    assert [r["training_iteration"] for r in results] == [1, 2, 3]
    # The learner's statistics are those MyPolicy.learn_on_batch returned.
    assert [learner_stats(r)["num_updates"] for r in results] == [1.0, 2.0, 3.0]
    assert learner_stats(results[-1])["num_samples"] >= 400


@pytest.mark.parametrize("run, stop", [
    ("examples.policy_template:MyAlgo2", '{"timesteps_total": 40000}'),
    ("examples.a3c_style_ppo:A3CStylePPO", '{"episode_reward_mean": 150}'),
])
def test_the_documented_commands_learn(tmp_path, run, stop):
    results = rlmesh_train(tmp_path, "--run", run, "--env", "CartPole-v1", "--stop", stop,
                           "--seed", "0")
    assert results[-1]["episode_reward_mean"] > 100, [r["episode_reward_mean"] for r in results]
    assert results[-1]["timesteps_total"] <= 60_000


@pytest.mark.parametrize("batch_mode", ["truncate_episodes", "complete_episodes"])
def test_recurrent_state_columns_arrive_chained_and_reset(batch_mode):
    # CountEnv: obs[0] counts the steps of the episode, so the step-counting state must
    # equal it; episodes of 7 steps, cut by fragments of 5 (truncate_episodes).
    config = {"env": "tests.integration.envs_for_tests:make_count_env",
              "env_config": {"terminate_at": 7}, "num_learners": 1,
              "policy_class": "tests.integration.policies_for_tests:EpisodeStepRNNPolicy",
              "rollout_fragment_length": 5, "train_batch_size": 40, "batch_mode": batch_mode}
    with RandomAlgo(config) as algo:
        for _ in range(3):
            stats = learner_stats(algo.train())
            assert stats["state_rows"] == stats["num_samples"] > 0
            assert stats["state_chain_breaks"] == 0
            assert stats["state_differs_from_t"] == 0
            assert stats["state_differs_from_episode_step"] == 0


def test_extra_outputs_arrive_and_weights_reach_the_runners_both_ways():
    config = (PPOConfig().environment("CartPole-v1")
              .env_runners(num_env_runners=2, num_envs_per_env_runner=2)
              .training(train_batch_size=400)
              .learners(num_learners=1)
              .rl_module(policy_class="examples.custom_policy:MyExtraOutputsPolicy"))
    with config.build() as algo:
        for iteration in range(3):
            stats = learner_stats(algo.train())
            assert stats["some_value_rows"] == stats["num_samples"] >= 400
            # Every step was taken with the weights the learner published last.
            assert stats["acted_with_newest_weights"] == 1.0
            assert stats["some_value_mean"] == iteration
        # Weights set from the driver go to the learner, then to every runner.
        algo.set_weights({"default_policy": {"num_updates": np.array([100.0], np.float32)}})
        stats = learner_stats(algo.train())
        assert stats["some_value_mean"] == 100.0 and stats["num_updates"] == 101.0
        seen = algo.env_runners.foreach_env_runner(
            "tests.integration.policies_for_tests:runner_weights")
        assert seen == [{"worker_index": 1, "num_updates": [100.0]},
                        {"worker_index": 2, "num_updates": [100.0]}]


def test_a_runner_whose_push_waits_behind_the_last_one_acts_with_the_newest_weights():
    """One push in flight per runner: a runner that has not answered the last push is
    sent the next one only after it has, so the sample call can reach it first. The call
    names the version published last, and the runner asks for it (CI once saw half a
    batch act with the weights from before ``set_weights``)."""
    config = (PPOConfig().environment("CartPole-v1")
              .env_runners(num_env_runners=2, num_envs_per_env_runner=2)
              .training(train_batch_size=400)
              .rl_module(policy_class="examples.custom_policy:MyExtraOutputsPolicy"))
    with config.build() as algo:
        algo.train()
        server = algo.mesh.job.local_actor(algo.mesh.param_server[0].name)
        first = sorted(server._subscribers)[0]
        server._subscribers[first].busy = True  # as if its last push were unanswered
        algo.set_weights({"default_policy": {"num_updates": np.array([100.0], np.float32)}})
        stats = learner_stats(algo.train())
        assert stats["some_value_mean"] == 100.0 and stats["acted_with_newest_weights"] == 1.0
        server._subscribers[first].busy = False


def test_foreach_env_runner_and_foreach_env_take_module_level_functions():
    from tests.integration.policies_for_tests import env_id, runner_weights

    config = {"env": "CartPole-v1", "num_env_runners": 2, "num_envs_per_env_runner": 3}
    with RandomAlgo(config) as algo:
        assert [w["worker_index"] for w in algo.env_runners.foreach_env_runner(runner_weights)] == [1, 2]
        assert algo.env_runners.foreach_env(env_id, "!") == ["CartPole-v1!"] * 6
        # lambdas reach this machine's runners too (the spawn channel, docs/security.md)
        assert algo.env_runners.foreach_env_runner(lambda runner: runner.worker_index) == [1, 2]


def test_get_policy_acts_and_exports_torchscript_that_plain_torch_runs(tmp_path):
    config = (PPOConfig().environment("CartPole-v1")
              .env_runners(num_env_runners=1, num_envs_per_env_runner=2)
              .training(train_batch_size=200, minibatch_size=100, num_epochs=2)
              .learners(num_learners=1).debugging(seed=3))
    obs = np.random.default_rng(0).normal(size=(16, 4)).astype(np.float32)
    with config.build() as algo:
        algo.train()
        policy = algo.get_policy()
        # The driver's copy holds the weights the learner (another process) published.
        for name, value in algo.get_weights()["default_policy"].items():
            np.testing.assert_array_equal(policy.get_weights()[name], value)
        actions, states, extra = policy.compute_actions(obs, explore=False)
        path = policy.export_model(str(tmp_path / "exported"))
        with torch.no_grad():
            expected_inputs, expected_values = policy.model(torch.from_numpy(obs))
    assert states == [] and extra["action_dist_inputs"].shape == (16, 2)
    model = torch.jit.load(path)  # plain torch, no rlmesh class involved
    with torch.no_grad():
        dist_inputs, values = model(torch.from_numpy(obs))
    torch.testing.assert_close(dist_inputs, expected_inputs)
    torch.testing.assert_close(values, expected_values)
    np.testing.assert_array_equal(dist_inputs.argmax(-1).numpy(), actions)


def test_weights_sent_to_chosen_runners_only_reach_those():
    from tests.integration.policies_for_tests import runner_weights

    config = {"env": "CartPole-v1", "num_env_runners": 2, "num_envs_per_env_runner": 1}
    with RandomAlgo(config) as algo:
        algo.learner_group.set_weights(
            {"default_policy": {"num_updates": np.array([7.0], np.float32)}})
        algo.env_runners.sync_weights(to_worker_indices=[2])
        seen = algo.env_runners.foreach_env_runner(runner_weights)
        assert [w["num_updates"] for w in seen] == [[0.0], [7.0]]
        # The param server still holds the old weights: a fragment leaves runner 1 as it was.
        algo.env_runners.foreach_env_runner("sample")
        assert [w["num_updates"] for w in algo.env_runners.foreach_env_runner(runner_weights)] \
            == [[0.0], [7.0]]


def test_policy_template_learns_with_returns_and_not_without():
    from examples.policy_template import MyAlgo, MyAlgo2, train

    # Measured over seeds 0-5 (docs/policies.md): at 40k steps the bare loss ends at
    # 9-60 mean reward, the one on returns at 108-278.
    bare, with_returns = train(MyAlgo, 40_000, seed=1), train(MyAlgo2, 40_000, seed=1)
    assert with_returns[-1] > 60, with_returns
    assert bare[-1] < with_returns[-1] / 2, (bare, with_returns)


def test_a3c_style_training_step_applies_runner_gradients_as_they_arrive():
    from examples.a3c_style_ppo import A3CStylePPO, A3CStylePPOConfig

    # 2 runners x 4 envs x 50 steps, 2000 env steps per iteration (the example's defaults).
    config = A3CStylePPOConfig().environment("CartPole-v1").debugging(seed=1)
    with config.build() as algo:
        assert type(algo) is A3CStylePPO
        curve = [algo.train()["episode_reward_mean"] for _ in range(6)]
        runners = algo.env_runners.foreach_env_runner("metrics")
        applied = algo.learner_group.local.num_updates
    # Measured over seeds 0-4: 85-94 after 6 iterations (12k env steps), from 22-26.
    assert curve[-1] > 60, curve
    fragments = [r["num_fragments"] for r in runners]
    assert min(fragments) > 5, fragments  # both runners computed gradients, many times
    # Every gradient but those still in flight (one per runner at most) was applied ...
    assert sum(fragments) - len(fragments) <= applied <= sum(fragments)
    # ... and each runner got weights back once per gradient of its own, besides those it
    # took from the param server: the first ones and one publication per iteration.
    for r in runners:
        assert r["num_fragments"] <= r["num_weight_updates"] <= r["num_fragments"] + 1 + 6, r
