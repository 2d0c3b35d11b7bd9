"""`rlmesh train` and `rlmesh rollout` plumbing, with a fake algorithm in place of the
mesh: experiment files (YAML/TOML/JSON, flat and RLlib's nested form), flags over the
file, stop criteria, errors as one line with exit 2, checkpoints, Ctrl-C, the progress
table. No process is started."""

from __future__ import annotations

import io
import json
import os
import signal
import sys
import types
from pathlib import Path

import numpy as np
import pytest

from rlmesh import tuned_examples
from rlmesh.algorithms import PPOConfig
from rlmesh.driver.algorithm_registry import ALGORITHMS
from rlmesh.config.base import ConfigError
from rlmesh.cli import rollout, train
from rlmesh.cli.main import main as cli_main
from rlmesh.cli.progress import ProgressReporter

KNOWN = ", ".join(ALGORITHMS)  # as the unknown-algorithm error lists them

class FakeAlgo:
    """Stands in for Algorithm: each train() is one iteration of 1000 steps whose reward
    mean grows by 10; ``on_train`` runs inside train() (to send signals mid-iteration)."""

    on_train = None

    def __init__(self, config):
        self.config = config
        self.iteration = 0
        self.saved: list[str] = []
        self.stopped = False

    def train(self) -> dict:
        self.iteration += 1
        if FakeAlgo.on_train:
            FakeAlgo.on_train(self)
        return {
            "training_iteration": self.iteration, "timesteps_total": 1000 * self.iteration,
            "episode_reward_mean": 10.0 * self.iteration, "episode_reward_min": 0.0,
            "episode_reward_max": np.float32(20 * self.iteration), "episode_len_mean": 12.0,
            "episodes_this_iter": 3, "time_this_iter_s": 0.01, "time_total_s": 0.01 * self.iteration,
            "num_env_steps_sampled_throughput_per_sec": 1e5,
            "info": {"learner": {"default_policy": {"kl": 0.001 * self.iteration,
                                                    "policy_loss": -0.1}}},
            "custom_metrics": {},
        }

    def save(self, path):
        Path(path).mkdir(parents=True)
        (Path(path) / "state.txt").write_text(str(self.iteration))
        self.saved.append(path)
        return path

    def stop(self):
        self.stopped = True


@pytest.fixture
def built(monkeypatch):
    """The algorithms `rlmesh train` built in this test (fake ones, no processes)."""
    algos: list[FakeAlgo] = []

    def build(config):
        algos.append(FakeAlgo(config))
        return algos[-1]

    monkeypatch.setattr(train, "build_algorithm", build)
    monkeypatch.setattr(FakeAlgo, "on_train", None)
    return algos


def run_train(tmp_path, *argv) -> int:
    return cli_main(["train", "--local-dir", str(tmp_path / "results"), *argv])


def trial_dirs(tmp_path) -> list[Path]:
    return sorted(p for p in (tmp_path / "results").glob("*/*") if p.is_dir())


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


YAML_NESTED = """\
cartpole-test:
  run: PPO
  env: CartPole-v1
  stop:
    training_iteration: 3
  config:
    lr: 3e-4            # YAML 1.1 reads this as a string; rlmesh as a float
    num_workers: 4      # RLlib's old name
    lambda: 0.9
    model:
      fcnet_hiddens: [32, 32]
      fcnet_activation: relu
"""

TOML_NESTED = """\
[cartpole-test]
run = "PPO"
env = "CartPole-v1"
[cartpole-test.stop]
training_iteration = 3
[cartpole-test.config]
lr = 3e-4
num_workers = 4
lambda = 0.9
[cartpole-test.config.model]
fcnet_hiddens = [32, 32]
fcnet_activation = "relu"
"""

JSON_FLAT = json.dumps({
    "run": "PPO", "env": "CartPole-v1", "stop": {"training_iteration": 3},
    "config": {"lr": 3e-4, "num_workers": 4, "lambda": 0.9,
               "model": {"fcnet_hiddens": [32, 32], "fcnet_activation": "relu"}},
})


# --- experiment files ---

