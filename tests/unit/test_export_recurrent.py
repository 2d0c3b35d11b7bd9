"""A recurrent policy exported (TorchScript, ONNX in onnxruntime) carries its state: the
``state_in_i`` it is fed are inputs, the ``state_out_i`` it moves to are outputs, and the file
answers as the live PPO policy does step for step over an episode of a memory env, its state
carried from its own outputs; from a state other than the initial one too."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any, Callable

import gymnasium as gym
import numpy as np
import pytest
import torch

from rlmesh.algorithms.ppo import PPOConfig, PPOTorchPolicy
from rlmesh.env.stateless import StatelessCartPole, StatelessPendulum
from rlmesh.policy.export import export_model
from rlmesh.rl.default_model import build_model

onnxruntime = pytest.importorskip("onnxruntime")

TOL = 1e-5
LSTM = {"use_lstm": True, "lstm_cell_size": 8, "fcnet_hiddens": [16]}
CASES = {  # env, env_config, model: four states (a critic LSTM of its own); prev action/reward
    "cartpole": (StatelessCartPole, {}, LSTM),
    "pendulum_prev": (StatelessPendulum, {"max_episode_steps": 25},
                      {**LSTM, "vf_share_layers": True, "lstm_use_prev_action": True,
                       "lstm_use_prev_reward": True}),
}
Run = Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]]


def torchscript_runner(path: Path, meta: dict) -> Run:
    with warnings.catch_warnings():  # torch's notice that TorchScript is deprecated
        warnings.simplefilter("ignore", DeprecationWarning)
        model = torch.jit.load(str(path))

    def run(feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        out = model(*(torch.from_numpy(feeds[name]) for name in meta["inputs"]))
        return {name: t.numpy() for name, t in zip(meta["outputs"], out)}
    return run


def onnx_runner(path: Path, meta: dict) -> Run:
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]

    def run(feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return dict(zip(names, session.run(names, feeds)))
    return run


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """case -> (policy, env, metadata, {format: runner}); each policy a tiny PPO LSTM."""
    out = {}
    for case, (env_cls, env_config, model) in CASES.items():
        env = env_cls(env_config)
        torch.manual_seed(0)
        policy = PPOTorchPolicy(env.observation_space, env.action_space,
                                PPOConfig().training(model=model))
        runners = {}
        for fmt, opset, make in (("torchscript", None, torchscript_runner), ("onnx", 17, onnx_runner)):
            path = Path(policy.export_model(str(tmp_path_factory.mktemp(f"{case}-{fmt}")), onnx=opset))
            meta = json.loads((path.parent / "metadata.json").read_text())
            runners[fmt] = make(path, meta)
        out[case] = policy, env, meta, runners
    return out


def play(policy: PPOTorchPolicy, env: gym.Env, meta: dict, run: Run) -> tuple[int, float]:
    """One episode acting with the live policy, the exported step run beside it on its own
    state; asserts they agree at every step. Returns the steps and how far the carried state
    moved the exported outputs from those the initial state gives."""
    initial = [np.asarray(s, np.float32) for s in meta["initial_state"]]
    live_state, file_state = list(initial), list(initial)
    zero_action = np.zeros(policy.action_space.shape, policy.action_dtype)
    prev_action, prev_reward = zero_action, np.float32(0.0)  # as runners start an episode
    obs, _ = env.reset(seed=3)
    steps, moved = 0, 0.0
    while True:
        action, live_state, extra = policy.compute_single_action(
            obs, live_state, prev_action, prev_reward, explore=False)
        feeds = {"obs": np.asarray(obs, np.float32)[None],
                 **{f"state_in_{i}": s[None] for i, s in enumerate(file_state)}}
        if "prev_actions" in meta["inputs"]:
            feeds["prev_actions"] = np.asarray(prev_action, policy.action_dtype)[None]
        if "prev_rewards" in meta["inputs"]:
            feeds["prev_rewards"] = np.asarray([prev_reward], np.float32)
        got = run(feeds)
        np.testing.assert_allclose(got["dist_inputs"][0], extra["action_dist_inputs"], rtol=TOL, atol=TOL)
        file_state = [got[f"state_out_{i}"][0] for i in range(len(initial))]
        for mine, live in zip(file_state, live_state):
            np.testing.assert_allclose(mine, live, rtol=TOL, atol=TOL)
        if isinstance(policy.action_space, gym.spaces.Discrete):
            assert int(np.argmax(got["dist_inputs"][0])) == int(action)
        else:  # the Gaussian's mean, the first half of the inputs
            np.testing.assert_allclose(got["dist_inputs"][0][:action.size], action, rtol=TOL, atol=TOL)
        fresh = run({**feeds, **{f"state_in_{i}": s[None] for i, s in enumerate(initial)}})
        moved = max(moved, *(float(np.abs(fresh[k] - got[k]).max()) for k in got))
        prev_action, obs, prev_reward, terminated, truncated, _ = (action, *env.step(action))
        steps += 1
        if terminated or truncated:
            return steps, moved


@pytest.mark.parametrize("fmt", ["torchscript", "onnx"])
@pytest.mark.parametrize("case", list(CASES))
def test_exported_lstm_plays_an_episode_as_the_live_policy(exported, case, fmt):
    policy, env, meta, runners = exported[case]
    steps, moved = play(policy, env, meta, runners[fmt])
    assert steps >= 8
    # An export that answered from the initial state (as before) would be off by this much.
    assert moved > 100 * TOL


@pytest.mark.parametrize("fmt", ["torchscript", "onnx"])
def test_a_state_other_than_the_initial_one_changes_the_answer(exported, fmt):
    """Five envs at once (the graph was traced on three), each from a random state: the
    answer follows the state, and is the live policy's for that state."""
    policy, env, meta, runners = exported["cartpole"]
    rng = np.random.default_rng(7)
    obs = rng.uniform(-0.2, 0.2, (5, *env.observation_space.shape)).astype(np.float32)
    states = [rng.normal(size=(5, *np.shape(s))).astype(np.float32) for s in meta["initial_state"]]
    zeros = {f"state_in_{i}": np.zeros_like(s) for i, s in enumerate(states)}
    got = runners[fmt]({"obs": obs, **{f"state_in_{i}": s for i, s in enumerate(states)}})
    fresh = runners[fmt]({"obs": obs, **zeros})
    assert np.abs(got["dist_inputs"] - fresh["dist_inputs"]).max() > 100 * TOL
    assert np.abs(got["state_out_0"] - fresh["state_out_0"]).max() > 1e-2
    _, live_states, extra = policy.compute_actions(obs, states, explore=False)
    np.testing.assert_allclose(got["dist_inputs"], extra["action_dist_inputs"], rtol=TOL, atol=TOL)
    for i, live in enumerate(live_states):
        np.testing.assert_allclose(got[f"state_out_{i}"], live, rtol=TOL, atol=TOL)


def test_metadata_and_onnx_graph_name_the_state(exported, tmp_path):
    onnx = pytest.importorskip("onnx")
    _, _, meta, _ = exported["pendulum_prev"]
    assert meta["recurrent"] is True
    assert list(meta["inputs"]) == ["obs", "state_in_0", "state_in_1", "prev_actions", "prev_rewards"]
    assert list(meta["outputs"]) == ["dist_inputs", "value", "state_out_0", "state_out_1"]
    assert meta["initial_state"] == [[0.0] * 8, [0.0] * 8]
    # A model without state keeps the one input it had.
    space = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
    path = export_model(build_model(space, gym.spaces.Discrete(2), {"fcnet_hiddens": [8]}),
                        space, tmp_path, onnx=17)
    graph = onnx.load(str(path)).graph
    assert [i.name for i in graph.input] == ["obs"]
    assert [o.name for o in graph.output] == ["dist_inputs", "value"]
    assert json.loads((tmp_path / "metadata.json").read_text())["recurrent"] is False
