"""External simulators through PolicyClient: PPO learns from the example simulator in both
inference modes; bad calls get errors while other clients carry on; silent clients,
idle servers, threads sharing a client, CURVE, a slim remote client, and `rlmesh serve`."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
from contextlib import contextmanager
from pathlib import Path

import gymnasium as gym
import numpy as np
import psutil
import pytest
import uvloop
import zmq

from rlmesh.algorithms.ppo import PPOConfig
from rlmesh.client import (PolicyClient, PolicyServerError, PolicyServerUnavailable,
                           curve_client_options, make_curve_keys)
from rlmesh.client.keys import default_keys_dir
from rlmesh.runtime import Job
from rlmesh.wire import codec, messages as M

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "cartpole_client.py"
SERVER = "rlmesh.roles.policy_server:PolicyServerRunner"
CARTPOLE = gym.make("CartPole-v1")


def server_config(**env_runners):
    return (PPOConfig()
            .environment(observation_space=CARTPOLE.observation_space,
                         action_space=CARTPOLE.action_space)
            .env_runners(policy_server_address="tcp://127.0.0.1:0", **env_runners)
            .training(train_batch_size=512, minibatch_size=512, num_epochs=10, lr=2e-3,
                      gamma=0.98, lambda_=0.8, vf_clip_param=1e6, grad_clip=0.5,
                      model={"fcnet_hiddens": [64, 64]})
            .debugging(seed=0))


@contextmanager
def runner_process(**env_runners):
    """A PolicyServerRunner in a process of its own (no param server): yields (handle, address)."""
    env_runners = {"policy_server_idle_timeout_s": 1.0, **env_runners}
    config = {**server_config(**env_runners).to_dict(), "_env_registry": {}}
    loop = uvloop.new_event_loop()
    job = loop.run_until_complete(Job("ipc").start())
    try:
        runner = loop.run_until_complete(job.spawn(SERVER, config=config, worker_index=1, param_server=None))
        address = loop.run_until_complete(runner.call("get_address"))
        yield (lambda coro: loop.run_until_complete(coro)), runner, address
    finally:
        loop.run_until_complete(job.shutdown())
        loop.close()


def play_episode(client, env=None, seed=0, steps=None):
    env = env or gym.make("CartPole-v1")
    eid = client.start_episode()
    obs, _ = env.reset(seed=seed)
    for _ in range(steps or 10_000):
        obs, reward, terminated, truncated, _ = env.step(client.get_action(eid, obs))
        client.log_returns(eid, reward)
        if terminated or truncated:
            client.end_episode(eid, obs, truncated=truncated and not terminated)
            return eid, True
    return eid, False


@pytest.mark.parametrize("mode", ["remote", "local"])
def test_ppo_learns_from_the_example_simulator(mode):
    config = server_config(num_env_runners=1, policy_server_idle_timeout_s=5.0)
    with config.build() as algo:
        address = algo.env_runners.foreach_env_runner("get_address")[0]
        sim = subprocess.Popen([sys.executable, str(EXAMPLE), "--address", address,
                                "--inference-mode", mode, "--update-interval", "0.5"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            best, results = -np.inf, []
            for _ in range(80):
                result = algo.train()
                results.append(result)
                best = max(best, result["episode_reward_mean"])
                if best >= 150:
                    break
        finally:
            sim.terminate()
            sim.wait(10)
    assert best >= 150, f"{mode}: best mean return {best} after {results[-1]['timesteps_total']} steps"
    assert not any(r["idle_iteration"] for r in results)
    assert results[-1]["num_env_steps_trained"] == results[-1]["timesteps_total"]


def test_bad_calls_get_errors_while_another_client_carries_on():
    with runner_process() as (run, runner, address):
        good_done = []

        def good_client():
            with PolicyClient(address) as c:
                for seed in range(3):
                    good_done.append(play_episode(c, seed=seed)[1])

        thread = threading.Thread(target=good_client)
        thread.start()
        with PolicyClient(address, timeout=5) as bad:
            eid = bad.start_episode()
            cases = [
                (lambda: bad.get_action("no-such-episode", np.zeros(4)), "unknown episode id"),
                (lambda: bad.get_action(eid, np.zeros(3)), r"shape \(3,\)"),
                (lambda: bad.get_action(eid, "left"), "not numeric"),
                (lambda: bad.get_action(eid, [[1, 2], [3, 4]]), "shape"),
                (lambda: bad.log_action(eid, np.zeros(4, np.float32), 7), "outside the action space"),
                (lambda: bad.log_returns(eid, 1.0), "log_returns before any action"),
                (lambda: bad.start_episode(eid), "already open"),
            ]
            for call, match in cases:
                with pytest.raises(PolicyServerError, match=match):
                    call()
            bad.get_action(eid, np.zeros(4, np.float32))
            for reward in ("a lot", float("nan")):
                with pytest.raises(PolicyServerError, match="reward: (must be|has NaN)"):
                    bad.log_returns(eid, reward)
            bad.log_returns(eid, 1.0)
            bad.end_episode(eid, np.zeros(4, np.float32))
        thread.join(30)
        assert good_done == [True, True, True]
        frag = run(runner.call("sample"))
        metrics = run(runner.call("metrics"))
    assert metrics["episodes_ended"] == 4  # the good client's 3 and the bad client's 1
    assert len(frag["episodes"]) == 4 and frag["env_steps"] == sum(e["length"] for e in frag["episodes"])


def test_wrong_protocol_version_and_garbage_are_refused_and_the_server_lives():
    with runner_process() as (run, runner, address):
        sock = zmq.Context.instance().socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        options = curve_client_options(default_keys_dir())  # tcp servers require CURVE
        sock.curve_serverkey = options["curve_server_key"]
        sock.curve_publickey, sock.curve_secretkey = options["curve_keypair"]
        sock.connect(address)
        sock.send_multipart([b"\x00garbage\xff"])
        sock.send_multipart(codec.encode({"v": 99, "t": "hello", "id": 1}))
        replies = [codec.decode(sock.recv_multipart()) for _ in range(2)
                   if sock.poll(5000)]
        sock.close()
        with PolicyClient(address) as c:
            assert play_episode(c)[1]
    assert replies[0]["etype"] == "ProtocolError"
    assert replies[1]["etype"] == "VersionMismatch"
    assert "99" in replies[1]["msg"] and f"speaks {M.PROTOCOL_VERSION}" in replies[1]["msg"]


def test_a_client_that_disappears_has_its_episode_closed_and_used():
    with runner_process(policy_server_episode_timeout_s=0.5, policy_server_idle_timeout_s=1.0,
                        rollout_fragment_length=1000) as (run, runner, address):
        client = PolicyClient(address)
        play_episode(client, steps=6)  # 6 actions, no end: 5 steps complete
        client.close()  # gone without end_episode
        frag = run(runner.call("sample"))
        metrics = run(runner.call("metrics"))
    assert frag["env_steps"] == 5 and frag["truncateds"][4, 0] and not frag["terminateds"][4, 0]
    assert metrics["episodes_expired"] == 1 and metrics["open_episodes"] == 0
    assert frag["episodes"] == [] or frag["episodes"][0]["length"] == 5


def test_training_without_clients_gives_idle_iterations():
    with server_config(num_env_runners=0, policy_server_idle_timeout_s=0.3).build() as algo:
        result = algo.train()
    assert result["idle_iteration"] and result["timesteps_total"] == 0
    assert result["episodes_this_iter"] == 0 and result["info"]["learner"]["default_policy"] == {}


@pytest.mark.parametrize("mode", ["remote", "local"])
def test_threads_share_one_client_safely_and_close_delivers_everything(mode):
    with runner_process() as (run, runner, address):
        with PolicyClient(address, inference_mode=mode) as client:
            done = []
            threads = [threading.Thread(target=lambda s=s: done.append(play_episode(client, seed=s)[1]))
                       for s in range(4)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(60)
        # Local inference ships its last chunks without waiting; close() collects the reply.
        frag = run(runner.call("sample"))
    assert done == [True] * 4 and len(frag["episodes"]) == 4
    assert frag["env_steps"] == sum(e["length"] for e in frag["episodes"])


@pytest.mark.parametrize("server_spin_us, client_spin_us", [(300.0, 0.0), (0.0, 0.0), (0.0, 500.0)])
def test_spinning_server_or_client_serves_the_same_episodes(server_spin_us, client_spin_us):
    """Polling for the next request (server) or for the reply (client) changes when a
    process sleeps, nothing else: the episodes arrive whole, and the server counts its spins."""
    # Plaintext: CURVE's cost per message is not what this measures.
    with runner_process(policy_server_spin_wait_us=server_spin_us,
                        policy_server_insecure_plaintext=True) as (run, runner, address):
        with PolicyClient(address, spin_wait_us=client_spin_us, insecure_plaintext=True) as client:
            played = [play_episode(client, seed=s)[1] for s in range(3)]
            client_spins = client._spin.spins
        frag = run(runner.call("sample"))
        metrics = run(runner.call("metrics"))
    assert played == [True] * 3 and len(frag["episodes"]) == 3
    assert frag["env_steps"] == sum(e["length"] for e in frag["episodes"])
    if server_spin_us:
        # The setting reached the server, which spins. Whether a request lands inside a
        # 300 us spin depends on this machine's timing (after 4 misses it probes only
        # every 64th wait), so hits are checked in tests/unit/test_spin_wait.py, not here.
        assert metrics["spins"] > 0 and metrics["spin_hits"] <= metrics["spins"]
    else:
        assert metrics["spins"] == 0
    assert (client_spins > 0) == (client_spin_us > 0)
    with pytest.raises(ValueError, match="spin_wait_us must be >= 0"):
        PolicyClient(address, spin_wait_us=-1)


def test_remote_inference_loads_neither_torch_nor_gymnasium():
    with runner_process() as (run, runner, address):
        code = ("import sys, numpy as np\n"
                "from rlmesh.client import PolicyClient\n"
                f"c = PolicyClient({address!r})\n"
                "e = c.start_episode()\n"
                "a = c.get_action(e, np.zeros(4, np.float32)); c.log_returns(e, 1.0)\n"
                "c.end_episode(e, np.zeros(4, np.float32)); c.close()\n"
                "print(a in (0, 1), 'torch' in sys.modules, 'gymnasium' in sys.modules)")
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "False", "False"]


def test_curve_admits_only_clients_with_an_authorized_key(tmp_path):
    keys = make_curve_keys(tmp_path / "keys", clients=("sim",))
    with runner_process(policy_server_curve_keys=str(keys)) as (run, runner, address):
        with PolicyClient(address, **curve_client_options(keys, "sim")) as c:
            assert play_episode(c)[1]
        stranger = {"curve_server_key": curve_client_options(keys, "sim")["curve_server_key"]}
        with pytest.raises(PolicyServerUnavailable):
            PolicyClient(address, timeout=1.0, **stranger)  # a fresh key pair, not admitted
        with pytest.raises(PolicyServerUnavailable):
            PolicyClient(address, timeout=1.0, insecure_plaintext=True)  # no CURVE at all
        with pytest.raises(ValueError, match="make_curve_keys.*insecure_plaintext"):
            PolicyClient(address, timeout=1.0)  # no keys given, none in the default folder


def test_rlmesh_serve_a_checkpoint(tmp_path):
    config = (PPOConfig().environment("CartPole-v1").env_runners(num_env_runners=0)
              .training(train_batch_size=64, minibatch_size=64, num_epochs=1,
                        model={"fcnet_hiddens": [8]}))
    with config.build() as algo:
        algo.train()
        checkpoint = algo.save(tmp_path / "ckpt")
        expected = [algo.compute_single_action(np.array([0.01 * i, 0, 0.02, 0], np.float32))
                    for i in range(5)]
    proc = subprocess.Popen([sys.executable, "-m", "rlmesh.cli.main", "serve", checkpoint,
                             "--address", "tcp://127.0.0.1:0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        line = proc.stdout.readline()
        assert line.startswith("serving "), line + proc.stderr.read()
        address = line.split(" on ")[1].split()[0]
        with PolicyClient(address) as client:
            eid = client.start_episode()
            got = [client.get_action(eid, np.array([0.01 * i, 0, 0.02, 0], np.float32))
                   for i in range(5)]
            client.end_episode(eid, np.zeros(4, np.float32))
        proc.send_signal(signal.SIGINT)
        assert proc.wait(15) == 0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert got == expected  # the checkpoint's policy, deterministic actions
    assert not psutil.pid_exists(proc.pid) or psutil.Process(proc.pid).status() == psutil.STATUS_ZOMBIE
