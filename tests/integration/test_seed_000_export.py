"""Seed 000's acting and export calls on a trained Algorithm, as an RLlib user writes them:
``export_policy_model`` (TorchScript, and ONNX run in onnxruntime) of an LSTM policy played
over an episode against ``compute_single_action`` with its state; ``export_policy_checkpoint``
loaded back; ``compute_action``, ``compute_actions``, ``full_fetch``; the warning a recurrent
policy asked without state gives once; a policy without a torch model refused in one line."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import msgpack
import numpy as np
import pytest
import torch

from rlmesh.algorithms.es import ESConfig
from rlmesh.algorithms.ppo import PPOConfig
from rlmesh.driver.acting import MissingStateWarning
from rlmesh.driver.checkpoints import META
from rlmesh.driver.inference import InferencePolicy
from rlmesh.env.stateless import StatelessCartPole
from rlmesh.policy.policy import PolicyError

onnxruntime = pytest.importorskip("onnxruntime")

TOL = 1e-5


@pytest.fixture(scope="module")
def algo():
    """PPO with a small LSTM on StatelessCartPole after one iteration (sampled in the driver)."""
    config = (PPOConfig().environment("rlmesh.env.stateless:StatelessCartPole")
              .env_runners(num_env_runners=0)
              .training(train_batch_size=128, minibatch_size=64, num_epochs=1,
                        model={"use_lstm": True, "lstm_cell_size": 8, "fcnet_hiddens": [16],
                               "max_seq_len": 8})
              .debugging(seed=1))
    with config.build() as algo:
        algo.train()
        yield algo


def torchscript_step(path: str):
    with warnings.catch_warnings():  # torch's notice that TorchScript is deprecated
        warnings.simplefilter("ignore", DeprecationWarning)
        model = torch.jit.load(path)

    def step(obs: np.ndarray, state: list[np.ndarray]) -> tuple[np.ndarray, list[np.ndarray]]:
        dist_inputs, _, *state_out = model(torch.from_numpy(obs[None]),
                                           *(torch.from_numpy(s[None]) for s in state))
        return dist_inputs[0].numpy(), [s[0].numpy() for s in state_out]
    return step


def onnx_step(path: str):
    session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])

    def step(obs: np.ndarray, state: list[np.ndarray]) -> tuple[np.ndarray, list[np.ndarray]]:
        feeds = {"obs": obs[None], **{f"state_in_{i}": s[None] for i, s in enumerate(state)}}
        dist_inputs, _, *state_out = session.run(None, feeds)
        return dist_inputs[0], [s[0] for s in state_out]
    return step


@pytest.mark.parametrize("fmt", ["torchscript", "onnx"])
def test_exported_lstm_policy_plays_an_episode_as_compute_single_action(algo, tmp_path, fmt):
    path = algo.export_policy_model(str(tmp_path), onnx=17 if fmt == "onnx" else None)
    meta = json.loads((tmp_path / "metadata.json").read_text())
    assert meta["recurrent"] and Path(path).name == ("model.onnx" if fmt == "onnx" else "model.pt")
    step = (onnx_step if fmt == "onnx" else torchscript_step)(path)
    initial = algo.get_policy().get_initial_state()
    live_state, file_state = initial, [np.asarray(s, np.float32) for s in meta["initial_state"]]
    env = StatelessCartPole()
    obs, _ = env.reset(seed=5)
    steps, moved, done = 0, 0.0, False
    while not done:
        action, live_state, extra = algo.compute_single_action(obs, state=live_state, explore=False)
        dist_inputs, file_state = step(np.asarray(obs, np.float32), file_state)
        np.testing.assert_allclose(dist_inputs, extra["action_dist_inputs"], rtol=TOL, atol=TOL)
        for mine, live in zip(file_state, live_state):
            np.testing.assert_allclose(mine, live, rtol=TOL, atol=TOL)
        assert int(np.argmax(dist_inputs)) == action
        fresh, fresh_state = step(np.asarray(obs, np.float32), initial)
        moved = max(moved, *(float(np.abs(x - y).max()) for x, y in
                             zip([fresh, *fresh_state], [dist_inputs, *file_state])))
        obs, _, terminated, truncated, _ = env.step(action)
        steps, done = steps + 1, terminated or truncated
    assert steps >= 8
    # The old export answered as from the initial state: it would be this far off.
    assert moved > 100 * TOL


def test_recurrent_policy_without_state_warns_once_naming_the_fix(algo):
    algo.__dict__.pop("_warned_without_state", None)  # this test's call is the run's first
    obs = np.zeros(2, np.float32)
    with pytest.warns(MissingStateWarning) as caught:
        action = algo.compute_single_action(obs, explore=False)
    assert action in (0, 1)
    (warning,) = caught
    text = str(warning.message)
    assert "\n" not in text and "state=algo.get_policy().get_initial_state()" in text
    assert warning.filename == __file__  # points at the caller's line
    with warnings.catch_warnings():
        warnings.simplefilter("error", MissingStateWarning)
        algo.compute_single_action(obs, explore=False)  # once only
        algo.compute_single_action(obs, state=algo.get_policy().get_initial_state())


def test_full_fetch_compute_action_and_compute_actions(algo):
    policy = algo.get_policy()
    initial = policy.get_initial_state()
    a, b = np.array([0.02, -0.01], np.float32), np.array([-0.03, 0.04], np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MissingStateWarning)
        action, state_out, extra = algo.compute_single_action(a, explore=False, full_fetch=True)
    assert action in (0, 1) and len(state_out) == len(initial) and "action_dist_inputs" in extra
    expected = algo.compute_single_action(b, state=initial, explore=False)
    # The Trainer-era name, in its own argument order.
    got = algo.compute_action(b, initial, None, None, explore=False)
    assert got[0] == expected[0]
    np.testing.assert_allclose(got[1][0], expected[1][0])
    # A dict of observations; a key without a state starts from the initial one.
    moved = expected[1]
    actions, states, fetches = algo.compute_actions({"x": a, "y": b}, state={"x": moved},
                                                    explore=False)
    assert set(actions) == set(states) == {"x", "y"} and actions["y"] == expected[0]
    np.testing.assert_allclose(states["y"][1], expected[1][1])
    np.testing.assert_allclose(fetches["action_dist_inputs"][1], expected[2]["action_dist_inputs"])
    after_moved = algo.compute_single_action(a, state=moved, explore=False)
    np.testing.assert_allclose(fetches["action_dist_inputs"][0], after_moved[2]["action_dist_inputs"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MissingStateWarning)
        assert set(algo.compute_actions({"x": a}, explore=False)) == {"x"}  # actions alone
    with pytest.raises(TypeError, match=r"^compute_actions takes a dict .*compute_single_action"):
        algo.compute_actions([a, b])


def test_export_policy_checkpoint_loads_back_and_acts_the_same(algo, tmp_path):
    path = algo.export_policy_checkpoint(str(tmp_path / "policy_ckpt"))
    meta = msgpack.unpackb((Path(path) / META).read_bytes())
    assert list(meta["policies"]) == ["default_policy"]
    restored = InferencePolicy.from_checkpoint(path)
    initial = restored.get_policy().get_initial_state()
    obs = np.array([0.05, -0.02], np.float32)
    mine = restored.compute_single_action(obs, state=initial, explore=False)
    live = algo.compute_single_action(obs, state=initial, explore=False)
    assert mine[0] == live[0]
    np.testing.assert_allclose(mine[2]["action_dist_inputs"], live[2]["action_dist_inputs"],
                               rtol=TOL, atol=TOL)
    with pytest.raises(KeyError, match="no policy 'other'"):
        algo.export_policy_checkpoint(str(tmp_path / "other"), policy_id="other")


def test_a_policy_without_a_torch_model_is_refused_in_one_line(tmp_path):
    config = (ESConfig().environment("CartPole-v1").env_runners(num_env_runners=0)
              .training(model={"fcnet_hiddens": [8]}, noise_size=10_000))
    with config.build() as algo:
        with pytest.raises(PolicyError) as error:
            algo.export_policy_model(str(tmp_path / "es"))
        text = str(error.value)
        assert "\n" not in text and "ESPolicy" in text and "export_policy_checkpoint" in text
        assert not (tmp_path / "es").exists()
        # What the line names instead works: the policy's weights load back.
        path = algo.export_policy_checkpoint(str(tmp_path / "es_ckpt"))
        restored = InferencePolicy.from_checkpoint(path).get_policy()
        for name, value in algo.get_policy().get_weights().items():
            np.testing.assert_array_equal(restored.get_weights()[name], value)


def test_a_filtered_run_records_its_filter_beside_the_exported_model(tmp_path):
    """With MeanStdFilter the model never sees raw observations: metadata.json carries the
    statistics, and the exported file fed observations normalised by them acts as the run."""
    config = (PPOConfig().environment("CartPole-v1")
              .env_runners(num_env_runners=0, observation_filter="MeanStdFilter")
              .training(train_batch_size=128, minibatch_size=64, num_epochs=1,
                        model={"fcnet_hiddens": [16]}))
    with config.build() as algo:
        algo.train()
        session = onnxruntime.InferenceSession(algo.export_policy_model(str(tmp_path), onnx=17),
                                               providers=["CPUExecutionProvider"])
        meta = json.loads((tmp_path / "metadata.json").read_text())
        filt = meta["observation_filter"]
        assert filt["name"] == "MeanStdFilter" and "mean" in filt["apply"]
        obs = np.random.default_rng(0).normal(0, 0.5, (6, 4)).astype(np.float32)
        normalised = np.clip((obs - np.asarray(filt["mean"])) / (np.asarray(filt["std"]) + 1e-8),
                             -10, 10).astype(np.float32)
        dist_inputs, _ = session.run(None, {"obs": normalised})
        live = [algo.compute_single_action(o, explore=False, full_fetch=True)[2] for o in obs]
        np.testing.assert_allclose(dist_inputs, [x["action_dist_inputs"] for x in live],
                                   rtol=TOL, atol=TOL)
        raw, _ = session.run(None, {"obs": obs})  # what a user without the statistics gets
        assert np.abs(raw - dist_inputs).max() > 100 * TOL
