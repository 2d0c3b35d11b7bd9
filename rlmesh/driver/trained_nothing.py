"""The rule that a run which trained nothing never passes for one (issue 48): ``TrainingWatch``
reads each iteration's result and, once the learner has made no update though the config
says it should have by then, warns (once, during the run) and keeps the one-line reason that
``rlmesh train`` exits non-zero with."""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger(__name__)

#: Env steps sampled past the first update's due point before a run counts as having
#: trained nothing: twice the due point (an asynchronous learner's first batch is on its way).
MARGIN = 2
#: Asynchronous learners train on their own clock: a learner process importing torch on a
#: loaded machine made its first update ~5 s after the runners' first steps (measured on 2
#: cores); it gets this long past the due point besides.
ASYNC_GRACE_S = 30.0


def first_update_due(config: Any) -> tuple[int, str]:
    """Env steps sampled by which a healthy run has had a batch to update on: its learning
    starts, plus one train batch (for ``training_intensity``: the env steps one update's
    samples are owed for); and those settings, as a user would look them up."""
    starts = int(getattr(config, "num_steps_sampled_before_learning_starts", 0) or 0)
    batch = int(getattr(config, "train_batch_size", 0) or 0)
    per_learner = getattr(config, "train_batch_size_per_learner", None)
    if per_learner:
        batch = max(batch, int(per_learner) * max(1, int(getattr(config, "num_learners", 0))))
    intensity = getattr(config, "training_intensity", None)
    per_update = batch / intensity if intensity else batch
    why = f"num_steps_sampled_before_learning_starts {starts:,} + train_batch_size {batch:,}"
    if intensity:
        why += f" / training_intensity {intensity:g}"
    return int(starts + per_update), why


def expects_updates(algo: Any) -> bool:
    """Whether ``algo``'s learner must update: its iteration is rlmesh's own (a user's
    ``training_step`` or ``training_iteration`` may train nothing by design) and some policy
    trains (``policies_to_train`` None or a non-empty list; a function is not second-guessed)."""
    cls = type(algo)
    for name in ("training_step", "training_iteration"):
        if not getattr(cls, name).__module__.startswith("rlmesh."):
            return False
    to_train = getattr(algo.config, "policies_to_train", None)
    return to_train is None or (isinstance(to_train, (list, tuple, set)) and bool(to_train))


#: Learner statistics that a batch the learner skipped (or never got) reports too.
NOT_AN_UPDATE = {"num_nonfinite_batches_skipped", "num_nonfinite_updates_skipped",
                 "num_env_steps_trained"}


def learner_reported(result: dict[str, Any]) -> bool:
    """Whether any policy's learner statistics in ``result`` come from an update (a policy
    of the user's whose ``update`` reports no ``num_env_steps_trained`` still says its loss)."""
    learner = (result.get("info") or {}).get("learner") or {}
    return any(isinstance(stats, dict) and set(stats) - NOT_AN_UPDATE
               for stats in learner.values())


def trained_counter(result: dict[str, Any]) -> str:
    """The result's count of what the learner did: APEX's updates, else every family's
    ``num_env_steps_trained`` (a policy's update reports the samples it trained on)."""
    return ("num_learner_updates_total" if "num_learner_updates_total" in result
            else "num_env_steps_trained")


class TrainingWatch:
    """Whether an algorithm's run has trained nothing, from its results (``observe``);
    ``reason``: None, or why, in one line."""

    def __init__(self, algo: Any) -> None:
        self.active = expects_updates(algo)
        due, self.settings = first_update_due(algo.config)
        self.due = MARGIN * due
        to_train = getattr(algo.config, "policies_to_train", None)
        self.hint = (f"check that policies_to_train {list(to_train)} get agents "
                     "(policy_mapping_fn), then " if to_train else "see ")
        mesh_class = getattr(algo, "mesh_class", None)
        self.asynchronous = bool(getattr(mesh_class, "asynchronous", False))
        self.passed_at: tuple[int, float] | None = None  # (iteration, time_total_s) past due
        self.reason: str | None = None
        self.warned = False
        self.updated = False  # learner statistics of an update seen

    def observe(self, result: dict[str, Any]) -> str | None:
        """The result of an iteration: the reason, once the run counts as having trained
        nothing (warned of the first time), else None."""
        if not self.active:
            return None
        counter = trained_counter(result)
        self.updated = self.updated or learner_reported(result)
        if int(result.get(counter) or 0) > 0 or self.updated:
            self.reason = None  # it trains (after a restore, too)
            return None
        sampled = int(result.get("num_env_steps_sampled", result.get("timesteps_total", 0)) or 0)
        iteration = int(result.get("training_iteration", 0) or 0)
        clock = float(result.get("time_total_s", 0.0) or 0.0)
        if sampled < self.due:
            return None
        if self.passed_at is None:
            self.passed_at = (iteration, clock)
        first, since = self.passed_at
        if iteration <= first or (self.asynchronous and clock - since < ASYNC_GRACE_S):
            return None  # one whole iteration past the due point, to be fair
        self.reason = (f"trained nothing: {counter} is 0 after {sampled:,} env steps "
                       f"sampled in {iteration} iterations, though the learner should "
                       f"update from {self.due // MARGIN:,} on ({self.settings}); "
                       f"{self.hint}the run's log for why")
        if not self.warned:
            self.warned = True
            log.warning("%s", self.reason)
        return self.reason
