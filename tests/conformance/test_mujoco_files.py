"""RLlib's MuJoCo tuned examples (files/mujoco/<algo>/*.yaml, copied unchanged from
ray-project/ray) load through `rlmesh train -f` and make their env: their v1-v3 ids, which
needed mujoco-py, run as gymnasium's v5 envs with one line saying so. Not trained here (the
files ask for 16-64 runners and hours); tests/integration/test_mujoco_learns.py trains
rlmesh's own MuJoCo examples. Also: a MuJoCo id without the mujoco extra is one line."""

from __future__ import annotations

import importlib.util
import logging
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

import rlmesh.env.registry
from rlmesh.env.registry import make_env, mujoco_current_id
from rlmesh.tune.experiment import make_config
from tests.conformance.files import FILES, specs_of, variants

MUJOCO_FILES = sorted((FILES / "mujoco").rglob("*.yaml"))
needs_mujoco = pytest.mark.skipif(importlib.util.find_spec("mujoco") is None,
                                  reason="needs the mujoco extra: pip install 'rlmesh[mujoco]'")


def _name(path: Path) -> str:
    return f"{path.parent.name}/{path.stem}"


def test_the_files_are_there():
    # One per RLlib tuned example the issue names (sac, td3, ddpg, ppo folders).
    names = {_name(p) for p in MUJOCO_FILES}
    assert {"sac/halfcheetah-sac", "td3/mujoco-td3", "td3/invertedpendulum-td3",
            "ppo/halfcheetah-ppo", "ppo/hopper-ppo", "ddpg/halfcheetah-ddpg",
            "ddpg/mujoco-td3"} <= names


@needs_mujoco
@pytest.mark.parametrize("path", MUJOCO_FILES, ids=[_name(p) for p in MUJOCO_FILES])
def test_file_loads_and_makes_its_env(path):
    specs = specs_of(path)
    assert specs, f"{path.name} holds no experiment"
    for spec, _ in specs:
        for variant in variants(spec.config):  # mujoco-td3's grid over four envs
            config = make_config(replace(spec, config=variant))
            config.validate()
            env = make_env(config.env, config.env_config)
            try:
                assert env.spec.id == mujoco_current_id(config.env) or env.spec.id == config.env
                assert env.spec.id.endswith("-v5")
                obs, _ = env.reset(seed=0)
                assert env.observation_space.contains(obs)
            finally:
                env.close()


@needs_mujoco
def test_an_old_mujoco_id_runs_as_v5_with_one_line(caplog, monkeypatch):
    monkeypatch.setattr(rlmesh.env.registry, "_SAID", set())  # as in a fresh process
    caplog.set_level(logging.WARNING, logger="rlmesh.env.registry")
    envs = [make_env("Walker2d-v3") for _ in range(3)]  # a runner makes several copies
    assert {e.spec.id for e in envs} == {"Walker2d-v5"}
    lines = [r.getMessage() for r in caplog.records if "Walker2d-v3" in r.getMessage()]
    assert lines == ["env 'Walker2d-v3' was a mujoco-py env, which gymnasium 1.x no longer "
                     "has: running 'Walker2d-v5' (set env: Walker2d-v5 to silence this)"]
    for e in envs:
        e.close()


def test_which_ids_are_old_mujoco_ones():
    assert mujoco_current_id("HalfCheetah-v2") == "HalfCheetah-v5"
    assert mujoco_current_id("Hopper-v1") == "Hopper-v5"  # RLlib's oldest files: never gymnasium's
    assert mujoco_current_id("InvertedPendulum-v2") == "InvertedPendulum-v5"
    for current in ("HalfCheetah-v4", "HalfCheetah-v5", "CartPole-v0", "Pendulum-v1",
                    "NoSuchThing-v2", "HalfCheetah"):
        assert mujoco_current_id(current) is None, current


@needs_mujoco
def test_rllibs_halfcheetah_sac_keeps_its_action_settings():
    # RLlib's file: normalize_actions true, clip_actions false; v5's actions are [-1, 1].
    spec, _ = specs_of(FILES / "mujoco" / "sac" / "halfcheetah-sac.yaml")[0]
    config = make_config(spec)
    assert config.normalize_actions is True and config.clip_actions is False
    env = make_env(config.env)
    try:
        assert np.all(env.action_space.low == -1) and np.all(env.action_space.high == 1)
    finally:
        env.close()


@pytest.mark.parametrize("blocked", ["mujoco", "imageio"])
@pytest.mark.parametrize("env_id", ["HalfCheetah-v5", "Hopper-v3"])
def test_a_mujoco_id_without_the_extra_is_one_line(blocked, env_id, tmp_path):
    # A package set to None in sys.modules cannot be imported: as if not installed.
    code = (f"import sys; sys.modules[{blocked!r}] = None; "
            "from rlmesh.cli.main import main; sys.exit(main())")
    out = subprocess.run([sys.executable, "-c", code, "train", "--run", "SAC", "--env", env_id,
                          "--local-dir", str(tmp_path)], capture_output=True, text=True,
                         timeout=120, cwd=tmp_path)
    assert out.returncode == 2
    current = mujoco_current_id(env_id) or env_id
    assert out.stderr.strip().splitlines()[-1] == (
        f"rlmesh train: error: env {current!r} is a MuJoCo env: it needs the {blocked} "
        "package: pip install 'rlmesh[mujoco]'")
    assert "Traceback" not in out.stderr


WARNINGS_SCRIPT = """
import logging
import numpy as np
import mujoco
from rlmesh.env.registry import make_env
logging.basicConfig(level=logging.WARNING, format="%(name)s: %(message)s")
for env in [make_env("HalfCheetah-v5") for _ in range(2)]:
    env.reset(seed=0)
    env.unwrapped.data.qvel[:] = np.inf  # an unstable simulation: MuJoCo warns
    mujoco.mj_step(env.unwrapped.model, env.unwrapped.data)
"""


@needs_mujoco
def test_mujoco_warnings_reach_the_log_once_and_no_file(tmp_path):
    # MuJoCo's default: every process prints gymnasium's half_cheetah.xml deprecation
    # (settotalmass, mujoco 3.x) to stderr and appends it to ./MUJOCO_LOG.TXT.
    out = subprocess.run([sys.executable, "-c", WARNINGS_SCRIPT], capture_output=True,
                         text=True, timeout=120, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert not (tmp_path / "MUJOCO_LOG.TXT").exists()
    assert "settotalmass" not in out.stderr + out.stdout
    lines = [line for line in out.stderr.splitlines() if "MuJoCo" in line]
    assert lines == ["rlmesh.env.registry: MuJoCo: Nan, Inf or huge value in QVEL at DOF 0. The "
                     "simulation is unstable. Time = 0.0000."]
