"""A trusted checkpoint (``--trust-code``) naming a class of the wrong kind for its field (an
algorithm that is not an Algorithm, a policy class that is not a Policy, callbacks, an env
that makes no env): one line, exit 2, as for any other checkpoint that does not fit; it
ended in a traceback, exit 1 (issue 48, point 8). The real CLI on a real checkpoint."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import msgpack
import pytest

from rlmesh.algorithms import Algorithm
from rlmesh.driver.checkpoints import META, CheckpointError
from tests.integration.trust_helpers import ppo_checkpoint

REPO = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.timeout(240), pytest.mark.usefixtures("no_children_left")]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    return ppo_checkpoint(tmp_path_factory.mktemp("ckpt"))


def edited(checkpoint: Path, tmp_path: Path, field: str, value: str) -> Path:
    copy = tmp_path / "edited"
    shutil.copytree(checkpoint, copy)
    meta = msgpack.unpackb((copy / META).read_bytes())
    *path, last = field.split("__")
    target = meta
    for part in path:
        target = target[part]
    target[last] = value
    (copy / META).write_bytes(msgpack.packb(meta, use_bin_type=True))
    return copy


CASES = [  # (field, value, words of the line)
    ("algorithm", "collections:OrderedDict", "not a subclass of rlmesh"),
    ("algorithm", "tests.integration.code_marker:make_env", "is a function"),
    ("policies__default_policy__policy_class", "collections:OrderedDict", "not a subclass of rlmesh"),
    ("policies__default_policy__runner_class", "tests.integration.code_marker:make_env",
     "is a function"),
    ("config__callbacks_class", "collections:OrderedDict", "not a subclass of rlmesh"),
]


def rollout(checkpoint: Path) -> list[str]:
    """The lines ``rlmesh rollout --trust-code`` wrote on stderr, once it failed as it should."""
    run = subprocess.run([sys.executable, "-m", "rlmesh.cli.main", "rollout", str(checkpoint),
                          "--episodes", "1", "--trust-code"], capture_output=True, text=True,
                         timeout=150, cwd=REPO)
    assert run.returncode == 2 and "Traceback" not in run.stderr, run.stderr
    return [line for line in run.stderr.splitlines() if line.strip()]


@pytest.mark.parametrize("field, value, words", CASES, ids=[f"{c[0]}={c[1]}" for c in CASES])
def test_a_trusted_checkpoint_naming_a_class_of_another_kind_is_refused_in_one_line(
        checkpoint, tmp_path, field, value, words):
    bad = edited(checkpoint, tmp_path, field, value)
    with pytest.raises(CheckpointError, match=words) as err:
        Algorithm.from_checkpoint(bad, trust_code=True)
    assert "\n" not in str(err.value) and value in str(err.value)


@pytest.mark.parametrize("field, value, words", [
    CASES[0], CASES[2], ("config__env", "collections:OrderedDict", "not a gymnasium.Env")])
def test_rollout_of_such_a_checkpoint_says_so_in_one_line_exit_2(checkpoint, tmp_path, field,
                                                                 value, words):
    lines = rollout(edited(checkpoint, tmp_path, field, value))
    assert len(lines) == 1 and value in lines[0] and words in lines[0], lines
