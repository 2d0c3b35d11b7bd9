"""Policy servers starting at once on a machine with no keys yet (issue 48, point 5): both
made the key files, and a client then failed with "Invalid certificate file: .../server.key".
Real processes race on empty folders; every one must end with the same, whole keys."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rlmesh.client import PolicyClient, curve_client_options

from .test_policy_client import play_episode, runner_process

pytestmark = pytest.mark.timeout(120)

# One racer: waits for the start signal, then, for each empty folder in turn, does what a
# starting policy server (make the keys, load its pair) and a client (read theirs) do.
RACER = r"""
import json, os, sys, time
from pathlib import Path
import zmq.auth
from rlmesh.client.keys import (curve_client_options, make_curve_keys, make_http_token,
                                read_http_token)
root, rounds, go = Path(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3])
while not go.exists():
    time.sleep(0.001)
seen = []
for r in range(rounds):
    keys = root / f"k{r}"
    try:
        make_curve_keys(keys, clients=("client", "sim"))
        public, secret = zmq.auth.load_certificate(str(keys / "server.key_secret"))
        options = curve_client_options(keys, "sim")
        assert options["curve_server_key"] == public, "server.key is not server.key_secret's"
        assert zmq.auth.load_certificate(str(keys / "clients" / "sim.key"))[0] == \
            options["curve_keypair"][0], "clients/sim.key is not sim's key"
        token = make_http_token(keys, "sim")
        assert read_http_token(keys, "sim") == token, "the token changed after it was made"
        seen.append([public.decode(), token])
    except Exception as exc:
        seen.append(f"{type(exc).__name__}: {exc}")
print(json.dumps(seen))
"""


def test_concurrent_first_starts_agree_on_whole_keys(tmp_path: Path):
    rounds, go = 15, tmp_path / "go"
    racers = [subprocess.Popen([sys.executable, "-c", RACER, str(tmp_path), str(rounds), str(go)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
              for _ in range(8)]
    time.sleep(1.0)  # every racer imported and waiting
    go.touch()
    results = []
    for proc in racers:
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        results.append(json.loads(out))
    for r in range(rounds):
        outcomes = [seen[r] for seen in results]
        errors = [o for o in outcomes if isinstance(o, str)]
        assert not errors, f"round {r}: {errors[:3]}"
        assert len({tuple(o) for o in outcomes}) == 1, f"round {r}: racers ended with different keys"
    # a policy server on the keys the race left, and a client holding them
    keys = tmp_path / "k0"
    with runner_process(policy_server_curve_keys=str(keys)) as (_, _, address):
        with PolicyClient(address, timeout=10, **curve_client_options(keys, "sim")) as client:
            assert play_episode(client)[1]
