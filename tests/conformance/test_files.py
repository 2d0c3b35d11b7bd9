"""Every conformance file (RLlib's tuned-example keys for each algorithm, files/*.yaml) loads
through `rlmesh train -f` unchanged, takes RLlib's defaults for the keys it leaves out, and
trains one iteration, shrunk to seconds (files.shrunk). Reaching each file's own stop is the
benchmark's job (`make conformance`)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from rlmesh.algorithms.pg_config import PGConfig
from rlmesh.tune.experiment import build_algorithm, make_config
from rlmesh.config.base import ConfigError
from tests.conformance.files import all_files, shrunk, specs_of, variants

FILES = all_files()


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_file_loads_with_rllibs_defaults(path, capsys):
    specs = specs_of(path)
    assert specs, f"{path.name} holds no experiment"
    for spec, _ in specs:
        for variant in variants(spec.config):  # each trial of a sweep
            make_config(replace(spec, config=variant)).validate()
    assert "reads as RLlib's (it sets " in capsys.readouterr().err


@pytest.fixture(scope="module")
def offline_data(tmp_path_factory):
    """CartPole episodes as RLlib's JSON lines, written by a short PG run (the BC and MARWIL
    files read RLlib's /tmp/out; here they read this)."""
    out = tmp_path_factory.mktemp("offline")
    algo = (PGConfig().environment("CartPole-v1").env_runners(num_env_runners=0)
            .training(train_batch_size=400).offline_data(output=str(out)).build())
    try:
        algo.train()
    finally:
        algo.stop()
    return out


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_file_trains_one_iteration(path, offline_data):
    spec, _ = specs_of(path)[0]
    config = shrunk(variants(spec.config)[0], spec.run)
    if config.get("input", "sampler") != "sampler":
        config["input"] = str(offline_data)  # the file's own path holds no data here
    algo = build_algorithm(make_config(replace(spec, config=config)))
    try:
        result = algo.train()
    finally:
        algo.stop()
    assert result["training_iteration"] == 1
    assert result["timesteps_total"] > 0


def test_file_with_a_key_rlmesh_cannot_honour_is_one_line(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("x:\n  run: PPO\n  env: CartPole-v1\n  config:\n    framework: tf\n"
                   "    soft_horizon: true\n")
    with pytest.raises(ConfigError) as err:
        make_config(specs_of(bad)[0][0])
    assert str(err.value).startswith("soft_horizon: rlmesh cannot honour soft_horizon=True")
    assert "\n" not in str(err.value)
