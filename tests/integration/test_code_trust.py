"""Code chosen by data, as an attacker would try it (issue 15, point 4): an edited checkpoint
that names a file, or code outside rlmesh, and messages to a running job's env runners that
name a file or a package the runner was not started with. A file is never run; other code
only with --trust-code; the run lives on."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import msgpack
import pytest

from rlmesh.algorithms import Algorithm, PPOConfig
from rlmesh.driver.checkpoints import META, CheckpointError
from rlmesh.runtime import RemoteError
from rlmesh.wire import messages as M
from tests.integration.trust_helpers import ppo_checkpoint, raw_call

REPO = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.timeout(240), pytest.mark.usefixtures("no_children_left")]


def rlmesh(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rlmesh.cli.main", *args], capture_output=True,
                          text=True, timeout=150, cwd=REPO, env=env)


def one_line_error(run: subprocess.CompletedProcess, *words: str) -> str:
    assert run.returncode == 2, run.stdout + run.stderr
    lines = [line for line in run.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "error" in lines[0], run.stderr
    assert "Traceback" not in run.stdout + run.stderr
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


def evil_file(tmp_path: Path) -> tuple[Path, Path]:
    """A script that writes a marker file when it runs, and that marker's path."""
    marker = tmp_path / "ran"
    script = tmp_path / "evil.py"
    script.write_text(textwrap.dedent(f"""
        from pathlib import Path
        Path({str(marker)!r}).write_text("ran")
        def make_env(env_config): raise SystemExit("ran")
        class Algo: pass
    """))
    return script, marker


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    """A CartPole PPO checkpoint after one iteration (sampled in the driver: quick)."""
    return ppo_checkpoint(tmp_path_factory.mktemp("ckpt"))


def edited(checkpoint: Path, tmp_path: Path, **changes) -> Path:
    """A copy of ``checkpoint`` whose metadata has ``changes`` (``config__env`` sets
    meta["config"]["env"])."""
    copy = tmp_path / "edited"
    shutil.copytree(checkpoint, copy)
    meta = msgpack.unpackb((copy / META).read_bytes())
    for key, value in changes.items():
        where, *path = key.split("__")
        target = meta
        for part in [where, *path][:-1]:
            target = target[part]
        target[[where, *path][-1]] = value
    (copy / META).write_bytes(msgpack.packb(meta, use_bin_type=True))
    return copy


def test_checkpoints_name_their_algorithm_by_registry_name_and_load_without_trust(checkpoint):
    meta = msgpack.unpackb((checkpoint / META).read_bytes())
    assert meta["algorithm"] == "PPO"
    run = rlmesh("rollout", str(checkpoint), "--episodes", "1")
    assert run.returncode == 0, run.stderr


@pytest.mark.parametrize("field", ["config__env", "algorithm"])
def test_a_checkpoint_naming_a_file_never_runs_it_even_with_trust(checkpoint, tmp_path, field):
    script, marker = evil_file(tmp_path)
    name = "make_env" if field == "config__env" else "Algo"
    bad = edited(checkpoint, tmp_path, **{field: f"{script}:{name}"})
    for trust in ([], ["--trust-code"]):
        one_line_error(rlmesh("rollout", str(bad), "--episodes", "1", *trust), "evil.py",
                       "never runs a file")
    with pytest.raises(CheckpointError, match="never runs a file"):
        Algorithm.from_checkpoint(bad, trust_code=True)
    assert not marker.exists()


def test_a_checkpoint_naming_code_outside_rlmesh_loads_only_with_trust_code(checkpoint, tmp_path):
    marker = tmp_path / "imported"
    env = {**os.environ, "RLMESH_TEST_MARKER": str(marker)}
    bad = edited(checkpoint, tmp_path, config__env="tests.integration.code_marker:make_env")
    one_line_error(rlmesh("rollout", str(bad), "--episodes", "1", env=env), "--trust-code",
                   "tests.integration.code_marker:make_env")
    with pytest.raises(CheckpointError, match="trust_code=True"):
        Algorithm.from_checkpoint(bad)
    assert not marker.exists()
    run = rlmesh("rollout", str(bad), "--episodes", "1", "--trust-code", env=env)
    assert run.returncode == 0, run.stderr
    assert marker.exists()  # trusted: the checkpoint's env module was imported and run


