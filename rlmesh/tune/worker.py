"""One algorithm trial in a process of its own: ``python -m rlmesh.tune.worker SPEC.json``.

It runs ``rlmesh train``'s trial loop (tune/train_loop.py's _train_loop) and talks to the sweep
over its pipes, one JSON line each way: it sends each result and each checkpoint, and after
every result waits for the sweep's decision ({"save": bool, "stop": reason or null}); the
first line it reads holds the sweep's lambdas (rlmesh/runtime/handed.py, base64). Its
own output goes to ``<trial>/trial.log``; it dies with the sweep (parent-death signal).
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path


class PipeControl:
    """The sweep's side of _train_loop: results out, decisions in."""

    def __init__(self, out, inp):
        self.out, self.inp = out, inp

    def send(self, message: dict) -> None:
        from rlmesh.results import to_jsonable

        self.out.write(json.dumps(to_jsonable(message), allow_nan=False) + "\n")
        self.out.flush()

    def decide(self, result: dict) -> dict:
        self.send({"result": {k: v for k, v in result.items() if k != "config"}})
        line = self.inp.readline()
        if not line:  # the sweep is gone: stop (the parent-death signal may be on its way)
            return {"stop": "the sweep ended"}
        return json.loads(line)

    def saved(self, iteration: int, path: str) -> None:
        self.send({"saved": [iteration, path]})


class _Quiet:
    """The trial's progress goes to the sweep's table, not to a table of its own."""

    def report(self, result):
        pass

    def message(self, text):
        print(text)

    def finish(self):
        pass


def main(spec_path: str, parent_pid: int) -> int:
    from rlmesh.runtime.bootstrap import die_with_parent

    die_with_parent(parent_pid)
    data = json.loads(Path(spec_path).read_text())
    import base64

    from rlmesh.env.registry import adopt_registry
    from rlmesh.runtime import handed

    handed.receive(base64.b64decode(sys.stdin.readline()))  # the sweep's first line
    handed.load()
    adopt_registry(data.get("env_registry") or {})
    trial_dir = Path(data["trial_dir"])
    # The pipe keeps fd 1; everything printed goes to the trial's log.
    out = os.fdopen(os.dup(1), "w")
    log = open(trial_dir / "trial.log", "a", buffering=1)
    os.dup2(log.fileno(), 1)
    os.dup2(log.fileno(), 2)
    sys.stdout = sys.stderr = log
    from rlmesh.tune import train_loop as experiments
    from rlmesh.tune.experiment import TrainSpec, build_algorithm, make_config, used_config
    from rlmesh.results import ResultLogger

    spec = TrainSpec(run=data["run"], env=data["config"].get("env"), config=data["config"],
                     stop=data["stop"], checkpoint_freq=data.get("checkpoint_freq", 0),
                     checkpoint_at_end=True)
    config = make_config(spec)
    experiments.check_evaluation_stop(spec.stop, config)
    import logging

    level = str(spec.config.get("log_level", "WARNING")).upper()
    logging.basicConfig(level={"WARN": "WARNING"}.get(level, level),
                        format="%(levelname)s %(name)s: %(message)s")
    session = None
    if data.get("cluster"):  # joined by the launcher's function, named by the path it gave
        from rlmesh.runtime.import_path import import_object

        join = import_object(data["cluster"]["join"], "join_cluster")
        session = join(data["cluster"], data["trial_id"])
    try:
        algo = build_algorithm(config)
    except BaseException:
        if session is not None:
            session.close()
        raise
    if session is not None:  # where the scheduler put this trial's actors, for its log
        print(f"placement on the cluster: {json.dumps(session.placed, sort_keys=True)}")
    if data.get("restore"):
        try:
            algo.restore(data["restore"], trust_code=True)  # the sweep's own checkpoint
        except BaseException:
            algo.stop()
            raise
        print(f"restored from {data['restore']}")
    algo.logdir = str(trial_dir)  # evaluation videos go to its videos/
    # A trial resumed from its own checkpoint does its later iterations again: their rows go.
    # PBT's exploit (a donor's copy, "checkpoint_N_from_<trial>") keeps the trial's history.
    own = bool(data.get("restore")) and re.fullmatch(r"checkpoint_\d+", Path(data["restore"]).name)
    # params.json: what the trial uses ('auto' defaults resolved from the env's spaces)
    used = used_config(algo, config).to_dict()
    logger = ResultLogger(trial_dir, used, resume=bool(data.get("restore")),
                          resumed_at=algo.iteration if own else None)
    if data.get("trackers"):  # one tracker run per trial, grouped by the experiment
        from rlmesh.tune.trackers import TrackedLogger

        logger = TrackedLogger(logger, data["trackers"], trial_dir.name,
                               data.get("experiment") or trial_dir.parent.name,
                               used, trial_dir)
    control = PipeControl(out, sys.stdin)
    try:
        return experiments._train_loop(algo, spec, trial_dir, data["trial_id"], _Quiet(),
                                       logger, control)
    except experiments.UsageError as e:  # a stop key no result has: one line, not a traceback
        print(f"rlmesh train: error: {e}")
        return experiments.EXIT_USAGE
    finally:
        if session is not None:
            session.close()


if __name__ == "__main__":
    from rlmesh.quick_exit import exit_process

    # The sweep counts a trial done at its exit: no second of torch's teardown first.
    exit_process(main(sys.argv[1], int(sys.argv[2])))
