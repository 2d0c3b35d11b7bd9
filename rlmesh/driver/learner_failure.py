"""What the driver makes of a learner that died or whose update raised: ``LearnerFailed``, one
line naming the cause, the learner's log and the checkpoint to resume from (``learner_calls``
around the driver's learner calls)."""

from __future__ import annotations

import time
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

from rlmesh.policy.policy import POLICY_ERRORS
from rlmesh.runtime import ActorUnavailable, RemoteError

if TYPE_CHECKING:
    from rlmesh.driver.run_view import RunView

# How long a learner's failed collective waits for the supervisor to name the learner that
# is gone: its heartbeat timeout (5 s), and a node's loss seen through its agent.
PEER_FAILURE_WAIT_S = 20.0


class LearnerFailed(RuntimeError):
    """A learner died or its update loop raised: the run cannot go on. ``log_path``: the
    learner process's log, with the traceback (None for a learner in this process, whose
    traceback went to this process's logging, and for one that wrote nothing: killed)."""

    def __init__(self, message: str, log_path: Path | None = None) -> None:
        super().__init__(message)
        self.log_path = log_path


@contextmanager
def learner_calls(algo: RunView) -> Iterator[None]:
    """A learner's death (or hang) seen in the block becomes LearnerFailed, naming the
    checkpoint to resume from."""
    try:
        yield
    except (ActorUnavailable, RemoteError) as exc:
        if algo.mesh.learner_failure is None and not _learner_raised(algo, exc):
            raise
        raise learner_failed(algo, exc) from None


def learner_failed(algo: RunView, exc: BaseException) -> LearnerFailed:
    """``exc``, seen on a learner call, as the one-line LearnerFailed the user gets."""
    return LearnerFailed(_failure_message(algo, exc), _learner_log(algo, exc))


def _wait_for_peer_failure(algo: RunView, exc: BaseException) -> None:
    """A learner's collective failed because another learner is gone (its node lost):
    wait a little for the supervisor to say which, so that the message names the cause,
    not the symptom on the learner that survived."""
    if "DataParallelError" not in f"{getattr(exc, 'etype', '')} {exc}":
        return
    deadline = time.monotonic() + PEER_FAILURE_WAIT_S
    while algo.mesh.learner_failure is None and time.monotonic() < deadline:
        time.sleep(0.2)


def _learner_log(algo: RunView, exc: BaseException) -> Path | None:
    """The failed learner process's log file, where it has one."""
    name = algo.mesh.failed_learner or getattr(exc, "actor", "") or ""
    job = algo.mesh.job
    if algo.mesh.kind_of(name) != "learner" or job is None or algo.config.num_learners == 0:
        return None
    path = job.run_dir.log_path(name)
    # A learner killed by a signal wrote no traceback: its log may be empty.
    return path if path.is_file() and path.stat().st_size > 0 else None


def _failure_message(algo: RunView, exc: BaseException) -> str:
    """The cause in one line (the traceback is in the learner's log), and where to resume."""
    _wait_for_peer_failure(algo, exc)
    what = algo.mesh.learner_failure or _one_line_cause(exc)
    last = algo.last_checkpoint
    where = (f"the last checkpoint is {last}: resume with `rlmesh train "
             f"... --resume` or Algorithm.restore('{last}')"
             if last else
             "no checkpoint was saved in this run (checkpoint_freq or algo.save() "
             "would give one to resume from)")
    return (f"the learner failed, so the run stops (its weights and optimizer state "
            f"exist nowhere else): {what}\n{where}")


def _learner_raised(algo: RunView, exc: BaseException) -> bool:
    """A learner process's update raised something other than a policy error (those are one
    line already, and the CLI prints them so)."""
    return (isinstance(exc, RemoteError) and algo.mesh.kind_of(exc.actor) == "learner"
            and exc.etype not in POLICY_ERRORS)


def _one_line_cause(exc: BaseException) -> str:
    if isinstance(exc, RemoteError):
        first = (exc.remote_msg.strip().splitlines() or [""])[0]
        where = f" in {exc.actor}" if exc.actor else ""
        return first if exc.etype == "LearnerStopped" else f"{exc.etype}{where}: {first}"
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]
