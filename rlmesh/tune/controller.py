"""The sweep loop: place pending trials with the cluster's placement scheduler as long as
they fit (the rest wait), hear their results, prune or exploit them, keep the state file,
and stop cleanly on Ctrl-C so that ``--resume`` goes on where it stopped."""

from __future__ import annotations

import os
import queue
import shutil
import signal
import threading
import time
from pathlib import Path

from rlmesh.tune.executor import FunctionTrial, ProcessTrial
from rlmesh.tune.trial import DONE, ERROR, PENDING, PRUNED, RUNNING, TERMINATED, write_state

STATE_EVERY_S = 1.0  # state-file writes are throttled to this; forced at the end and on Ctrl-C


class Sweep:
    """Runs ``trials`` (their records; new ones come from ``make_trial``) to the end."""

    def __init__(self, experiment_dir: Path, trials: list, total: int, make_trial, request,
                 trainable, search, pbt, metric: str, mode: str, table, nodes,
                 max_concurrent: int | None = None, checkpoint_freq: int = 0, meta=None,
                 cluster_file: str | None = None, join_cluster: str | None = None,
                 trackers: dict | None = None):
        self.dir = experiment_dir
        self.trackers = trackers or {}  # {"wandb"|"mlflow": options}: each trial logs to them
        self.trials = trials
        self.total = total
        self.make_trial = make_trial  # index -> a new Trial (Optuna asks when a slot is free)
        self.request = request  # trial -> its placement groups
        self.trainable = trainable  # None: algorithm trials in processes; else the function
        self.search, self.pbt = search, pbt
        self.metric, self.mode = metric, mode
        self.table = table
        self.nodes = nodes
        self.max_concurrent = max_concurrent or 10**9
        self.checkpoint_freq = checkpoint_freq
        self.meta = meta or {}
        self.cluster_file = cluster_file  # a launched cluster: trials' actors on its nodes
        self.join_cluster = join_cluster  # "module:fn" a trial's worker joins it with
        self.events: queue.Queue = queue.Queue()
        self.running: dict[str, object] = {}  # trial id -> its ProcessTrial / FunctionTrial
        self.usage: dict[str, dict[str, dict[str, float]]] = {}  # trial id -> node -> res
        self.exploits: dict[str, dict] = {}
        self.pruned: set[str] = set()
        self.waiting_said: str | None = None
        self.oversubscribed_said = False  # the sweep's one warning of a trial run alone
        self.interrupted = False
        self._state_at = 0.0
        self._dirty = False
        self._pool = None  # threads of function trainables, reused from trial to trial

    # --- the loop ---

    def run(self) -> bool:
        """Train every trial; False if interrupted (Ctrl-C, SIGTERM)."""
        old = {}
        if threading.current_thread() is threading.main_thread():  # signals reach only it
            old = {s: signal.signal(s, self._on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            while not self.interrupted:
                self._start_what_fits()
                if not self.running and self._finished():
                    break
                try:
                    event = self.events.get(timeout=0.5)
                except queue.Empty:
                    self.table.show(self.trials, self._resources())
                    if self._dirty:
                        self._write_state()
                    continue
                self._handle(*event)
                self._dirty = True
                self.table.show(self.trials, self._resources())
            if self.interrupted:
                self._stop_all()
        finally:
            for s, handler in old.items():
                signal.signal(s, handler)
            for runner in list(self.running.values()):
                runner.kill()
            if self._pool is not None:
                self._pool.shutdown(wait=False)
            self._write_state(force=True)
        self.table.finish(self.trials, self._resources())
        return not self.interrupted

    def _finished(self) -> bool:
        return all(t.status in DONE for t in self.trials) and len(self.trials) >= self.total

    def _on_signal(self, signum, frame):
        if self.interrupted:  # a second Ctrl-C: the trial processes die with us
            os.write(2, b"\nrlmesh tune: quitting now\n")
            os._exit(128 + signum)
        self.interrupted = True
        os.write(2, b"\nrlmesh tune: stopping the running trials at a checkpoint "
                    b"(Ctrl-C again to quit at once); --resume goes on from there\n")

    def _stop_all(self) -> None:
        for runner in self.running.values():
            runner.interrupt()
        deadline = time.monotonic() + 120
        while self.running and time.monotonic() < deadline:
            try:
                self._handle(*self.events.get(timeout=0.5))
            except queue.Empty:
                continue

    # --- placing trials ---

    def _next_pending(self):
        pending = [t for t in self.trials if t.status == PENDING]
        if pending:
            return pending[0]
        if len(self.trials) < self.total:
            trial = self.make_trial(len(self.trials))
            self.trials.append(trial)
            return trial
        return None

    def _start_what_fits(self) -> None:
        from rlmesh.placement.scheduler import PlacementError, place

        while len(self.running) < self.max_concurrent:
            trial = self._next_pending()
            if trial is None:
                return
            try:
                groups = self.request(trial)
            except Exception as e:  # e.g. a drawn value its config refuses: this trial fails
                trial.status, trial.error = ERROR, f"{type(e).__name__}: {e}"
                self._complete(trial, failed=True)
                from rlmesh.tune.train_loop import _one_line

                self.table.message(f"{trial.trial_id} ERROR: {_one_line(str(e))}")
                continue
            try:
                placement = place(groups, self.nodes, self._used())
            except PlacementError as e:
                if not self.running:  # bigger than the idle machine
                    groups, placement = self._oversubscribed(trial, groups, e)
                    self._launch(trial, groups, placement, alone=True)
                    continue
                if self.waiting_said != trial.trial_id:
                    self.waiting_said = trial.trial_id
                    self.table.message(f"scheduler: {trial.trial_id} waits ({_first_line(e)}); "
                                       f"{len(self.running)} running, {self._resources()}")
                return
            self._launch(trial, groups, placement)

    def _oversubscribed(self, trial, groups, error):
        """A trial asking for more CPUs than the idle machine has runs anyway, as `rlmesh
        train` runs it: alone, its processes sharing the cores, with one warning for the
        sweep. Its GPUs and custom resources must still fit, and on a launched cluster (where
        each trial's session places its actors by the request) it is refused as before."""
        from rlmesh.placement.scheduler import PlacementError, place
        from rlmesh.runtime.resources import cpus_asked, oversubscribed_line, without_cpus

        refused = RuntimeError(f"trial {trial.trial_id} cannot be placed even on an idle "
                               f"machine: {error}; ask for fewer resources per trial "
                               "(num_env_runners, num_cpus_per_env_runner, "
                               "resources_per_trial)")
        if self.cluster_file is not None:
            raise refused from None
        cpuless = without_cpus(groups)
        try:
            placement = place(cpuless, self.nodes, {})
        except PlacementError:
            raise refused from None
        if not self.oversubscribed_said:
            self.oversubscribed_said = True
            have = sum(n.resources.get("CPU", 0.0) for n in self.nodes)
            self.table.message("warning: " + oversubscribed_line(
                f"trial {trial.trial_id}", cpus_asked(groups), have) +
                "; trials this big run one at a time")
        return cpuless, placement

    def _launch(self, trial, groups, placement, alone: bool = False) -> None:
        """Start ``trial`` where ``placement`` puts it; ``alone``: oversubscribed, it takes
        every CPU of the machine, so that nothing runs beside it."""
        others = self._used()  # what the trial's session counts as taken when it places
        usage: dict[str, dict[str, float]] = {}
        for (g, b), node in placement.assignment.items():
            for res, amount in groups[g].bundles[b].resources.items():
                usage.setdefault(node, {}).setdefault(res, 0.0)
                usage[node][res] += amount
        if alone:
            for node in self.nodes:
                usage.setdefault(node.name, {})["CPU"] = node.resources.get("CPU", 0.0)
        self.usage[trial.trial_id] = usage
        trial.status, trial.node = RUNNING, ",".join(sorted(usage))
        if self.search is not None and trial.optuna_number is None:
            self.search.reattach(trial)
        if self.trainable is None:
            cluster = None if self.cluster_file is None else {
                "file": self.cluster_file, "used": others, "join": self.join_cluster}
            runner = ProcessTrial(trial, self.events, self.checkpoint_freq, cluster,
                                  self.trackers, self.meta.get("experiment"))
        else:
            if self._pool is None:
                from concurrent.futures import ThreadPoolExecutor

                self._pool = ThreadPoolExecutor(max_workers=64, thread_name_prefix="rlmesh.tune")
            runner = FunctionTrial(trial, self.events, self.trainable, self._pool)
        self.running[trial.trial_id] = runner
        asks = ", ".join(f"{k} {v:g}" for k, v in sorted(_sum(usage).items()) if v)
        asks += ", oversubscribed" if alone else ""
        waiting = sum(t.status == PENDING for t in self.trials) + self.total - len(self.trials)
        from_ = f" from {trial.restore_from}" if trial.restore_from else ""
        self.table.message(f"scheduler: {trial.trial_id} placed on {trial.node} ({asks}){from_}; "
                           f"{len(self.running)} running, {waiting} waiting, "
                           f"{self._resources()}")
        self._write_state()

    def _used(self) -> dict[str, dict[str, float]]:
        used: dict[str, dict[str, float]] = {}
        for usage in self.usage.values():
            for node, res in usage.items():
                for k, v in res.items():
                    used.setdefault(node, {}).setdefault(k, 0.0)
                    used[node][k] += v
        return used

    def _resources(self) -> str:
        used = self._used()
        parts = []
        for node in self.nodes:
            cpu = used.get(node.name, {}).get("CPU", 0.0)
            parts.append(f"{node.name} CPU {cpu:g}/{node.resources.get('CPU', 0):g} in use")
        return ", ".join(parts)

    # --- events ---

    def _handle(self, tid: str, kind: str, payload) -> None:
        trial = next(t for t in self.trials if t.trial_id == tid)
        if kind == "result":
            self._on_result(trial, payload)
        elif kind == "saved":
            trial.checkpoints.append(list(payload))
            self._write_state()
        elif kind == "exit":
            self._on_exit(trial, *payload)

    def _on_result(self, trial, result: dict) -> None:
        trial.record(result)
        trial.elapsed = float(trial.last_result.get("time_total_s", trial.elapsed))
        decision: dict = {}
        value = trial.metric(self.metric)
        if self.search is not None and self.search.should_prune(trial, value):
            self.pruned.add(trial.trial_id)
            decision = {"stop": f"pruned at iteration {trial.iteration} ({self.metric} = "
                                f"{value:g})"}
            self.table.message(f"scheduler: {trial.trial_id} {decision['stop']}")
        elif self.pbt is not None:
            verdict = self.pbt.decide(trial, self.trials)
            if "exploit" in verdict:
                self.exploits[trial.trial_id] = verdict
                decision = {"stop": f"exploiting {verdict['exploit']}"}
            else:
                decision = verdict
        self.running[trial.trial_id].decide(decision)

    def _on_exit(self, trial, code: int, error: str) -> None:
        self.running.pop(trial.trial_id, None)
        self.usage.pop(trial.trial_id, None)
        exploit = self.exploits.pop(trial.trial_id, None)
        if exploit is not None and code == 0:
            self._exploit(trial, exploit)
        elif code == 0:  # its stop criterion, or pruned
            trial.status = PRUNED if trial.trial_id in self.pruned else TERMINATED
            self._complete(trial, failed=False)
            self.table.message(f"{trial.trial_id} {trial.status} after {trial.iteration} "
                               f"iterations ({self.metric} = {_num(trial.metric(self.metric))})")
        elif code in (0, 130, 143) and self.interrupted:
            # resumed later from its newest checkpoint (checkpoint_at_end saved one just now)
            trial.status, trial.restore_from = PENDING, trial.last_checkpoint
        else:
            trial.status, trial.error = ERROR, error
            self._complete(trial, failed=True)
            self.table.message(f"{trial.trial_id} ERROR (exit code {code}); its log "
                               f"{trial.dir}/trial.log ends:\n{error}")
        self._write_state()

    def _exploit(self, trial, exploit: dict) -> None:
        """PBT: ``trial`` goes on from a copy of the donor's newest checkpoint, perturbed."""
        donor = next(t for t in self.trials if t.trial_id == exploit["exploit"])
        source = Path(donor.last_checkpoint)
        target = Path(trial.dir) / f"{source.name}_from_{donor.trial_id}"
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(source, target)
        changed = {k: exploit["config"].get(k) for k in self.pbt.mutations if "/" not in k}
        self.table.message(f"pbt: {trial.trial_id} ({_num(trial.metric(self.metric))}) copies "
                           f"the checkpoint of {donor.trial_id} "
                           f"({_num(donor.metric(self.metric))}): {source} -> {target}; "
                           f"explores {changed}")
        trial.config, trial.restore_from, trial.status = exploit["config"], str(target), PENDING
        trial.params.update(changed)

    def _complete(self, trial, failed: bool) -> None:
        if self.search is not None:
            self.search.complete(trial, trial.metric(self.metric),
                                 trial.trial_id in self.pruned, failed)

    def _write_state(self, force: bool = False) -> None:
        """Write the state file if it changed and STATE_EVERY_S has passed (``force``: now).
        Rewriting every trial's record at each event cost 46 s of a 100-trial sweep."""
        self._dirty = True
        now = time.monotonic()
        if force or now - self._state_at >= STATE_EVERY_S:
            self._state_at, self._dirty = now, False
            write_state(self.dir, self.trials,
                        {**self.meta, "metric": self.metric, "mode": self.mode,
                         "total": self.total})


def _sum(usage: dict) -> dict[str, float]:
    out: dict[str, float] = {}
    for res in usage.values():
        for k, v in res.items():
            out[k] = out.get(k, 0.0) + v
    return out


def _num(value) -> str:
    return "-" if value is None else f"{value:g}"


def _first_line(e: Exception) -> str:
    return str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
