"""Weights by tree (issue 50): a node's WeightRelay takes each version from the param server
once and pushes it on to its node's runners; a runner whose relay is gone takes its weights
from the param server until the relay, restarted, tells it to come back; the driver's calls
on the runners go through the relay, one message per node."""

from __future__ import annotations

import asyncio
import os
import signal

import numpy as np
import uvloop

from rlmesh.env.registry import env_registry
from rlmesh.roles.runner_policy import RELAY_TIMEOUT_S
from rlmesh.roles.specs import RelaySpec, RunnerSpec
from rlmesh.runtime import Job
from rlmesh.runtime.import_path import startup_code
from rlmesh.runtime.supervisor import RestartPolicy

RUNNER = "rlmesh.roles.env_runner:EnvRunner"
PARAM_SERVER = "rlmesh.roles.paramserver:ParamServer"
RELAY = "rlmesh.roles.weight_relay:WeightRelay"
RUNNERS = ["env_runner-1", "env_runner-2", "env_runner-3"]


def _runner_spec(index: int) -> dict:
    config = {"env": "CartPole-v1", "num_envs_per_env_runner": 1, "rollout_fragment_length": 5,
              "seed": 0, "model": {"fcnet_hiddens": [16]}, "_env_registry": env_registry()}
    config.update(startup_code(config))
    return RunnerSpec.from_config_dict(config, worker_index=index, param_server="weight_relay-0",
                                       weights_fallback="param_server").to_data()


async def _until(check, timeout: float = 30.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not check():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.05)


def test_a_version_leaves_the_param_server_once_and_a_dead_relay_loses_no_version():
    """Three runners behind one relay: each version leaves the param server once (to the
    relay) and reaches every runner; the relay killed, a sample naming the newest version
    gets it from the param server (the fallback); the relay restarted by the supervisor
    tells its runners, who subscribe to it again and leave the param server."""

    async def main():
        async with Job("ipc") as job:
            await job.spawn(PARAM_SERVER, name="param_server", in_process=True)
            ps = job.local_actor("param_server")
            relay = await job.spawn(RELAY, name="weight_relay-0", restart=RestartPolicy(
                max_restarts=1, backoff_s=RELAY_TIMEOUT_S + 3), spec=RelaySpec(
                    config={}, runners=RUNNERS, policies=["default_policy"]).to_data())
            runners = [await job.spawn(RUNNER, name=n, spec=_runner_spec(i + 1))
                       for i, n in enumerate(RUNNERS)]
            weights = {"default_policy": await runners[0].call("get_weights")}
            size = sum(a.nbytes for a in weights["default_policy"].values())
            await _until(lambda: "weight_relay-0" in ps.stats()["subscribers"])
            seen = []
            for version in (1, 2, 3):
                await ps.set_weights(version, weights)
                got = await asyncio.gather(*(r.call("sample", weights_up_to=version)
                                             for r in runners))
                seen.append([f["policy_version"] for f in got])
            before = dict(ps.bytes_by_version), ps.stats()["subscribers"]
            relay_stats = await relay.call("stats")

            # The relay dies (and stays down a while): the next version comes from the param
            # server directly, once a runner's call to the relay has had RELAY_TIMEOUT_S.
            os.kill(job.supervisor.children["weight_relay-0"].child.pid, signal.SIGKILL)
            await ps.set_weights(4, weights)
            got = await asyncio.gather(*(r.call("sample", weights_up_to=4) for r in runners))
            seen.append([f["policy_version"] for f in got])
            during = ps.stats()["subscribers"]

            # Back: the runners subscribe to the new relay at their next fragment.
            await _until(lambda: any(e.kind == "restarted" for e in job.supervisor.events), 60)
            await _until(lambda: "weight_relay-0" in ps.stats()["subscribers"]
                         and len(ps.stats()["subscribers"]) == 1)
            await asyncio.gather(*(r.call("sample") for r in runners))
            ps.bytes_by_version.clear()
            await ps.set_weights(5, weights)
            got = await asyncio.gather(*(r.call("sample", weights_up_to=5) for r in runners))
            seen.append([f["policy_version"] for f in got])
            metrics = await asyncio.gather(*(r.call("metrics") for r in runners))
            return (size, seen, before, relay_stats, during, dict(ps.bytes_by_version),
                    ps.stats()["subscribers"], metrics, await relay.call("stats"))

    (size, seen, (sent, subscribers), relay_stats, during, sent_after, subscribers_after,
     metrics, relay_after) = uvloop.run(main())
    assert seen == [[1] * 3, [2] * 3, [3] * 3, [4] * 3, [5] * 3]
    assert subscribers == ["weight_relay-0"]  # the runners are the relay's
    assert all(sent[v] == size for v in (1, 2, 3))  # one copy a version left the param server
    assert relay_stats["subscribers"] == RUNNERS
    # Each runner got each version from the relay: pushed, or asked for by a sample that
    # came before the push (then pushed too: a push is not taken back).
    assert all(3 * size <= relay_stats["bytes_by_version"][str(v)] <= 6 * size for v in (2, 3))
    assert set(during) == {"weight_relay-0", *RUNNERS}  # fell back on the param server
    assert all(m["num_weight_fallbacks"] == 1 for m in metrics)
    assert subscribers_after == ["weight_relay-0"] and sent_after == {5: size}
    assert relay_after["subscribers"] == RUNNERS and relay_after["joined"]


def test_impala_with_a_relay_and_an_aggregator_per_node_trains_through_them():
    """IMPALA with weights_relay on one machine: its runners subscribe to the relay, not the
    param server, the driver's calls on them go through the relay, and it learns."""
    from rlmesh.algorithms.impala_config import ImpalaConfig

    config = (ImpalaConfig().environment("CartPole-v1")
              .env_runners(num_env_runners=2, num_envs_per_env_runner=4, weights_relay=True)
              .learners(aggregators_per_node=1)
              .training(lr=0.001, num_sgd_iter=2, minibatch_buffer_size=2, vf_loss_coeff=0.5,
                        entropy_coeff=0.0, model={"fcnet_hiddens": [64, 64],
                                                  "vf_share_layers": False})
              .reporting(min_time_s_per_reporting=1).debugging(seed=0))
    algo = config.build()
    try:
        best, iterations = -np.inf, 0
        for iterations in range(1, 41):
            best = max(best, algo.train()["episode_reward_mean"])
            if best >= 100:
                break
        mesh = algo.mesh
        ps = mesh.run(mesh.param_server.handles[0].call("stats"))
        relay = mesh.run(mesh.handle("relay").call("stats"))
    finally:
        algo.stop()
    assert best >= 100
    assert ps["subscribers"] == ["weight_relay-0"]
    assert relay["subscribers"] == ["env_runner-1", "env_runner-2"]
    # pop_sampled each iteration: one message for both runners, through the relay
    assert relay["runner_calls"] >= iterations
    assert mesh.names("aggregator") == ["aggregator-0"]