@pytest.mark.parametrize("name,text,experiment", [
    ("exp.yaml", YAML_NESTED, "cartpole-test"),
    ("exp.toml", TOML_NESTED, "cartpole-test"),
    ("exp.json", JSON_FLAT, None),
])
def test_file_formats_give_the_same_run(tmp_path, built, capsys, name, text, experiment):
    (tmp_path / name).write_text(text)
    assert run_train(tmp_path, "-f", str(tmp_path / name)) == 0
    config = built[0].config
    assert isinstance(config, PPOConfig)
    assert config.env == "CartPole-v1" and config.lr == 3e-4 and config.lambda_ == 0.9
    assert config.num_env_runners == 4
    assert config.model["fcnet_hiddens"] == [32, 32] and config.model["vf_share_layers"] is False
    assert built[0].iteration == 3 and built[0].stopped
    (trial,) = trial_dirs(tmp_path)
    if experiment:  # RLlib's nested form: the top-level key names the experiment
        assert trial.parent.name == experiment
    else:
        assert trial.parent.name.startswith("PPO_CartPole-v1_")
    assert json.loads((trial / "params.json").read_text())["lambda"] == 0.9
    assert len((trial / "result.json").read_text().splitlines()) == 3
    assert list(trial.glob("events.out.tfevents.*")) and (trial / "progress.csv").is_file()


def test_flags_override_the_file(tmp_path, built):
    (tmp_path / "exp.yaml").write_text(YAML_NESTED)
    code = run_train(tmp_path, "-f", str(tmp_path / "exp.yaml"), "--env", "Acrobot-v1",
                     "--num-env-runners", "1", "--seed", "7", "--log-level", "info",
                     "--config", '{"num_env_runners": 2, "model": {"fcnet_hiddens": [8]}}',
                     "--stop", '{"training_iteration": 2}', "--experiment-name", "mine")
    assert code == 0
    config = built[0].config
    assert config.env == "Acrobot-v1" and config.seed == 7 and config.log_level == "INFO"
    assert config.num_env_runners == 1  # the flag beats --config, which beat num_workers
    assert config.model["fcnet_hiddens"] == [8]
    assert config.model["fcnet_activation"] == "relu"  # --config merged into the file's model
    assert config.lr == 3e-4
    assert built[0].iteration == 2  # --stop replaced the file's stop
    assert trial_dirs(tmp_path)[0].parent.name == "mine"


def test_flags_alone(tmp_path, built, capsys):
    assert run_train(tmp_path, "--run", "ppo", "--env", "CartPole-v1",
                     "--stop", '{"timesteps_total": 2500}') == 0
    assert built[0].iteration == 3
    out = capsys.readouterr().out
    assert "stopped: timesteps_total = 3000 >= 2500" in out
    assert f"results: {trial_dirs(tmp_path)[0]}" in out


def test_default_stop_is_100_iterations(tmp_path, built):
    assert run_train(tmp_path, "--run", "PPO", "--env", "CartPole-v1") == 0
    assert built[0].iteration == 100


def test_stop_on_a_nested_key_and_the_first_criterion_met(tmp_path, built, capsys):
    stop = {"info": {"learner": {"default_policy": {"kl": 0.004}}}, "training_iteration": 50}
    assert run_train(tmp_path, "--run", "PPO", "--env", "CartPole-v1",
                     "--stop", json.dumps(stop)) == 0
    assert built[0].iteration == 4
    assert run_train(tmp_path, "--run", "PPO", "--env", "CartPole-v1",
                     "--stop", '{"info/learner/default_policy/kl": 0.002, '
                               '"episode_reward_mean": 10}') == 0
    assert built[1].iteration == 1


def test_a_misspelled_stop_key_ends_the_run_after_the_first_result(tmp_path, built, capsys):
    # It could never be met: one error line naming the closest key, not a run for ever.
    assert run_train(tmp_path, "--run", "PPO", "--env", "CartPole-v1", "--stop",
                     '{"episode_reward_maen": 5, "training_iteration": 3}') == 2
    assert built[0].iteration == 1
    line = one_error_line(capsys)
    assert "stop key 'episode_reward_maen' is not in the results" in line
    assert "did you mean 'episode_reward_mean' or" in line  # the closest keys, best first


def test_a_stop_key_under_a_dict_still_empty_only_warns(tmp_path, built, capsys):
    # A custom metric shows up once an episode reported it: not an error at iteration 1.
    assert run_train(tmp_path, "--run", "PPO", "--env", "CartPole-v1", "--stop",
                     '{"custom_metrics/score_mean": 5, "training_iteration": 2}') == 0
    assert capsys.readouterr().out.count("warning:") == 1


