"""The names the rest of the driver, the algorithms and tests call on a mesh, each answered by
the pool that serves it (``forward``) or by one build step: one line each, no logic here."""

from __future__ import annotations

from typing import Any, Callable


def forward(pool: str, method: str) -> Callable[..., Any]:
    """``mesh.<name>(...)`` is ``mesh.<pool>.<method>(...)``."""
    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        return getattr(getattr(self, pool), method)(*args, **kwargs)

    call.__doc__ = f"``{pool}.{method}``."
    return call


def actors(kind: str, single: bool = False) -> property:
    """The actors of role ``kind`` (``single``: the one, or None)."""
    if single:
        return property(lambda self: next(iter(self.handles(kind)), None))
    return property(lambda self: self.handles(kind))


class CallerNames:
    """What callers of the mesh name, mapped onto its pools and build steps."""

    handles: Callable[[str], list[Any]]
    build: Callable[..., None]
    connect: Callable[[], None]
    run: Callable[..., Any]

    runners = actors("runner")
    learners = actors("learner")
    eval_runners = actors("eval_runner")
    aggregators = actors("aggregator")
    shards = actors("replay_shard")
    param_server = actors("param_server", single=True)
    inference_actor = actors("inference", single=True)
    restarts = property(lambda self: self.restarts_of["runner"])
    aggregator_restarts = property(lambda self: self.restarts_of["aggregator"])
    shard_restarts = property(lambda self: self.restarts_of["replay_shard"])
    num_learners = property(lambda self: len(self.learner_pool))

    # the runners
    sample = forward("runner_pool", "sample")
    sample_ahead = forward("runner_pool", "sample_ahead")
    foreach_runner = forward("runner_pool", "foreach")
    runner_calls = forward("runner_pool", "calls")
    send_weights = forward("runner_pool", "send_weights")
    sync_filters = forward("runner_pool", "sync_filters")
    pop_sampled = forward("runner_pool", "pop_sampled")
    runner_unavailable = forward("runner_pool", "unavailable")
    check_runners = forward("runner_pool", "check")
    runner_names = forward("runner_pool", "names")
    healthy_runner_names = forward("runner_pool", "healthy_names")
    num_live_runners = forward("runner_pool", "num_live")
    num_healthy_runners = forward("runner_pool", "num_healthy")
    pop_fragments_missed = forward("runner_pool", "pop_fragments_missed")
    # the learners
    publish = forward("learner_pool", "publish")
    foreach_learner = forward("learner_pool", "foreach")
    call_learner = forward("learner_pool", "on_rank0")
    update_learners = forward("learner_pool", "update")
    learner_metrics = forward("learner_pool", "metrics")
    # evaluation, aggregators, shards
    evaluate = forward("eval_pool", "evaluate")
    aggregator_stats = forward("aggregator_pool", "stats")
    shard_stats = forward("shard_pool", "stats")

    def num_updates(self) -> int:
        return self.learner_pool.on_rank0("num_updates")

    def shard_names(self) -> list[str]:
        return [s.name for s in self.shards]

    def remove_policy_weights(self, policy_id: str) -> None:
        """The param server forgets ``policy_id`` (a policy removed while training)."""
        self.run(self.param_server.call("remove_policy", policy_id))

    # build steps, by the phases the algorithms start them in
    def start_learners(self, policy_specs: dict[str, Any] | None = None) -> None:
        self.build("learners")

    def start_aggregators(self) -> None:
        self.build("aggregators")

    def start_async(self) -> None:
        """The learners' update loops, then the runners' streams into them."""
        self.connect()

    def start_replay_learning(self, obs_space: Any, action_space: Any) -> None:
        """The replay shards (spaces as data), the learners' update loops fed by them, then
        the runners' streams into the shards."""
        self.build("replay", obs_space=obs_space, action_space=action_space)
        self.connect()