def test_train_resume_from_a_checkpoint_naming_other_code_needs_trust_code(tmp_path):
    def train(iterations: int, *extra: str) -> subprocess.CompletedProcess:
        return rlmesh("train", "--run", "PPO", "--env", "CartPole-v1", "--local-dir",
                      str(tmp_path), "--experiment-name", "exp", "--checkpoint-freq", "1",
                      "--stop", f'{{"training_iteration": {iterations}}}', "--config",
                      '{"num_env_runners": 0, "train_batch_size": 200, "minibatch_size": 100}',
                      *extra)

    assert train(1).returncode == 0
    [ckpt] = list(tmp_path.glob("exp/*/checkpoint_000001"))
    meta = msgpack.unpackb((ckpt / META).read_bytes())
    meta["config"]["callbacks_class"] = "tests.integration.code_marker:Callbacks"
    (ckpt / META).write_bytes(msgpack.packb(meta, use_bin_type=True))
    one_line_error(train(2, "--resume"), "--trust-code", "callbacks_class")
    run = train(2, "--resume", "--trust-code")
    assert run.returncode == 0 and "resuming from" in run.stdout, run.stderr


def test_messages_cannot_make_a_running_runner_import_a_file_or_a_new_package(
        tmp_path, monkeypatch):
    script, marker = evil_file(tmp_path)
    # A module the runners could import (it is on their path) but were not started with.
    (tmp_path / "not_started_with.py").write_text(
        f"from pathlib import Path\nPath({str(marker)!r}).write_text('imported')\n"
        "def fn(env, *args): return 'ran'\n")
    monkeypatch.setenv("PYTHONPATH", f"{REPO}:{tmp_path}")
    config = (PPOConfig().environment("CartPole-v1").env_runners(num_env_runners=1)
              .training(train_batch_size=200, minibatch_size=100, num_epochs=1))
    with config.build() as algo:
        pid = algo.env_runners.foreach_env_runner("pid")
        for path, words in ((f"{script}:make_env", "names a file"),
                            ("not_started_with:fn", "not one this process was started with")):
            for call in (algo.env_runners.foreach_env, algo.env_runners.foreach_env_runner):
                with pytest.raises(RemoteError) as err:
                    call(path)
                assert err.value.etype == "PermissionError" and words in err.value.remote_msg
        with pytest.raises(RemoteError, match="only public methods"):
            algo.env_runners.foreach_env("__init__")
        # Code of the packages the run was started with still runs; the runner lives on.
        # (the env as its creator made it: gym.make's outermost wrapper)
        assert algo.env_runners.foreach_env("tests.integration.code_marker:env_name") == ["TimeLimit"]
        assert algo.env_runners.foreach_env_runner("pid") == pid
        assert algo.train()["num_healthy_env_runners"] == 1
    assert not marker.exists()


def test_a_scripts_own_functions_reach_the_runners(tmp_path):
    script = tmp_path / "user_script.py"
    script.write_text(textwrap.dedent("""
        from rlmesh.algorithms import PPOConfig

        def obs_size(env):
            return env.observation_space.shape[0]

        if __name__ == "__main__":
            config = PPOConfig().environment("CartPole-v1").env_runners(num_env_runners=1)
            with config.build() as algo:
                print("sizes", algo.env_runners.foreach_env(obs_size))
    """))
    run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         timeout=150, cwd=tmp_path)
    assert run.returncode == 0 and "sizes [4]" in run.stdout, run.stdout + run.stderr


# --- issue 36: what a message to a running job's runner or learner can make it do ---

