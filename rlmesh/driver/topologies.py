"""Every algorithm family's processes on one page (Sample Factory's ``connect_components``):
SYNC (PPO and the other synchronous algorithms), ASYNC (IMPALA, APPO), APEX and ES. Each
callable takes the mesh (``m.config`` is the run's config); ``mesh.py`` builds them and
docs/architecture.md shows them as ``topology.render`` draws them."""

from __future__ import annotations

import asyncio
from typing import Any

from rlmesh.driver.topology import Publish, Role, Stream, Topology
from rlmesh.roles.specs import AggregatorSpec, LearnerSpec, RelaySpec, ShardSpec, config_fields

PARAM_SERVER = "rlmesh.roles.paramserver:ParamServer"
WEIGHT_RELAY = "rlmesh.roles.weight_relay:WeightRelay"
ENV_RUNNER = "rlmesh.roles.env_runner:EnvRunner"
POLICY_SERVER_RUNNER = "rlmesh.roles.policy_server:PolicyServerRunner"
ES_RUNNER = "rlmesh.roles.es_runner:ESRunner"
EVAL_RUNNER = "rlmesh.roles.eval_runner:EvalRunner"
INFERENCE = "rlmesh.roles.inference_actor:InferenceActor"
LEARNER = "rlmesh.roles.learner_actor:LearnerActor"
AGGREGATOR = "rlmesh.roles.aggregator:Aggregator"
REPLAY_SHARD = "rlmesh.roles.replay_shard:ReplayShard"


# --- the specs each role is started with (``Role.spec``: the constructor's arguments) ---

def runner_args(m: Any, i: int) -> dict[str, Any]:
    return {"spec": m.runner_spec("runner", i).to_data()}


def policy_server_args(m: Any, i: int) -> dict[str, Any]:
    return {"config": m.runner_spec("runner", i).to_data(), "worker_index": i}


def relay_args(m: Any, i: int) -> dict[str, Any]:
    node, runners, upstream = m.relay_plan()[i]
    return {"spec": RelaySpec(config={}, upstream=upstream, node=node, index=i,
                              runners=runners, policies=list(m.policy_specs)).to_data()}


def learner_args(m: Any, rank: int) -> dict[str, Any]:
    code = m.learner_code()
    return LearnerSpec(**config_fields(m.config), policy_specs=m.policy_specs, rank=rank,
                       world_size=max(1, m.config.num_learners), code_roots=code["_code_roots"],
                       main_script=code["_main_script"]).to_data()


def aggregator_count(m: Any) -> int:
    """``aggregators_per_node`` on each node with runners, else ``num_aggregation_workers``."""
    per_node = getattr(m.config, "aggregators_per_node", 0)
    return per_node * len(m.runner_nodes()) if per_node else m.config.num_aggregation_workers


