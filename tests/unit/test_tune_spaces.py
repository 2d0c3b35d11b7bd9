"""Search spaces, their expansion into trial configs, PBT's explore and exploit choice, the
state file and several experiments in one file: the sweep's decisions without processes."""

from __future__ import annotations

import random

import pytest

from rlmesh import tune
from rlmesh.tune import spaces
from rlmesh.tune.pbt import PopulationBasedTraining
from rlmesh.tune.trial import Trial, read_state, write_state


def double_lr(spec):
    return spec.config["lr"] * 2


def test_grid_from_a_file_and_python_expand_in_order():
    config = {"lr": {"grid_search": [1, 2]}, "model": {"fcnet_hiddens": tune.grid_search([[8], [16]])},
              "gamma": 0.9}
    variants = spaces.grid_variants(config)
    assert [v["lr"] for v, _ in variants] == [1, 1, 2, 2]
    assert [v["model"]["fcnet_hiddens"] for v, _ in variants] == [[8], [16], [8], [16]]
    assert variants[1][1] == {"lr": 1, "model/fcnet_hiddens": [16]}
    assert all(v["gamma"] == 0.9 for v, _ in variants)
    assert config["lr"] == {"grid_search": [1, 2]}  # the space itself is left as it was


def test_random_spaces_draw_within_their_bounds():
    config = {"a": {"uniform": [0, 1]}, "b": {"loguniform": [1e-5, 1e-2]},
              "c": {"quniform": [0, 10, 2.5]}, "d": {"randint": [3, 5]},
              "e": {"choice": [[1], [2]]}, "f": {"sample_from": f"{__name__}:double_lr"},
              "lr": tune.uniform(1, 2)}
    rng = random.Random(0)
    for _ in range(200):
        drawn, params = spaces.resolve(spaces.grid_variants(config)[0][0], rng)
        assert 0 <= drawn["a"] <= 1 and 1e-5 <= drawn["b"] <= 1e-2
        assert drawn["c"] in (0, 2.5, 5, 7.5, 10) and drawn["d"] in (3, 4)
        assert drawn["e"] in ([1], [2]) and drawn["f"] == drawn["lr"] * 2
        assert set(params) == {"a", "b", "c", "d", "e", "f", "lr"}


@pytest.mark.parametrize("value, words", [
    ({"uniform": [1]}, "uniform takes 2 numbers"),
    ({"loguniform": [0, 1]}, "lower > 0"),
    ({"grid_search": []}, "non-empty list"),
    ({"sample_from": "no_colon"}, "pkg.module:function"),
])
def test_bad_spaces_say_which_key_and_what_is_expected(value, words):
    with pytest.raises(spaces.SpaceError, match=words) as e:
        spaces.find_domains({"model": {"x": value}})
    assert str(e.value).startswith("model/x:")


def test_optuna_suggests_each_kind():
    optuna = pytest.importorskip("optuna")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    config = {"a": tune.uniform(0, 1), "b": tune.loguniform(1e-4, 1e-1), "c": tune.randint(1, 3),
              "d": tune.choice([[4], [8]]), "e": tune.quniform(0, 1, 0.5)}
    drawn, _ = spaces.resolve(dict(config), random.Random(0), study.ask())
    assert 0 <= drawn["a"] <= 1 and drawn["c"] in (1, 2) and drawn["d"] in ([4], [8])
    assert drawn["e"] in (0.0, 0.5, 1.0)


def _trial(i, score, checkpoint=True):
    t = Trial(trial_id=f"t{i}", experiment="e", run="f", config={"lr": 0.01 * (i + 1), "n": 4},
              stop={}, dir=f"/tmp/t{i}", iteration=4)
    t.last_result = {"score": score}
    if checkpoint:
        t.checkpoints = [[4, f"/tmp/t{i}/checkpoint_000004"]]
    return t