@pytest.fixture(scope="module")
def job(tmp_path_factory):
    """A PPO job with a runner and a learner in processes of their own, which could import
    ``h_a_other_pkg`` (on their path; importing it writes ``job.other_marker``) but were
    not started with it."""
    extra = tmp_path_factory.mktemp("path")
    marker = extra / "imported"
    (extra / "h_a_other_pkg.py").write_text(
        f"from pathlib import Path\nPath({str(marker)!r}).write_text('imported')\n"
        "from rlmesh.policy.torch_policy import TorchPolicy as Policy\n")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PYTHONPATH", f"{REPO}:{extra}")
        config = (PPOConfig().environment("CartPole-v1").env_runners(num_env_runners=1)
                  .learners(num_learners=1)
                  .training(train_batch_size=200, minibatch_size=100, num_epochs=1))
        with config.build() as algo:
            algo.train()
            algo.other_marker = marker
            yield algo


def spec_naming(algo, **classes) -> dict:
    """The default policy's spec data with ``classes`` (policy_class=..., runner_class=...)."""
    return {**algo.policy_specs["default_policy"], **classes}


# (test id, actor, call, its arguments given the evil script's path and the job, the words
# of the refusal). Each would have run the script (or broken training) at 410f52a.
ATTACKS = [
    ("runner_apply_private_rlmesh_function", "runner", "apply",
     lambda f, algo: ["rlmesh.runtime.import_path:_main_module", "x", str(f)], "not a public name"),
    ("runner_apply_public_rlmesh_function", "runner", "apply",
     lambda f, algo: ["rlmesh.runtime.import_path:script_module", "x", str(f)],
     "rlmesh's own functions are not run by message"),
    ("runner_foreach_env_private_rlmesh_function", "runner", "foreach_env",
     lambda f, algo: ["rlmesh.runtime.import_path:_main_module", "x", str(f)], "not a public name"),
    ("learner_add_policy_naming_a_file", "learner", "add_policy",
     lambda f, algo: ["evil", spec_naming(algo, policy_class=f"{f}:Algo"), {}], "names a file"),
    ("runner_add_policy_naming_a_file", "runner", "add_policy",
     lambda f, algo: ["evil", spec_naming(algo, runner_class=f"{f}:Algo"), {}], "names a file"),
    ("runner_settings_naming_a_file", "runner", "add_policy",
     lambda f, algo: ["p2", spec_naming(algo), {"policy_mapping_fn": f"{f}:make_env"}],
     "names a file"),
    ("learner_remove_unknown_policy_with_junk_settings", "learner", "remove_policy",
     lambda f, algo: ["nope", {"lr": "junk", "gamma": None}], "no policy 'nope'"),
    ("learner_remove_policy_with_junk_settings", "learner", "remove_policy",
     lambda f, algo: ["default_policy", {"lr": "junk", "gamma": None}],
     "'lr' cannot be changed by a message"),
]


@pytest.mark.parametrize("attack", ATTACKS, ids=[a[0] for a in ATTACKS])
def test_a_message_runs_no_file_sets_no_setting_and_the_job_trains_on(job, tmp_path, attack):
    _, role, call, arguments, words = attack
    script, marker = evil_file(tmp_path)
    actor = job.mesh.runners[0] if role == "runner" else job.mesh.learners[0]
    pid = raw_call(actor.address, "pid")["r"]
    reply = raw_call(actor.address, call, *arguments(script, job))
    assert not marker.exists(), "the marker file was written: the message ran the script"
    assert reply["t"] == M.ERROR, f"{call} was accepted: {reply}"
    assert words in reply["msg"], reply["msg"]
    assert "\n" not in reply["msg"]
    assert raw_call(actor.address, "pid")["r"] == pid  # the same process, still serving
    result = job.train()  # training goes on with the settings and policies it had
    assert result["num_healthy_env_runners"] == 1 and sorted(job.policy_specs) == ["default_policy"]
    assert job.config.lr == PPOConfig().lr


