"""The runs root (RLMESH_RUNS_ROOT, default /tmp/rlmesh-<uid>) holds every job's sockets.
One that another user owns, or may write to, lets that user move a live job's directory
away and put sockets of their own in its place: rlmesh refuses to start there, in one
line, before any process of the run exists."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from rlmesh.runtime.run_dir import RunDir, UnsafeRunsRoot, check_runs_root

RLMESH = [sys.executable, "-m", "rlmesh"]
NOBODY = 65534


def _train(root: Path, tmp_path: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "RLMESH_RUNS_ROOT": str(root)}
    return subprocess.run(
        [*RLMESH, "train", "--run", "PPO", "--env", "CartPole-v1", "--local-dir",
         str(tmp_path / "results"), "--stop", '{"training_iteration": 1}',
         "--config", '{"num_env_runners": 1, "train_batch_size": 200, "minibatch_size": 50}'],
        env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.skipif(os.getuid() != 0, reason="giving a folder to another user needs root "
                    "(CI runs as root); the mode case below runs for anyone")
def test_a_runs_root_of_another_user_is_refused_before_anything_starts(tmp_path):
    root = tmp_path / "theirs"
    root.mkdir()
    os.chown(root, NOBODY, NOBODY)
    run = _train(root, tmp_path)
    assert run.returncode == 2, run.stdout + run.stderr
    assert run.stderr.strip().splitlines() == [
        f"rlmesh train: error: the runs root {root} is not safe: {root} belongs to uid "
        f"{NOBODY}, not to you (uid 0), so that user could move a running job's sockets; "
        "remove it, or set RLMESH_RUNS_ROOT to a folder of your own"], run.stderr
    assert list(root.iterdir()) == []  # no job directory, so no process was started


def test_a_runs_root_under_a_folder_others_may_write_is_refused(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    run = _train(shared / "runs", tmp_path)
    assert run.returncode == 2, run.stdout + run.stderr
    assert "Traceback" not in run.stderr
    assert f"{shared} is writable by other users (mode 777) and not sticky" in run.stderr
    with pytest.raises(UnsafeRunsRoot):  # Python's API: build() raises the same
        RunDir.create(root=shared / "runs")


def test_a_sticky_shared_folder_and_a_root_of_ones_own_are_fine(tmp_path):
    """/tmp itself is world-writable and sticky: others cannot move what is ours there."""
    sticky = tmp_path / "sticky"
    sticky.mkdir()
    sticky.chmod(0o1777)
    root = check_runs_root(sticky / "runs")
    assert root.stat().st_mode & 0o777 == 0o700
    assert RunDir.create(root=root).path.parent == root


@pytest.mark.skipif(os.getuid() != 0, reason="a symlink owned by another user needs root")
def test_a_symlinked_runs_root_another_user_owns_is_refused(tmp_path):
    """The link's owner could point it elsewhere while a job runs."""
    target = tmp_path / "mine"
    target.mkdir(mode=0o700)
    link = tmp_path / "link"
    link.symlink_to(target)
    os.lchown(link, NOBODY, NOBODY)
    with pytest.raises(UnsafeRunsRoot, match=f"{link} belongs to uid {NOBODY}"):
        check_runs_root(link)