def aggregator_node(m: Any, j: int) -> str | None:
    """Aggregator ``j``'s node: with aggregators_per_node, the ``j // per_node``-th node of
    the runners (tree aggregation); else where the scheduler put it (by the driver)."""
    per_node = getattr(m.config, "aggregators_per_node", 0)
    return list(m.runner_nodes())[j // per_node] if per_node else None


def aggregator_args(m: Any, j: int) -> dict[str, Any]:
    return {"spec": AggregatorSpec(**config_fields(m.config), index=j,
                                   learners=m.names("learner")).to_data()}


def shard_args(m: Any, j: int) -> dict[str, Any]:
    return {"spec": ShardSpec(**config_fields(m.config), obs_space=m.args["obs_space"],
                              action_space=m.args["action_space"], index=j).to_data()}


async def data_parallel(m: Any, learners: list[Any]) -> None:
    """Rank 0 listens on its own node and every rank is told where before its first update
    (the learners may sit on different nodes of a launched cluster)."""
    if len(learners) > 1:
        address = await learners[0].call("dp_listen")
        await asyncio.gather(*(h.call("set_dp_address", address) for h in learners[1:]))


async def local_shard(m: Any, shards: list[Any]) -> None:
    """A shard in the driver's process: its buffer, which a learner there samples directly."""
    if m.in_driver(shards[0].name):
        m.local_shard = m.job.local_actor(shards[0].name).core


def threads(n: Any) -> dict[str, str]:
    """One process's numeric threads (``OMP_NUM_THREADS``)."""
    return {"OMP_NUM_THREADS": str(max(1, int(n if isinstance(n, (int, float)) else 1) or 1))}


# --- the families ---

SYNC = Topology("sync", roles=(
    Role("param_server", PARAM_SERVER, count=lambda m: 1, placement="driver", single=True,
         spec=lambda m, i: {}),
    # One per node of the runners (weights_relay): each version crosses to a node once.
    Role("relay", WEIGHT_RELAY, count=lambda m: len(m.relay_plan()), name="weight_relay",
         restart="helper", label="WeightRelay", spec=relay_args,
         node=lambda m, i: m.relay_plan()[i][0]),
    # Central inference, when inference_mode resolves to it (and runners have processes).
    Role("inference", INFERENCE, count=lambda m: 1, single=True, restart="inference",
         label="Inference", when=lambda m: m.central_inference(), spec=runner_args,
         env=lambda m: threads(m.inference.get("spare_cores", 1))),
    Role("runner", ENV_RUNNER, count=lambda m: m.config.num_env_runners, name="env_runner",
         placement="driver_if_none", first_index=1, restart="runner", label="EnvRunner",
         when=lambda m: m.config.policy_server_address is None, spec=runner_args),
    # External simulators: runners that serve PolicyClients instead of stepping envs.
    Role("runner", POLICY_SERVER_RUNNER, count=lambda m: m.config.num_env_runners,
         name="env_runner", placement="driver_if_none", first_index=1, restart="runner",
         label="EnvRunner", when=lambda m: m.config.policy_server_address is not None,
         spec=policy_server_args),
    Role("learner", LEARNER, count=lambda m: max(1, m.config.num_learners), phase="learners",
         placement=lambda m: "driver" if m.config.num_learners == 0 else "process",
         label="Learner", spec=learner_args, after_build=data_parallel,
         env=lambda m: threads(m.config.num_cpus_per_learner)),
    Role("eval_runner", EVAL_RUNNER, count=lambda m: m.config.evaluation_num_env_runners,
         placement="driver_if_none", first_index=1, restart="runner", phase="evaluation",
         label="EvalRunner", spec=lambda m, i: {"spec": m.runner_spec("eval_runner", i).to_data()}),
), publishes=(
    Publish("learner", "param_server"),
    Publish("param_server", "runner"),
    Publish("param_server", "relay"),
    Publish("relay", "runner"),
    Publish("param_server", "inference"),
    Publish("driver", "eval_runner"),
))

ASYNC = SYNC.plus(
    Role("aggregator", AGGREGATOR, count=aggregator_count, phase="aggregators",
         restart="helper", label="Aggregator", spec=aggregator_args, node=aggregator_node),
    # Each runner to an aggregator on its own node (one on each with aggregators_per_node):
    # only joined train batches cross the network.
    Stream("runner", "aggregator", "fragments", fan="node",
           when=lambda m: aggregator_count(m) > 0),
    Stream("runner", "learner", "fragments", fan="all",
           when=lambda m: aggregator_count(m) == 0),
    Stream("aggregator", "learner", "train batches", fan="all", via="spec"),
    name="async").with_role("learner", ready_call="start_async")

APEX = SYNC.plus(
    # One shard: in the driver's process (RLlib's local buffer; the learner there samples
    # it without a socket), unless the mesh says otherwise (bench_apex's reference).
    Role("replay_shard", REPLAY_SHARD, count=lambda m: m.config.num_replay_buffer_shards,
         placement=lambda m: ("driver" if m.config.num_replay_buffer_shards == 1
                              and m.local_single_shard else "process"),
         phase="replay", restart="shard", label="ReplayShard", spec=shard_args,
         after_build=local_shard),
    # The learners pull batches from every shard on credits and send TD errors back.
    Stream("replay_shard", "learner", "batches", fan="all", via="pull:start_replay",
           on_src_restart="replay_shard_restarted"),
    # Runner i to shard i mod J: each runner's n-step windows stay in one shard.
    Stream("runner", "replay_shard", "fragments", fan="mod"),
    name="apex")

ES = Topology("es", roles=(
    SYNC.roles[0],
    Role("runner", ES_RUNNER, count=lambda m: m.config.num_env_runners, name="env_runner",
         placement="driver_if_none", first_index=1, restart="runner", label="EnvRunner",
         spec=runner_args),
    SYNC.roles[-1],
), publishes=(Publish("driver", "param_server"), Publish("param_server", "runner"),
              Publish("driver", "eval_runner")))

#: Every shipped declaration, in the order docs/architecture.md shows them.
SHIPPED = (SYNC, ASYNC, APEX, ES)
