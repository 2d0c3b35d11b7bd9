"""A small swarm (tests/scale): 20 simulated runners in 2 host processes on this machine,
against the real param server, weight relay, aggregator and supervisor. Keeps the harness
working: every sim holds every version, the param server's and the relay's byte counts are
the model size times their subscribers, every fragment sent is taken (or, with a host
SIGKILLed and restarted by the supervisor, lost in flight at that kill, within its bound),
and no process outlives the run."""

from __future__ import annotations

import asyncio

import psutil
import pytest

from tests.scale.swarm import MB, SwarmConfig, run_swarm

MODEL_MB = 0.25
MODEL_BYTES = int(MODEL_MB * MB)


def _run(cfg: SwarmConfig):
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    result = asyncio.run(run_swarm(cfg, echo=lambda line: None))
    left = [p for p in psutil.Process().children(recursive=True) if p.pid not in before]
    gone, alive = psutil.wait_procs(left, timeout=5)
    assert not alive, f"processes left running: {[p.pid for p in alive]}"
    return result


@pytest.mark.parametrize("relay", [False, True], ids=["direct", "relay"])
def test_small_swarm_accounts_for_weights_and_fragments(relay):
    cfg = SwarmConfig(runners=20, hosts=2, model_mb=MODEL_MB, versions=3, interval=0.5,
                      fragment_kb=2, fragment_rate=10, batch_steps=256, relay=relay)
    r = _run(cfg)
    assert len(r.versions) == 3
    for row in r.versions:
        assert row.holders == 20, f"version {row.version}: {row.holders} of 20 sims hold it"
        assert row.p50 <= row.p99 <= row.max
        assert not row.ps_bytes_estimated
        if relay:  # one subscriber upstream: the relay; it sends to the 20 sims
            assert row.ps_bytes == MODEL_BYTES
            assert row.relay_bytes == 20 * MODEL_BYTES
        else:
            assert row.ps_bytes == 20 * MODEL_BYTES
        assert row.driver_calls == 1  # the publish itself
    acc = r.account
    assert acc["ok"], acc
    assert acc["sent"] >= 20 and acc["sent"] == acc["taken"]
    assert acc["lost_at_kill"] == 0 and acc["refused"] == 0
    assert r.fragments_per_s > 0 and r.batches_per_s > 0
    assert r.bytes_per_batch >= 256 * 4  # the batch carries at least its obs column
    assert r.supervised == 5 + relay  # 2 hosts, param server, aggregator, learner (relay)


def test_small_swarm_host_killed_is_restarted_and_its_fragments_accounted():
    cfg = SwarmConfig(runners=20, hosts=2, model_mb=MODEL_MB, versions=8, interval=0.5,
                      fragment_kb=2, fragment_rate=10, batch_steps=256, kill_fraction=0.5,
                      seed=3)
    r = _run(cfg)
    assert r.kills == 1
    acc = r.account
    assert acc["ok"], acc
    assert 0 <= acc["lost_at_kill"] <= acc["lost_at_kill_bound"]
    assert acc["sent"] == acc["taken"] + acc["refused"] + acc["lost_stream_broke"] + acc["lost_at_kill"]
    # The restarted host's sims subscribed again: the last version reached all 20.
    assert r.versions[-1].holders == 20
