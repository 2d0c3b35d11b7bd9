"""The ``[job]`` table of a cluster file: an experiment as ``rlmesh train -f`` runs it, or a
script run on the head, read into JobConfig and checked before any node is touched."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal, Mapping

from rlmesh.launcher.cluster_values import (_boolean, _folder_name, _Invalid, _optional, _path,
                                            _show, _string, _strings, _table)

if TYPE_CHECKING:
    from rlmesh.tune.experiment import TrainSpec

TRAIN_KEYS = ("run", "env", "config", "stop", "checkpoint_freq", "checkpoint_at_end", "local_dir",
              "experiment_name", "num_samples")
SCRIPT_KEYS = ("script", "args")


@dataclass(frozen=True)
class JobConfig:
    """``[job]``: a ``rlmesh train -f`` experiment (kind "train") or a script run on the head
    against the cluster (kind "script")."""

    kind: Literal["train", "script"]
    run: str | None = None  # the algorithm's canonical name ("PPO")
    env: str | None = None
    config: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))  # + env
    stop: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))
    checkpoint_freq: int = 0
    checkpoint_at_end: bool = False
    local_dir: str | None = None
    experiment_name: str | None = None
    num_samples: int = 1  # > 1, or search spaces in config: a sweep (rlmesh.tune)
    script: Path | None = None  # absolute
    args: tuple[str, ...] = ()

    @property
    def is_sweep(self) -> bool:
        """Search spaces in its config, or several samples: the job is a sweep of trials."""
        from rlmesh.tune.spaces import has_domains

        return self.kind == "train" and (self.num_samples > 1 or has_domains(dict(self.config)))

    def train_spec(self) -> TrainSpec:
        """The experiment as ``rlmesh train`` runs it."""
        from rlmesh.tune.experiment import DEFAULT_STOP, TrainSpec

        if self.kind != "train" or self.run is None:
            raise ValueError("a script job has no train spec; run its script instead")
        return TrainSpec(run=self.run, env=self.env, config=copy.deepcopy(dict(self.config)),
                         stop=dict(self.stop or DEFAULT_STOP), experiment=self.experiment_name,
                         local_dir=self.local_dir, checkpoint_freq=self.checkpoint_freq,
                         checkpoint_at_end=self.checkpoint_at_end)


def _parse_job(value: Any, base: Path) -> JobConfig:
    data = _table(value, "job", TRAIN_KEYS + SCRIPT_KEYS)
    train = [k for k in TRAIN_KEYS if k in data]
    if "script" in data and train:
        raise _Invalid("job", f"give either script (a Python script run on the head) or run, "
                       f"env, config, stop (an experiment, as in `rlmesh train -f`), not both; "
                       f"found script and {', '.join(train)}")
    if "script" in data:
        script = _path(data["script"], "job.script", base)
        if not script.is_file():
            raise _Invalid("job.script", f"no such file: {script}")
        return JobConfig(kind="script", script=script, args=_strings(data.get("args", []),
                                                                     "job.args"))
    if "args" in data:
        raise _Invalid("job.args", "args go with job.script; an experiment (run) takes none")
    if "run" not in data:
        from rlmesh.driver.algorithm_registry import ALGORITHMS

        raise _Invalid("job.run", f"missing: give run (an algorithm: {', '.join(ALGORITHMS)}) "
                       "with env, config and stop, or script (a Python script run on the head)")
    return _parse_experiment(data)


def _parse_experiment(data: dict[str, Any]) -> JobConfig:
    """An experiment, checked as ``rlmesh train`` will build it: so a typo in its config fails
    here, before any node is touched."""
    from rlmesh.config.settings import ConfigError
    from rlmesh.driver.algorithm_registry import ALGORITHMS
    from rlmesh.tune.experiment import canonical_keys, config_class, parse_stop
    from rlmesh.tune.train_loop import UsageError

    run = _string(data["run"], "job.run")
    try:
        cls = config_class(run)
    except UsageError as e:
        raise _Invalid("job.run", str(e)) from None
    run = next(n for n in ALGORITHMS if n.lower() == run.lower())
    config = canonical_keys(cls, dict(_table(data.get("config", {}), "job.config", None)))
    env = data.get("env", config.get("env"))
    if env is None:
        raise _Invalid("job.env", "missing: give the environment (a gymnasium id, or "
                       "'pkg.module:make_env'), here or as job.config.env")
    env = _string(env, "job.env" if "env" in data else "job.config.env")
    config["env"] = env
    try:
        cls.from_dict(_one_sample(config)).validate()
    except ConfigError as e:
        raise _Invalid("job.config", str(e).replace("invalid config:\n  ", "")
                       .replace("\n  ", "; ")) from None
    try:
        stop = parse_stop(_table(data.get("stop", {}), "job.stop", None), "job.stop")
    except UsageError as e:
        raise _Invalid("job.stop", str(e).removeprefix("job.stop: ")) from None
    freq = data.get("checkpoint_freq", 0)
    if isinstance(freq, bool) or not isinstance(freq, int) or freq < 0:
        raise _Invalid("job.checkpoint_freq", f"expected an integer >= 0 (iterations between "
                       f"checkpoints; 0: none), got {_show(freq)}")
    samples = data.get("num_samples", 1)
    if isinstance(samples, bool) or not isinstance(samples, int) or samples < 1:
        raise _Invalid("job.num_samples", f"expected an integer >= 1 (times the search space "
                       f"is sampled), got {_show(samples)}")
    return JobConfig(
        kind="train", run=run, env=env, config=MappingProxyType(config),
        stop=MappingProxyType(stop), checkpoint_freq=freq, num_samples=samples,
        checkpoint_at_end=_boolean(data.get("checkpoint_at_end", False), "job.checkpoint_at_end"),
        local_dir=_optional(data, "local_dir", "job", _string),
        experiment_name=_optional(data, "experiment_name", "job", _folder_name))


def _one_sample(config: dict[str, Any]) -> dict[str, Any]:
    """A sweep's config with its search spaces drawn once (the grid's first point): checked
    as a trial will be, so that a typo fails before any node is touched."""
    import random

    from rlmesh.tune.spaces import SpaceError, grid_variants, has_domains, resolve

    if not has_domains(config):
        return config
    try:
        return resolve(grid_variants(config)[0][0], random.Random(0))[0]
    except SpaceError as e:
        raise _Invalid("job.config", str(e)) from None
