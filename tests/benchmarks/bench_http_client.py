"""Remote ``get_action`` over HTTP beside the same over tcp:// (CURVE), in one run: the same
policy server config, rlmesh's PolicyClient on each, a kept-alive HTTP connection.
``python -m tests.benchmarks.bench_http_client [calls]``; measured, not asserted."""

from __future__ import annotations

import os
import sys
import tempfile
import time

import numpy as np
import uvloop

from rlmesh.client import PolicyClient
from rlmesh.runtime import Job
from tests.integration.test_seed_000_rest_client import SERVER, http_config


def latency_us(address: str, calls: int) -> np.ndarray:
    """``calls`` timed get_action round trips (after 200 untimed), in microseconds."""
    config = {**http_config(address).to_dict(), "_env_registry": {}}
    loop = uvloop.new_event_loop()
    job = loop.run_until_complete(Job("ipc").start())
    try:
        runner = loop.run_until_complete(job.spawn(SERVER, config=config, worker_index=1,
                                                   param_server=None))
        with PolicyClient(loop.run_until_complete(runner.call("get_address"))) as client:
            obs, episode_id = np.zeros(4, np.float32), client.start_episode()
            for _ in range(200):
                client.get_action(episode_id, obs)
            times = []
            for _ in range(calls):
                start = time.perf_counter()
                client.get_action(episode_id, obs)
                times.append(time.perf_counter() - start)
        return np.array(times) * 1e6
    finally:
        loop.run_until_complete(job.shutdown())
        loop.close()


def main(calls: int = 2000) -> None:
    os.environ.setdefault("RLMESH_RUNS_ROOT", tempfile.mkdtemp())
    os.environ.setdefault("RLMESH_POLICY_SERVER_KEYS", tempfile.mkdtemp() + "/keys")
    for _ in range(2):  # the two take turns: drift in the machine's load hits both
        for address in ("tcp://127.0.0.1:0", "http://127.0.0.1:0"):
            t = latency_us(address, calls)
            print(f"{address.split(':')[0]:5s} get_action p50 {np.percentile(t, 50):6.0f} us  "
                  f"p90 {np.percentile(t, 90):6.0f} us  ({calls} calls)", flush=True)


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:]))