def test_a_learner_refuses_a_policy_class_outside_what_it_was_started_with(job):
    reply = raw_call(job.mesh.learners[0].address, "add_policy", "p2",
                     spec_naming(job, policy_class="h_a_other_pkg:Policy"), {})
    assert not job.other_marker.exists(), "the marker file was written: the module was imported"
    assert reply["t"] == M.ERROR and "not one this process was started with" in reply["msg"]


@pytest.fixture(scope="module")
def pettingzoo_checkpoint(tmp_path_factory) -> Path:
    """A PPO checkpoint of PettingZoo's rock-paper-scissors, named by its module."""
    pytest.importorskip("pettingzoo")
    config = (PPOConfig().environment("rlmesh.env.pettingzoo:make",
                                      env_config={"name": "classic.rps_v2", "max_cycles": 5})
              .multi_agent(policies={"p"})  # every agent acts with the only policy
              .env_runners(num_env_runners=0)
              .training(train_batch_size=100, minibatch_size=50, num_epochs=1))
    with config.build() as algo:
        algo.train()
        return Path(algo.save(tmp_path_factory.mktemp("pz") / "checkpoint_000001"))


def test_a_checkpoint_naming_a_module_by_env_config_needs_trust_code(pettingzoo_checkpoint,
                                                                    tmp_path):
    marker = tmp_path / "imported"
    (tmp_path / "h_a_evil_pz.py").write_text(textwrap.dedent(f"""
        from pathlib import Path
        Path({str(marker)!r}).write_text("imported")
        from pettingzoo.classic.rps_v2 import env, parallel_env
    """))
    env = {**os.environ, "PYTHONPATH": f"{REPO}:{tmp_path}"}
    # PettingZoo's own env module loads as rlmesh's code does: no flag.
    assert rlmesh("rollout", str(pettingzoo_checkpoint), "--episodes", "1",
                  env=env).returncode == 0
    bad = edited(pettingzoo_checkpoint, tmp_path, config__env_config__name="h_a_evil_pz")
    one_line_error(rlmesh("rollout", str(bad), "--episodes", "1", env=env), "--trust-code",
                   "env_config.name", "h_a_evil_pz")
    with pytest.raises(CheckpointError, match="trust_code=True"):
        Algorithm.from_checkpoint(bad)
    assert not marker.exists(), "the marker file was written: the checkpoint's module was imported"
    run = rlmesh("rollout", str(bad), "--episodes", "1", "--trust-code", env=env)
    assert run.returncode == 0, run.stderr
    assert marker.exists()  # trusted: imported, and the env it made ran


def test_a_scripts_own_policies_to_train_reaches_a_learner_process(tmp_path):
    """The learner is told the run's script, as runners are: a function of it named by
    ``policies_to_train`` is found there (it raised AttributeError in the learner before)."""
    script = tmp_path / "user_script.py"
    script.write_text(textwrap.dedent("""
        from rlmesh.algorithms import PPOConfig
        from tests.integration.multi_agent_envs import EarlyLeaver

        def train_only(pid, batch=None):
            return pid == "a"

        def mapping(agent_id, episode=None, **kwargs):
            return "a" if agent_id == "stayer" else "b"

        if __name__ == "__main__":
            config = (PPOConfig().environment(EarlyLeaver).env_runners(num_env_runners=1)
                      .learners(num_learners=1)
                      .multi_agent(policies={"a", "b"}, policy_mapping_fn=mapping,
                                   policies_to_train=train_only)
                      .training(train_batch_size=200, minibatch_size=100, num_epochs=1))
            with config.build() as algo:
                info = algo.train()["info"]["learner"]
                print("trained", sorted(p for p, stats in info.items() if stats))
    """))
    run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         timeout=150, cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert run.returncode == 0 and "trained ['a']" in run.stdout, run.stdout + run.stderr
