"""Every conformance file (RLlib's tuned-example keys for each algorithm, files/*.yaml) loads
through `rlmesh train -f` unchanged, takes RLlib's defaults for the keys it leaves out, and
trains one iteration, shrunk to seconds (files.shrunk). Reaching each file's own stop is the
benchmark's job (`make conformance`)."""

from __future__ import annotations

import pytest

from rlmesh.cli.train import build_algorithm, make_config
from rlmesh.config.base import ConfigError
from tests.conformance.files import all_files, shrunk, specs_of

FILES = all_files()


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_file_loads_with_rllibs_defaults(path, capsys):
    specs = specs_of(path)
    assert specs, f"{path.name} holds no experiment"
    for spec, _ in specs:
        make_config(spec).validate()
        assert spec.stop, f"{path.name}: its stop criteria were lost"
    assert "reads as RLlib's (it sets framework)" in capsys.readouterr().err


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_file_trains_one_iteration(path):
    spec, _ = specs_of(path)[0]
    if spec.config.get("input", "sampler") != "sampler":
        pytest.skip("an offline file: test_offline_files trains it on data it writes first")
    spec.config = shrunk(spec.config)
    algo = build_algorithm(make_config(spec))
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
