"""Seed 000 with Tune: a trainable ``train(config, reporter)`` that builds a trainer; the
callbacks dict of ``tune.function``s measuring pole angles (custom metric and histogram);
the curriculum example both ways (between train() calls in a Tune function, and from
on_train_result), each phase reaching every env of every runner through the user's
wrapper; failing trials raise TuneError and make the CLI exit non-zero."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest

from rlmesh import tune
from rlmesh.agents.ppo import PPOTrainer
from rlmesh.tune.trial import read_results
from tests.integration.seed_000_envs import (CurriculumEnv, on_episode_end, on_episode_start,
                                               on_episode_step, on_train_result,
                                               set_phase_on_train_result)

SMALL = {"num_gpus": 0, "num_workers": 1, "num_envs_per_env_runner": 2,
         "rollout_fragment_length": 50, "train_batch_size": 100, "model": {"fcnet_hiddens": [16]}}
PPO_SMALL = {**SMALL, "sgd_minibatch_size": 50, "num_sgd_iter": 1}
QUIET = {"verbose": 0, "print_every_s": 1000}


# --- a trainer inside a Tune function, reporting each result (approach 1 of the curriculum)

SEEN: dict[int, list] = {}  # iteration -> what every worker's envs hold after the phase was set


def curriculum_train(config, reporter):
    trainer = PPOTrainer(config=config, env=CurriculumEnv)
    while True:  # the sweep ends it: reporter raises when the stop criterion is met
        result = trainer.train()
        phase = result["training_iteration"]  # a phase that changes every iteration
        trainer.workers.foreach_worker(
            lambda ev: ev.foreach_env(lambda env: env.set_phase(phase)))
        SEEN[phase] = trainer.workers.foreach_worker(
            lambda ev: ev.foreach_env(lambda env: env.phases()))
        reporter(**result)


def test_a_trainer_in_a_tune_function_sets_the_phase_of_every_env(tmp_path, no_children_left):
    SEEN.clear()
    analysis = tune.run(
        curriculum_train, config=dict(PPO_SMALL), stop={"training_iteration": 2},
        resources_per_trial={"cpu": 1, "gpu": lambda spec: spec.config.num_gpus,
                             "extra_cpu": lambda spec: spec.config.num_workers},
        storage_path=str(tmp_path), name="approach1", **QUIET)
    [trial] = analysis.trials
    assert trial.status == "TERMINATED" and trial.iteration == 2, trial.error
    assert trial.last_result["episode_reward_mean"] > 0  # the trainer's own result
    assert sorted(SEEN) == [1, 2]
    for phase, workers in SEEN.items():  # the driver steps no env; the runner's two envs
        assert workers == [[], [[phase, phase], [phase, phase]]], (phase, workers)
    # the trainer the function never stopped was stopped with the trial (no_children_left)


def test_resources_per_trial_in_tunes_spelling_are_placed(tmp_path, capsys):
    analysis = tune.run(lambda config, reporter: reporter(score=1), config={"num_workers": 1},
                        resources_per_trial={"cpu": 1, "extra_cpu": lambda s: s.config.num_workers},
                        stop={"training_iteration": 1}, storage_path=str(tmp_path),
                        name="res", verbose=1, print_every_s=1000)
    assert analysis.trials[0].status == "TERMINATED"
    assert "(CPU 2)" in capsys.readouterr().out
    with pytest.raises(tune.TuneError, match="unknown key 'cpus'; write cpu"):
        tune.run(lambda config, reporter: reporter(score=1), config={},
                 resources_per_trial={"cpus": 1}, storage_path=str(tmp_path), name="bad", **QUIET)


# --- the callbacks dict of the "Callbacks and Custom Metrics" section

def test_callbacks_dict_records_pole_angles_as_metric_and_histogram(tmp_path, no_children_left):
    analysis = tune.run(
        "PG",
        config={**SMALL, "env": "CartPole-v1", "callbacks": {
            "on_episode_start": tune.function(on_episode_start),
            "on_episode_step": tune.function(on_episode_step),
            "on_episode_end": tune.function(on_episode_end),
            "on_train_result": tune.function(on_train_result)}},
        stop={"training_iteration": 1}, storage_path=str(tmp_path), name="callbacks", **QUIET)
    [trial] = analysis.trials
    [result] = read_results(trial.dir)
    assert result["trainer_name"] == "PG"
    assert result["episodes_seen_by_callback"] == result["episodes_this_iter"] > 0
    # CartPole ends an episode once the pole leans past 12 degrees (0.2095 rad)
    assert 0 < result["custom_metrics"]["pole_angle_mean"] < 0.21
    angles = result["hist_stats"]["pole_angles"]
    assert len(angles) == sum(result["hist_stats"]["episode_lengths"])
    # each episode's angles, in the window's order: the pole stays within 0.2095 rad until
    # the step that ends the episode (its observation may lean further)
    start = 0
    for length in result["hist_stats"]["episode_lengths"]:
        episode = angles[start:start + length]
        start += length
        assert all(0 <= a <= 0.2095 for a in episode[:-1]) and 0 <= episode[-1] < 1.0, episode


# --- approach 2 of the curriculum: the phase set from on_train_result

def test_on_train_result_sets_the_phase_of_every_env(tmp_path, no_children_left):
    analysis = tune.run(
        "PPO", config={**PPO_SMALL, "env": CurriculumEnv,
                       "callbacks": {"on_train_result": tune.function(set_phase_on_train_result)}},
        stop={"training_iteration": 2}, storage_path=str(tmp_path), name="approach2", **QUIET)
    [trial] = analysis.trials
    results = read_results(trial.dir)
    assert [r["phases"] for r in results] == [[[], [[p, p], [p, p]]] for p in (1, 2)]
    params = (trial.dir + "/params.json")
    assert "tests.integration.seed_000_envs:CurriculumEnv" in open(params).read()


# --- failures

def fails(config, reporter):
    raise RuntimeError(f"trial {config['x']} cannot go on")


def test_failing_trials_raise_tune_error(tmp_path):
    with pytest.raises(tune.TuneError) as err:
        tune.run(fails, config={"x": tune.grid_search([1, 2])}, storage_path=str(tmp_path),
                 name="fail", **QUIET)
    text = str(err.value)
    assert "2 of 2 trials did not complete" in text and "\n" not in text
    assert "RuntimeError: trial 1 cannot go on" in text and len(err.value.trials) == 2
    analysis = tune.run(fails, config={"x": 3}, storage_path=str(tmp_path), name="kept",
                        raise_on_failed_trial=False, **QUIET)
    assert [t.status for t in analysis.trials] == ["ERROR"]


def test_cli_sweep_with_failing_trials_exits_non_zero(tmp_path):
    spec = tmp_path / "sweep.yaml"
    spec.write_text(textwrap.dedent(f"""\
        doomed:
          run: PPO
          env: CartPole-v1
          local_dir: {tmp_path}
          stop: {{training_iteration: 1}}
          config:
            num_env_runners: 1
            gamma: {{grid_search: [2.0, 3.0]}}
        """))
    proc = subprocess.run([sys.executable, "-m", "rlmesh", "train", "-f", str(spec)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "2 of 2 trials did not complete" in proc.stderr, proc.stderr[-2000:]