def test_pbt_exploits_only_from_the_bottom_quantile_and_explores():
    pbt = PopulationBasedTraining(metric="score", perturbation_interval=2, seed=0,
                                  hyperparam_mutations={"lr": tune.uniform(0.001, 1), "n": [2, 4, 8]})
    trials = [_trial(i, score) for i, score in enumerate([1.0, 5.0, 3.0, 9.0])]
    worst, best = trials[0], trials[3]
    verdict = pbt.decide(worst, trials)
    assert verdict["exploit"] == best.trial_id
    assert verdict["config"]["lr"] != best.config["lr"] and verdict["config"]["n"] in (2, 4, 8)
    assert pbt.decide(best, trials) == {"save": True}
    worst.iteration = 3  # between perturbation points: nothing
    assert pbt.decide(worst, trials) == {}


def test_state_file_round_trip(tmp_path):
    trials = [_trial(0, 1.5), _trial(1, float("nan"), checkpoint=False)]
    write_state(tmp_path, trials, {"metric": "score"})
    back, meta = read_state(tmp_path)
    assert meta["metric"] == "score"
    assert back[0].last_checkpoint == "/tmp/t0/checkpoint_000004" and back[0].metric("score") == 1.5
    assert back[1].last_checkpoint is None and back[1].metric("score") is None


def test_several_experiments_in_one_file(tmp_path):
    from rlmesh.tuned_examples import load_experiment, load_experiments, ExperimentFileError

    path = tmp_path / "two.yaml"
    path.write_text("a:\n  run: PPO\n  env: CartPole-v1\n  num_samples: 2\n"
                    "b:\n  run: PPO\n  env: Pendulum-v1\n")
    experiments, _ = load_experiments(str(path))
    assert [(n, e["env"]) for n, e in experiments] == [("a", "CartPole-v1"), ("b", "Pendulum-v1")]
    with pytest.raises(ExperimentFileError, match="holds 2 experiments"):
        load_experiment(str(path))


def test_resumed_optuna_search_is_told_the_finished_trials():
    pytest.importorskip("optuna")
    from rlmesh.tune.search import Search

    space = {"x": tune.uniform(0, 1), "m": tune.choice([[1], [2]]), "k": tune.randint(1, 4)}
    first = Search(space, 3, "tpe", metric="score", seed=0)
    finished = []
    for i in range(3):
        config, params, _ = first.config(i)
        t = _trial(i, config["x"])
        t.params, t.status = params, "TERMINATED"
        finished.append(t)
    again = Search(space, 5, "tpe", metric="score", seed=0)
    again.replay(finished)
    told = again.study.trials
    assert [tr.value for tr in told] == [t.metric("score") for t in finished]
    assert [tr.params["m"] for tr in told] == [[[1], [2]].index(t.params["m"]) for t in finished]


def test_an_algorithm_config_with_spaces_in_it_is_swept():
    from rlmesh.algorithms.ppo import PPOConfig
    from rlmesh.tune.api import _config_and_stop

    cfg = PPOConfig().environment("CartPole-v1").training(
        lr=tune.grid_search([1e-3, 1e-4]), model={"fcnet_hiddens": tune.choice([[8], [16]])})
    config, stop = _config_and_stop("PPO", None, cfg, None)
    variants = spaces.grid_variants(config)
    assert [v["lr"] for v, _ in variants] == [1e-3, 1e-4]
    drawn, _ = spaces.resolve(variants[0][0], random.Random(0))
    assert drawn["model"]["fcnet_hiddens"] in ([8], [16]) and drawn["env"] == "CartPole-v1"
    PPOConfig.from_dict(drawn).validate()  # a trial's config is a valid config
    assert stop == {"training_iteration": 100}


def test_trial_table_lists_running_first_and_limits_rows():
    import io

    from rlmesh.tune.table import MAX_ROWS, TrialTable

    trials = [_trial(i, float(i)) for i in range(30)]
    for t in trials:
        t.status = "TERMINATED"
    trials[0].status = "RUNNING"
    out = io.StringIO()
    TrialTable("score", stream=out, tty=False).show(trials, "local CPU 1/2 in use", force=True)
    lines = out.getvalue().splitlines()
    assert lines[0] == "== sweep: 30 trials: 1 RUNNING | 29 TERMINATED; local CPU 1/2 in use"
    assert lines[2].startswith("t0 ") and "RUNNING" in lines[2]
    assert lines[3].startswith("t29 ")  # then the best finished
    assert len(lines) == 2 + MAX_ROWS + 1 and lines[-1] == "... and 10 more"
