"""Multi-agent ``output`` without processes: a MultiAgentSampler's fragments (agents joining
and leaving, episodes cut between fragments) written per agent in JSON (MultiAgentBatch
lines) and Parquet, and read back as one whole trajectory per (episode id, agent id)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from rlmesh.offline import OfflineDataset, OutputWriter
from tests.unit.test_multi_agent_sampler import _sampler


@pytest.mark.parametrize("fmt", ["json", "parquet"])
def test_every_agents_steps_written_with_ids_and_joined_whole(tmp_path, fmt):
    sampler = _sampler(num_envs=2)
    writer = OutputWriter(tmp_path, 1, fmt)
    for _ in range(5):  # fragments of 3 steps cut JoinLeave's 4-step episodes
        fragment = sampler.sample(3)
        writer.write(fragment, sampler.last_owners)
    writer.close()
    if fmt == "json":
        lines = [json.loads(x) for x in writer.paths[0].read_text().splitlines()]
        assert {x["type"] for x in lines} == {"MultiAgentBatch"}
        assert sum(x["count"] for x in lines) == 2 * 5 * 3
    data = OfflineDataset(tmp_path, shuffle=False)
    # 15 steps of each env: 3 whole episodes of 4 steps (a: 3 steps, b: 2), then one cut
    # after 3 steps (a terminated, b one step)
    assert data.num_steps == sampler.counters["num_agent_steps_sampled"] == 2 * (3 * 5 + 4)
    trajectories: dict[int, dict[str, dict]] = {}
    for e in data.episodes:
        aid = str(e["agent_id"][0])
        assert str(e["policy_id"][0]) == "p" + aid and set(e["agent_id"].astype(str)) == {aid}
        assert aid not in trajectories.setdefault(int(e["eps_id"][0]), {})
        trajectories[int(e["eps_id"][0])][aid] = e
    assert len(trajectories) == 8 and all(len(t) == 2 for t in trajectories.values())
    whole = [t for t in trajectories.values() if len(t["b"]["t"]) == 2]
    assert len(whole) == 6
    for t in whole:
        a, b = t["a"], t["b"]
        np.testing.assert_array_equal(a["obs"][:, 0], [0, 1, 2])
        np.testing.assert_array_equal(a["new_obs"][:, 0], [1, 2, 3])
        np.testing.assert_array_equal(a["t"], [0, 1, 2])
        np.testing.assert_array_equal(a["rewards"], [1, 1, 1])
        assert a["terminateds"][-1] and not a["truncateds"][-1]
        np.testing.assert_array_equal(b["obs"][:, 0], [102, 103])
        np.testing.assert_array_equal(b["new_obs"][:, 0], [103, 104])
        np.testing.assert_array_equal(b["t"], [0, 1])
        np.testing.assert_array_equal(b["rewards"], [10, 10])
        assert b["truncateds"][-1] and not b["terminateds"][-1]
        assert (a["agent_index"][0], b["agent_index"][0]) == (0, 1)  # order of joining
    # a multi-agent policy trains on its own agents' steps
    assert {str(e["policy_id"][0]) for e in data.sample_episodes(10, "pb")} == {"pb"}
    assert data.sample(10, policy_id="pa")["policy_id"] == "pa"
