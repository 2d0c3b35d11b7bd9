"""Clients that would starve the others at a policy server (issue 48, points 3 and 6): idle
authenticated connections that filled the server's descriptors, a client flooding fake
episodes that became every reported episode, and one huge reward that ended a run. Real
policy server processes, real sockets on 127.0.0.1; behaviour is asserted, never times."""

from __future__ import annotations

import resource
from pathlib import Path

import msgpack
import pytest
import zmq

from rlmesh.algorithms import PPOConfig
from rlmesh.client import PolicyClient, PolicyServerError, curve_client_options, make_curve_keys
from rlmesh.client.keys import default_keys_dir
from rlmesh.tuned_examples import load_experiment
from rlmesh.wire import messages as M

from .test_policy_client import play_episode, runner_process
from .test_policy_server_attacks import chunk

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.timeout(240)


def idle_crowd(address: str, n: int) -> tuple[list[zmq.Context], list[zmq.Socket]]:
    """``n`` DEALERs holding the admitted client key, each sending one valid call at once
    and then nothing; shed ones reconnect, as ZeroMQ does by default."""
    options = curve_client_options(default_keys_dir())
    contexts = [zmq.Context() for _ in range(n // 800 + 1)]
    for ctx in contexts:
        ctx.max_sockets = 1000
    crowd = []
    for i in range(n):
        sock = contexts[i // 800].socket(zmq.DEALER)
        sock.linger = 0
        sock.curve_serverkey = options["curve_server_key"]
        sock.curve_publickey, sock.curve_secretkey = options["curve_keypair"]
        sock.connect(address)
        sock.send_multipart([msgpack.packb(M.make(M.CALL, id=1, m="server_info", a=[], k={}))])
        crowd.append(sock)
    return contexts, crowd


def test_idle_authenticated_clients_leave_a_new_client_a_slot():
    """1,000 keyed DEALERs that each sent one call, under a soft limit of 512 descriptors:
    the server sat at 512 (connections it had shed were forgotten but left open when a
    dup of their descriptor failed there), its listener could not accept, and a new
    PolicyClient got PolicyServerUnavailable within 10 s."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 2400:  # 1,000 zmq sockets here, two descriptors each
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 4096), hard))
    if resource.getrlimit(resource.RLIMIT_NOFILE)[0] < 2400:
        pytest.skip("this machine allows fewer than 2,400 open files")
    with runner_process() as (run, runner, address):
        pid = run(runner.call("pid"))
        resource.prlimit(pid, resource.RLIMIT_NOFILE, (512, resource.prlimit(pid, resource.RLIMIT_NOFILE)[1]))
        contexts, crowd = idle_crowd(address, 1000)
        try:
            crowd[-1].poll(5000)  # the crowd connected and (partly) answered
            with PolicyClient(address, timeout=10) as newcomer:
                assert play_episode(newcomer)[1]
            connections = run(runner.call("metrics"))["connections"]
            assert connections["shed"] > 0 and connections["open"] <= 512 - 64
        finally:
            for sock in crowd:
                sock.close()
            for ctx in contexts:
                ctx.term()


def reported_episodes(run, runner) -> list[dict]:
    """Every episode the server reports to the driver, from samples until one is idle."""
    episodes = []
    while True:
        fragment = run(runner.call("sample"))
        episodes += fragment["episodes"]
        if fragment["idle"]:
            return episodes


def test_a_flooding_client_cannot_push_the_real_clients_episodes_out_of_the_reported_ones(tmp_path):
    """One keyed client pipelining fake 64-step episodes made every reported episode its
    own (mean = min = max = 64.0); the real client's episodes vanished from the stats."""
    keys = make_curve_keys(tmp_path / "keys", clients=("real", "flood"))
    with runner_process(policy_server_curve_keys=str(keys),
                        policy_server_idle_timeout_s=0.3) as (run, runner, address):
        with PolicyClient(address, timeout=10, **curve_client_options(keys, "real")) as real, \
                PolicyClient(address, timeout=10, **curve_client_options(keys, "flood")) as flood:
            for seed in range(3):
                assert play_episode(real, seed=seed)[1]
            reported = reported_episodes(run, runner)
            for call in range(8):  # 320 fake episodes, within the chunk rate, sampled as sent
                fakes = [chunk(64, episode_id=f"f{call}-{i}") for i in range(40)]
                assert flood._call("report_chunks", fakes, 0) == 64 * 40
                reported += reported_episodes(run, runner)
            window = reported[-100:]  # metrics_num_episodes_for_smoothing
            assert sum(e["length"] != 64 for e in window) == 3  # the real client's
            clients = [e["client"] for e in window]
            assert clients.count("real") == 3 and clients.count("flood") == 97  # free room
            for seed in range(3, 5):  # real's new ones take its oldest's places, and then
                assert play_episode(real, seed=seed)[1]  # flood's new ones cannot push
            flood._call("report_chunks", [chunk(64, episode_id=f"h{i}") for i in range(40)], 0)
            reported += reported_episodes(run, runner)  # real's out: flood is over its share
            clients = [e["client"] for e in reported[-100:]]
            assert clients.count("real") == 3 and clients[-2:] == ["real", "real"]
            with pytest.raises(PolicyServerError, match="policy_server_max_chunks_per_s"):
                flood._call("report_chunks", [chunk(2, episode_id=f"g{i}") for i in range(1001)], 0)
        metrics = run(runner.call("metrics"))
        assert metrics["episodes_reported"]["real"] == 5
        assert metrics["episodes_over_share"]["flood"] >= 40 + 320 - 97  # trained on, not reported
        assert metrics["client_rejections"]["flood"] == {"chunks": 1}


def test_one_huge_reward_cannot_end_the_shipped_server_example():
    """A 1-step chunk with reward 1e6 (inside the default policy_server_max_abs_reward)
    ended examples/cartpole_server.yaml at iteration 7: episode_reward_mean 10024.2 >= 450."""
    _, experiment, _ = load_experiment(str(REPO / "examples" / "cartpole_server.yaml"))
    config = {**experiment["config"], "policy_server_idle_timeout_s": 1.0}
    settings = PPOConfig().update_from_dict(config)
    with runner_process(**{k: getattr(settings, k) for k in config if k.startswith(
            "policy_server") and k != "policy_server_address"}) as (run, runner, address):
        with PolicyClient(address, timeout=10) as client:
            with pytest.raises(PolicyServerError, match="policy_server_max_abs_reward"):
                client._call("report_chunks", [chunk(2, rewards=1e6, episode={
                    "return": 2e6, "length": 2})], 0)
            assert play_episode(client)[1]
        episodes = reported_episodes(run, runner)
        assert episodes and max(e["return"] for e in episodes) <= 500