@pytest.mark.parametrize("stop,expected", [
    ('{"timesteps_total": "lots"}', "must be a number"),
    ("[1, 2]", "expected a JSON object"),
    ("{timesteps_total: 5}", "not valid JSON"),
])
def test_bad_stop_is_one_line_exit_2(tmp_path, built, capsys, stop, expected):
    assert run_train(tmp_path, "--run", "PPO", "--env", "CartPole-v1", "--stop", stop) == 2
    line = one_error_line(capsys)
    assert line.startswith("rlmesh train: error: ") and expected in line
    assert not built


def test_packaged_tuned_example_found_by_bare_name(tmp_path, built, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no such file here
    for name in ("cartpole-ppo.yaml", "tuned_examples/cartpole-ppo.yaml", "cartpole-ppo"):
        assert run_train(tmp_path, "-f", name, "--stop", '{"training_iteration": 1}') == 0
    assert len(built) == 3
    config = built[0].config
    assert config.env == "CartPole-v1" and config.num_envs_per_env_runner == 12
    assert trial_dirs(tmp_path)[0].parent.name == "cartpole-ppo"


@pytest.mark.parametrize("name", tuned_examples.names())
def test_every_tuned_example_is_a_valid_config(name):
    from rlmesh.driver.algorithm_registry import ALGORITHMS
    from rlmesh.tune.experiment import config_class
    from rlmesh.tune.train_loop import check_evaluation_stop

    experiment, exp, _ = tuned_examples.load_experiment(name)
    assert experiment and exp["run"] in ALGORITHMS
    # The name ends with the algorithm: cartpole-ppo, pendulum-apex-ddpg, minatar-breakout-ppo.
    parts = name.removesuffix(".yaml").split("-")
    assert any("_".join(parts[i:]).startswith(exp["run"].lower()) for i in range(1, len(parts)))
    # Offline algorithms sample nothing: they stop on their evaluation runners' returns.
    # The others stop on their runners' returns or, where the runners explore too much to
    # show the policy (APEX's epsilon 0.4), a greedy evaluation's; and an env-step budget.
    offline = exp["run"] in ("MARWIL", "BC")
    assert set(exp["stop"]) in ([{"evaluation/episode_reward_mean", "training_iteration"}]
                                if offline else
                                [{"episode_reward_mean", "timesteps_total"},
                                 {"evaluation/episode_reward_mean", "timesteps_total"}])
    config = config_class(exp["run"]).from_dict({**exp["config"], "env": exp["env"]})
    config.validate()
    check_evaluation_stop(exp["stop"], config)  # an evaluation/ stop key needs evaluations


# --- errors: one line, exit 2, nothing started ---

@pytest.mark.parametrize("argv,expected", [
    (["--run", "PPOO", "--env", "CartPole-v1"], "unknown algorithm 'PPOO'; did you mean 'PPO'? "
                                                f"known: {KNOWN}"),
    (["--run", "R2D2", "--env", "CartPole-v1"], f"unknown algorithm 'R2D2'; known: {KNOWN}"),
    (["--env", "CartPole-v1"], "no algorithm: give --run"),
    (["--run", "PPO"], "no environment"),
    (["--run", "PPO", "--env", "CartPole-v1", "--config", '{"lamda": 0.9}'],
     "unknown config key 'lamda'; did you mean 'lambda'?"),
    (["--run", "PPO", "--env", "CartPole-v1", "--config", '{"gamma": 2, "lr": -1}'],
     "invalid config: gamma: expected <= 1, got 2; lr: expected >= 0, got -1"),
    (["-f", "no-such-example.yaml"], "no such file: no-such-example.yaml (rlmesh's tuned "
                                     f"examples: {', '.join(tuned_examples.names())})"),
])
def test_errors_are_one_line_with_exit_2(tmp_path, built, capsys, argv, expected):
    assert run_train(tmp_path, *argv) == 2
    line = one_error_line(capsys)
    assert line.startswith("rlmesh train: error: ")
    assert expected in line
    assert not built and not (tmp_path / "results").exists()


@pytest.mark.parametrize("name,text,expected", [
    ("a.yaml", "exp:\n  run: PPO\n  env: CartPole-v1\n  stopp: {}\n",
     "unknown key 'stopp'; did you mean 'stop'?"),
    # several experiments run one after another (issue 21); each is checked before any runs
    ("a.yaml", "one: {run: PPO, env: CartPole-v1}\ntwo: {run: PPO}\n", "no environment"),
    ("a.yaml", "run: PPO\nenv: [unclosed\n", "cannot parse"),
    ("a.toml", "run = \n", "cannot parse"),
    ("a.json", '{"run": "PPO", "config": [1]}', "config must be a mapping"),
    ("a.ini", "[x]", "unknown file type '.ini'"),
])
def test_bad_files_are_one_line_with_exit_2(tmp_path, built, capsys, name, text, expected):
    (tmp_path / name).write_text(text)
    assert run_train(tmp_path, "-f", str(tmp_path / name)) == 2
    line = one_error_line(capsys)
    assert expected in line, line


def test_config_error_from_build_is_one_line(tmp_path, monkeypatch, capsys):
    def build(config):
        raise ConfigError("invalid config:\n  env: no env 'Nope-v0'\n  seed: bad")

    monkeypatch.setattr(train, "build_algorithm", build)
    assert run_train(tmp_path, "--run", "PPO", "--env", "Nope-v0") == 2
    assert one_error_line(capsys) == ("rlmesh train: error: invalid config: env: no env "
                                      "'Nope-v0'; seed: bad")


def test_an_env_gymnasium_cannot_make_is_one_line_before_anything_starts(tmp_path, capsys):
    # The real build: the driver makes one env for its spaces before it starts any process.
    assert run_train(tmp_path, "--run", "PPO", "--env", "CartPole-v9") == 2
    line = one_error_line(capsys)
    assert line.startswith("rlmesh train: error: env 'CartPole-v9' not found") and "CartPole-v1" in line


def test_config_help_is_derived_from_the_fields(built, capsys):
    assert cli_main(["train", "--config-help"]) == 0
    out = capsys.readouterr().out
    for row in PPOConfig.fields_table():
        assert f"  {row.key}: " in out
    assert "lambda: float = 0.95" in out
    assert "(also: num_workers, num_rollout_workers)" in out
    assert "GAE lambda" in out and not built


# --- checkpoints and Ctrl-C ---

def test_checkpoints_every_n_and_at_end(tmp_path, built, capsys):
    assert run_train(tmp_path, "--run", "PPO", "--env", "CartPole-v1", "--stop",
                     '{"training_iteration": 5}', "--checkpoint-freq", "2",
                     "--checkpoint-at-end") == 0
    trial = trial_dirs(tmp_path)[0]
    assert sorted(p.name for p in trial.glob("checkpoint_*")) == [
        "checkpoint_000002", "checkpoint_000004", "checkpoint_000005"]
    assert f"last checkpoint: {trial / 'checkpoint_000005'}" in capsys.readouterr().out


def test_no_checkpoint_twice_for_the_last_iteration(tmp_path, built):
    assert run_train(tmp_path, "--run", "PPO", "--env", "CartPole-v1", "--stop",
                     '{"training_iteration": 4}', "--checkpoint-freq", "2",
                     "--checkpoint-at-end") == 0
    assert [Path(p).name for p in built[0].saved] == ["checkpoint_000002", "checkpoint_000004"]


def test_first_ctrl_c_finishes_the_iteration_then_stops_cleanly(tmp_path, built, capsys):
    def interrupt(algo):
        if algo.iteration == 2:
            os.kill(os.getpid(), signal.SIGINT)

    FakeAlgo.on_train = interrupt
    before = signal.getsignal(signal.SIGINT)
    assert run_train(tmp_path, "--run", "PPO", "--env", "CartPole-v1",
                     "--checkpoint-at-end") == 130
    algo = built[0]
    assert algo.iteration == 2 and algo.stopped
    assert [Path(p).name for p in algo.saved] == ["checkpoint_000002"]
    trial = trial_dirs(tmp_path)[0]
    assert len((trial / "result.json").read_text().splitlines()) == 2  # flushed
    assert "stopped: SIGINT after iteration 2" in capsys.readouterr().out
    assert signal.getsignal(signal.SIGINT) is before


def test_second_ctrl_c_quits_at_once(tmp_path, built, monkeypatch):
    def exit_now(code):
        raise SystemExit(code)

    def interrupt_twice(algo):
        os.kill(os.getpid(), signal.SIGINT)
        os.kill(os.getpid(), signal.SIGINT)

    from rlmesh.tune import train_loop as experiments

    monkeypatch.setattr(experiments, "_exit_now", exit_now)
    FakeAlgo.on_train = interrupt_twice
    with pytest.raises(SystemExit) as exc:
        run_train(tmp_path, "--run", "PPO", "--env", "CartPole-v1", "--checkpoint-at-end")
    assert exc.value.code == 130
    assert not built[0].saved


def test_ctrl_c_between_start_and_the_loop_stops_the_algorithm_and_exits_130(
        tmp_path, built, monkeypatch, capsys):
    """A SIGINT that lands after the mesh started but before the loop took the signals over
    (here: while the result files are opened) still stops the mesh and exits 130."""
    import rlmesh.results

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(rlmesh.results, "ResultLogger", interrupted)
    assert run_train(tmp_path, "--run", "PPO", "--env", "CartPole-v1") == 130
    assert built[0].stopped
    assert "interrupted while starting" in capsys.readouterr().err


# --- the progress table ---

class FakeTTY(io.StringIO):
    def isatty(self):
        return True


def test_progress_plain_lines_when_not_a_tty():
    out = io.StringIO()
    reporter = ProgressReporter(out)
    for i in (1, 2):
        reporter.report(FakeAlgo(None).train() | {"training_iteration": i})
    reporter.report({"training_iteration": 3, "episode_reward_mean": float("nan")})
    lines = out.getvalue().splitlines()
    assert len(lines) == 4 and "reward_mean" in lines[0] and "\r" not in out.getvalue()
    assert lines[1].split()[:3] == ["1", "1,000", "10.0"]
    assert lines[3].split()[2] == "-"  # no episode yet


def last_row(text: str) -> str:
    return text.split("\n")[-2] + "\n"


def test_progress_redraws_one_line_on_a_tty():
    out = FakeTTY()
    reporter = ProgressReporter(out, keep_every_s=3600)
    algo = FakeAlgo(None)
    for _ in range(3):
        reporter.report(algo.train())
    reporter.message("checkpoint: /x")
    reporter.finish()
    text = out.getvalue()
    assert text.count("\n") == 3  # header, the message, the last row kept
    assert text.count("\r\x1b[K") == 4
    assert text.endswith("\r\x1b[Kcheckpoint: /x\n" + last_row(text))
    assert last_row(text).split()[:3] == ["3", "3,000", "30.0"]  # redrawn after the message


def test_progress_keeps_rows_on_a_tty_at_a_readable_rate():
    out = FakeTTY()
    reporter = ProgressReporter(out, keep_every_s=0)
    algo = FakeAlgo(None)
    for _ in range(3):
        reporter.report(algo.train())
    reporter.finish()
    rows = out.getvalue().split("\n")
    assert len(rows) == 5 and rows[-1] == ""  # header and three kept rows
    for i, row in enumerate(rows[1:4], 1):
        assert row.startswith("\r\x1b[K") and row.split()[1] == str(i)


# --- rollout ---

class ZeroPolicy:
    """Always pushes left: CartPole falls within a few dozen steps."""

    config = {"env": "CartPole-v1", "env_config": {}}

    def compute_single_action(self, obs, explore=False):
        assert obs.shape == (4,)
        return 0

    def stop(self):
        self.stopped = True


def test_rollout_episodes_and_steps(capsys):
    env = rollout.make_env("CartPole-v1", {})
    returns: list[float] = []
    rollout.run_episodes(ZeroPolicy(), env, None, 3, False, 0, returns)
    assert len(returns) == 3 and all(5 <= r < 100 for r in returns)
    cut: list[float] = []
    rollout.run_episodes(ZeroPolicy(), env, 5, None, False, 0, cut)
    assert cut == [] and "cut at 5 steps" in capsys.readouterr().out
    assert rollout.summary([1.0, 3.0]).startswith("mean return over 2 episodes: 2.00")


def test_rollout_command_uses_the_newest_checkpoint(tmp_path, monkeypatch, capsys):
    for i in (3, 10):
        (tmp_path / f"checkpoint_{i:06d}").mkdir()
    loaded = []
    policy = ZeroPolicy()

    class InferencePolicy:
        @staticmethod
        def from_checkpoint(path, trust_code=False):
            loaded.append(str(path))
            return policy

    module = types.ModuleType("rlmesh.driver.inference")
    module.InferencePolicy = InferencePolicy
    monkeypatch.setitem(sys.modules, "rlmesh.driver.inference", module)
    assert cli_main(["rollout", str(tmp_path), "--episodes", "2", "--seed", "1"]) == 0
    assert loaded == [str(tmp_path / "checkpoint_000010")] and policy.stopped
    out = capsys.readouterr().out
    assert "episode 2: return" in out and "mean return over 2 episodes" in out
    assert cli_main(["rollout", str(tmp_path / "nope")]) == 2
