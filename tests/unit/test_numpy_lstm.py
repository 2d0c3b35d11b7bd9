"""The local-inference client's numpy LSTM against the learner's torch model: the same
distribution inputs and states, step after step, from the same weights."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from rlmesh.rl import build_model
from rlmesh.rl.numpy_lstm import NumpyLSTMPolicy

BOX_OBS = gym.spaces.Box(-1.0, 1.0, (3, 2), dtype=np.float32)


@pytest.mark.parametrize("obs_space, action_space, extra", [
    (BOX_OBS, gym.spaces.Discrete(3), {"lstm_use_prev_action": True, "lstm_use_prev_reward": True}),
    (gym.spaces.Discrete(4), gym.spaces.Box(-1.0, 1.0, (2,), np.float32), {}),
    (BOX_OBS, gym.spaces.Box(-1.0, 1.0, (2,), np.float32),
     {"lstm_use_prev_action": True, "free_log_std": True, "fcnet_hiddens": [8, 8]}),
    (BOX_OBS, gym.spaces.Discrete(3), {"vf_share_layers": True}),  # one LSTM: state [h, c]
])
def test_steps_equal_the_torch_models(obs_space, action_space, extra):
    config = {"use_lstm": True, "lstm_cell_size": 6, "fcnet_hiddens": [16], **extra}
    torch.manual_seed(0)
    model = build_model(obs_space, action_space, config)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.5 * torch.randn_like(p))
    policy = NumpyLSTMPolicy(obs_space, action_space, config, seed=0)
    assert set(policy.weights) <= set(model.state_dict())
    policy.set_weights({k: v.numpy() for k, v in model.state_dict().items()})
    obs_space.seed(0)
    action_space.seed(0)
    n = 5
    state = [np.repeat(s[None], n, 0) for s in policy.get_initial_state()]
    t_state = [torch.as_tensor(s) for s in state]
    prev_a = np.stack([action_space.sample() for _ in range(n)])
    prev_r = np.linspace(-1, 1, n).astype(np.float32)
    for _ in range(3):  # the state carries from step to step
        obs = np.stack([obs_space.sample() for _ in range(n)])
        inputs, state = policy.recurrent_inputs(obs, state, prev_a, prev_r)
        with torch.no_grad():
            t_inputs, _, t_state = model.forward_seq(
                torch.as_tensor(obs)[:, None], t_state, torch.as_tensor(prev_a)[:, None],
                torch.as_tensor(prev_r)[:, None])
        np.testing.assert_allclose(inputs, t_inputs[:, 0].numpy(), rtol=1e-4, atol=1e-5)
        for s, t in zip(state, t_state):
            np.testing.assert_allclose(s, t.numpy(), rtol=1e-4, atol=1e-5)
        actions, logp, _, _ = policy.step(obs, state, prev_a, prev_r)
        prev_a = actions
