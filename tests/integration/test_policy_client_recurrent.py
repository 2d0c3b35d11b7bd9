"""Recurrent (use_lstm) policies through PolicyClient and the policy server: each episode
keeps its own LSTM state in both inference modes, so interleaved episodes act as they would
alone (get_action, log_action, rlmesh serve); PPO with use_lstm learns a memory task from
client experience; local inference steps the LSTM without torch; a client's chunk with a
state of the wrong shape is refused by the field's name."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
import uvloop

from rlmesh.algorithms.ppo import PPOConfig
from rlmesh.client import PolicyClient, PolicyServerError
from rlmesh.runtime import Job
from tests.integration.envs_for_tests import RepeatFirstEnv

ROOT = Path(__file__).resolve().parents[2]
SERVER = "rlmesh.roles.policy_server:PolicyServerRunner"
SYMBOLS = 4
ENV = RepeatFirstEnv({"num_symbols": SYMBOLS})
CELL = 16


def lstm_config(**env_runners):
    return (PPOConfig()
            .environment(observation_space=ENV.observation_space, action_space=ENV.action_space)
            .env_runners(policy_server_address="tcp://127.0.0.1:0", **env_runners)
            .training(lr=3e-3, train_batch_size=512, minibatch_size=128, num_epochs=4,
                      gamma=0.9, entropy_coeff=0.01,
                      model={"fcnet_hiddens": [32], "use_lstm": True, "lstm_cell_size": CELL,
                             "max_seq_len": 8, "lstm_use_prev_action": True,
                             "lstm_use_prev_reward": True})
            .debugging(seed=0))


@contextmanager
def lstm_server(**env_runners):
    """A PolicyServerRunner with an LSTM policy in a process of its own: (run, handle, address)."""
    env_runners = {"policy_server_idle_timeout_s": 1.0, "rollout_fragment_length": 200,
                   **env_runners}
    config = {**lstm_config(**env_runners).to_dict(), "_env_registry": {}}
    loop = uvloop.new_event_loop()
    job = loop.run_until_complete(Job("ipc").start())
    try:
        runner = loop.run_until_complete(job.spawn(SERVER, config=config, worker_index=1, param_server=None))
        address = loop.run_until_complete(runner.call("get_address"))
        yield (lambda coro: loop.run_until_complete(coro)), runner, address
    finally:
        loop.run_until_complete(job.shutdown())
        loop.close()


def observations(seed, steps=6):
    rng = np.random.default_rng(seed)
    return rng.random((steps, SYMBOLS + 1)).astype(np.float32)


@pytest.mark.parametrize("mode", ["remote", "local"])
def test_interleaved_episodes_keep_their_own_state(mode):
    """Episode A alone, then A and B in turns on the same client: A's actions, states and
    distribution inputs are the same both times (a state shared between episodes, or a
    previous action/reward taken from the other episode, would change them)."""
    obs_a, obs_b = observations(1), observations(2)
    with lstm_server(explore=False) as (run, runner, address):
        with PolicyClient(address, inference_mode=mode) as client:
            alone = client.start_episode()
            actions_alone = []
            for t, obs in enumerate(obs_a):
                actions_alone.append(client.get_action(alone, obs))
                client.log_returns(alone, 0.5 * t)
            client.end_episode(alone, obs_a[-1])
            a, b = client.start_episode(), client.start_episode()
            actions_a, actions_b = [], []
            for t in range(len(obs_a)):
                actions_a.append(client.get_action(a, obs_a[t]))
                client.log_returns(a, 0.5 * t)
                actions_b.append(client.get_action(b, obs_b[t]))
                client.log_returns(b, -1.0)
            client.end_episode(b, obs_b[-1])
            client.end_episode(a, obs_a[-1])
        frag = run(runner.call("sample"))
    assert actions_a == actions_alone
    assert frag["obs"].shape[:2] == (6, 3) and frag["mask"].all()
    is_a = [i for i in range(3) if np.allclose(frag["obs"][0, i], obs_a[0])]
    (col_b,) = [i for i in range(3) if np.allclose(frag["obs"][0, i], obs_b[0])]
    assert len(is_a) == 2
    recorded = ["state_in_0", "state_in_1", "state_out_0", "state_out_1", "action_dist_inputs",
                "prev_actions", "prev_rewards"]
    for key in recorded:
        np.testing.assert_allclose(frag[key][:, is_a[0]], frag[key][:, is_a[1]], atol=1e-6,
                                   err_msg=key)
    for col in (*is_a, col_b):  # each step reads the state the episode's last step left
        assert not frag["state_in_0"][0, col].any() and not frag["prev_actions"][0, col]
        np.testing.assert_array_equal(frag["state_in_0"][1:, col], frag["state_out_0"][:-1, col])
        np.testing.assert_array_equal(frag["prev_actions"][1:, col], frag["actions"][:-1, col])
        np.testing.assert_array_equal(frag["prev_rewards"][1:, col], frag["rewards"][:-1, col])
    assert frag["state_out_0"].shape[2] == CELL
    # B's own inputs gave B's own states: the state depends on the episode.
    assert not np.allclose(frag["state_out_1"][:, col_b], frag["state_out_1"][:, is_a[0]])


@pytest.mark.parametrize("mode", ["remote", "local"])
def test_logged_actions_advance_the_episodes_state_as_chosen_ones_do(mode):
    """log_action (the simulator chose) with the actions get_action chose in another
    episode of the same observations records the same states, inputs and logp."""
    obs_a = observations(3)
    with lstm_server(explore=False) as (run, runner, address):
        with PolicyClient(address, inference_mode=mode) as client:
            chosen, logged = client.start_episode(), client.start_episode()
            for t, obs in enumerate(obs_a):
                action = client.get_action(chosen, obs)
                client.log_returns(chosen, 1.0)
                client.log_action(logged, obs, action)
                client.log_returns(logged, 1.0)
            client.end_episode(chosen, obs_a[-1])
            client.end_episode(logged, obs_a[-1])
        frag = run(runner.call("sample"))
    assert frag["obs"].shape[:2] == (6, 2) and frag["state_out_0"][1:].any()
    for key in ("state_in_0", "state_in_1", "state_out_0", "state_out_1", "action_dist_inputs",
                "action_logp", "actions", "prev_actions", "prev_rewards"):
        np.testing.assert_allclose(frag[key][:, 0], frag[key][:, 1], atol=1e-5, err_msg=key)


def test_local_inference_of_an_lstm_loads_no_torch():
    with lstm_server() as (run, runner, address):
        code = ("import sys, numpy as np\n"
                "from rlmesh.client import PolicyClient\n"
                f"c = PolicyClient({address!r}, inference_mode='local')\n"
                "e = c.start_episode()\n"
                f"a = [c.get_action(e, np.zeros({SYMBOLS + 1}, np.float32)) for _ in range(3)]\n"
                f"c.end_episode(e, np.zeros({SYMBOLS + 1}, np.float32)); c.close()\n"
                "print(len(a), 'torch' in sys.modules)")
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             timeout=60)
        frag = run(runner.call("sample"))
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["3", "False"]
    assert frag["env_steps"] == 3 and frag["state_out_0"][2, 0].any()


def a_chunk(n=3, **columns):
    chunk = {"obs": np.zeros((n, SYMBOLS + 1), np.float32), "actions": np.zeros(n, np.int64),
             "action_logp": np.full(n, -1.4, np.float32),
             "action_dist_inputs": np.zeros((n, SYMBOLS), np.float32),
             "rewards": np.zeros(n, np.float32), "next_obs": np.zeros(SYMBOLS + 1, np.float32),
             "terminated": True, "truncated": False, "episode": {"return": 0.0, "length": n},
             "episode_id": "sim-1", "prev_actions": np.zeros(n, np.int64), "prev_rewards": np.zeros(n, np.float32)}
    for i in range(4):  # the policy's (h, c), then the critic's
        chunk[f"state_in_{i}"] = chunk[f"state_out_{i}"] = np.zeros((n, CELL), np.float32)
    chunk.update(columns)
    return {k: v for k, v in chunk.items() if v is not None}


def test_a_state_of_the_wrong_shape_is_refused_naming_the_field():
    with lstm_server() as (run, runner, address):
        with PolicyClient(address, timeout=10) as client:
            cases = [(a_chunk(state_in_0=np.zeros((3, CELL + 1), np.float32)),
                      r"^state_in_0: .*expected shape \(3, 16\).*got \(3, 17\)"),
                     (a_chunk(state_out_1=None), r"^state_out_1: chunk lacks column"),
                     (a_chunk(state_in_1=np.full((3, CELL), np.nan, np.float32)),
                      r"^state_in_1: .*NaN"),
                     (a_chunk(prev_actions=np.array([0, 9, 1])), r"^prev_actions: \[9\] outside")]
            for chunk, match in cases:
                with pytest.raises(PolicyServerError) as info:
                    client._call("report_chunks", [chunk], 0)
                message = str(info.value).split(": ", 1)[1]  # after the error type
                assert "\n" not in message and re.search(match, message), message
            assert client._call("report_chunks", [a_chunk()], 0) == 3  # a good one goes in
        metrics = run(runner.call("metrics"))
    (counts,) = metrics["client_rejections"].values()
    assert counts == {"state_in_0": 1, "state_out_1": 1, "state_in_1": 1, "prev_actions": 1}


@pytest.mark.timeout(300)  # remote inference: ~10k round trips of 1-3 ms on a loaded VM
@pytest.mark.parametrize("mode", ["local", "remote"])
def test_ppo_with_lstm_learns_to_remember_from_client_experience(mode):
    """RepeatFirstEnv (recall the first of 4 observations at the last step; chance 0.25)
    played by a simulator process with 8 episodes interleaved on one client."""
    config = lstm_config(num_env_runners=1, policy_server_idle_timeout_s=5.0)
    with config.build() as algo:
        address = algo.env_runners.foreach_env_runner("get_address")[0]
        sim = subprocess.Popen(
            [sys.executable, "-m", "tests.integration.repeat_first_client", "--address", address,
             "--inference-mode", mode], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            env={**os.environ,
                 "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])})
        try:
            means: list[float] = []
            while True:
                result = algo.train()
                means.append(result["episode_reward_mean"])
                assert sim.poll() is None, sim.stderr.read().decode()[-2000:]
                if means[-1] >= 0.9 or result["timesteps_total"] >= 60_000:
                    break
        finally:
            sim.terminate()
            sim.wait(10)
    print(f"\n{mode}: mean return {means[-1]:.2f} after {result['timesteps_total']} steps")
    assert means[-1] >= 0.9, f"{mode}: PPO with use_lstm did not learn from the client: {means}"
    assert result["num_env_steps_trained"] == result["timesteps_total"]


def test_rlmesh_serve_a_recurrent_checkpoint_keeps_each_episodes_state(tmp_path):
    """``rlmesh serve`` of an LSTM checkpoint: two interleaved episodes get the actions
    ``compute_single_action`` gives each with its own state carried."""
    config = (PPOConfig().environment("CartPole-v1").env_runners(num_env_runners=0)
              # A negligible lr keeps the fresh policy head, whose logits the state sways.
              .training(train_batch_size=64, minibatch_size=64, num_epochs=1, lr=1e-9,
                        model={"fcnet_hiddens": [8], "use_lstm": True, "lstm_cell_size": 8}))
    runs = [4 * observations(seed, 8)[:, :4] - 2 for seed in (4, 5)]
    with config.build() as algo:
        algo.train()
        checkpoint = algo.save(tmp_path / "ckpt")
        initial = algo.get_policy().get_initial_state()
        expected, stateless = [], []
        for run_obs in runs:
            state, actions = initial, []
            for obs in run_obs:
                action, state, _ = algo.compute_single_action(obs, state=state, explore=False)
                actions.append(int(action))
            expected.append(actions)
            stateless.append([int(algo.compute_single_action(obs, state=initial, explore=False)[0])
                              for obs in run_obs])
    assert stateless != expected  # the state changes actions here: the test can tell
    proc = subprocess.Popen([sys.executable, "-m", "rlmesh.cli.main", "serve", checkpoint,
                             "--address", "tcp://127.0.0.1:0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        line = proc.stdout.readline()
        assert line.startswith("serving "), line + proc.stderr.read()
        address = line.split(" on ")[1].split()[0]
        with PolicyClient(address) as client:
            ids = [client.start_episode(), client.start_episode()]
            got = [[], []]
            for t in range(8):
                for i in (1, 0):
                    got[i].append(client.get_action(ids[i], runs[i][t]))
        proc.send_signal(signal.SIGINT)
        assert proc.wait(15) == 0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert got == expected
