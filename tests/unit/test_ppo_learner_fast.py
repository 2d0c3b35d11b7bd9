"""The learner's fast paths give what the plain ones give (issue 52): minibatch rows gathered
by numpy (``sgd.take_rows``), GAE's values from the value trunk alone (``model_values``),
and the first layer of a small observation as ``SmallInputLinear``; and a whole PPO update
with all three equals the update without them."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import nn

from rlmesh.algorithms.ppo import PPOConfig, PPOTorchPolicy
from rlmesh.policy.sgd import take_rows
from rlmesh.rl.default_model import ActorCriticMLP, SmallInputLinear, build_model, model_values

OBS = gym.spaces.Box(-np.inf, np.inf, (4,), np.float32)
ACT = gym.spaces.Discrete(2)


def test_take_rows_is_indexing_for_every_dtype_and_copies():
    g = torch.Generator().manual_seed(0)
    train = {"f32": torch.randn(50, 3, generator=g), "f64": torch.randn(50, dtype=torch.float64),
             "i64": torch.arange(50), "b": torch.arange(50) % 3 == 0,
             "i8": torch.arange(50, dtype=torch.int8), "bf16": torch.randn(50, 2).bfloat16(),
             "t": torch.randn(5, 50).t()}  # a strided view
    idx = np.random.default_rng(1).permutation(50)[:17]
    rows = take_rows(train, idx, torch.device("cpu"))
    assert set(rows) == set(train)
    for k, v in train.items():
        want = v[torch.as_tensor(idx)]
        assert rows[k].dtype == v.dtype and torch.equal(rows[k], want), k
    rows["f32"].fill_(7.0)  # a copy: the batch is untouched
    assert not (train["f32"] == 7.0).any()
    grad = torch.randn(50, 2, requires_grad=True)  # torch gathers it, keeping the graph
    assert take_rows({"g": grad}, idx, torch.device("cpu"))["g"].requires_grad
    array = np.arange(50) * 2  # not a tensor: indexed as it is
    assert np.array_equal(take_rows({"a": array}, idx, torch.device("cpu"))["a"], array[idx])


@pytest.mark.parametrize("share", [False, True])
def test_model_values_are_the_forward_pass_values(share):
    torch.manual_seed(0)
    model = build_model(OBS, ACT, {"fcnet_hiddens": [16, 16], "vf_share_layers": share})
    for n in (33, 20000):  # one pass; chunks of CPU_CHUNK_ROWS
        obs = torch.randn(n, 4)
        with torch.no_grad():
            values = model_values(model, obs)
            assert values.shape == (n,) and torch.allclose(values, model(obs)[1], atol=1e-6)


def test_model_values_take_the_forward_pass_of_a_model_that_changes_it():
    class Shifted(ActorCriticMLP):
        def forward(self, obs):
            dist_inputs, value = super().forward(obs)
            return dist_inputs, value + 100.0

    torch.manual_seed(0)
    model = Shifted(OBS, ACT, 2, {"fcnet_hiddens": [8]})
    obs = torch.randn(9000, 4)
    with torch.no_grad():
        assert torch.allclose(model_values(model, obs), model(obs)[1], atol=1e-6)
        assert (model_values(model, obs) > 50).all()


def test_small_input_linear_is_linear_in_values_gradients_and_names():
    model = build_model(OBS, ACT, {"fcnet_hiddens": [32, 32]})
    first = model.pi_trunk[0]
    assert type(first) is SmallInputLinear and type(model.pi_trunk[2]) is nn.Linear
    assert "pi_trunk.0.weight" in model.state_dict() and "vf_trunk.0.bias" in model.state_dict()
    plain = nn.Linear(4, 32)
    plain.load_state_dict(first.state_dict())
    x = torch.randn(300, 4)
    g = torch.randn(300, 32)
    first(x).backward(g)
    plain(x).backward(g)
    assert torch.allclose(first(x), plain(x), atol=1e-6)
    assert torch.allclose(first.weight.grad, plain.weight.grad, rtol=1e-5, atol=1e-4)
    assert torch.allclose(first.bias.grad, plain.bias.grad, rtol=1e-5, atol=1e-4)
    wide = build_model(gym.spaces.Box(-1, 1, (20,), np.float32), ACT, {"fcnet_hiddens": [8]})
    assert type(wide.pi_trunk[0]) is nn.Linear  # many inputs: left as it is


class PlainModel(ActorCriticMLP):
    """The default model without the fast paths: plain first layers, values from forward."""

    def __init__(self, *args):
        super().__init__(*args)
        for trunk in (self.pi_trunk, self.vf_trunk):
            trunk[0].__class__ = nn.Linear

    def values(self, obs):
        return self(obs)[1]


def fragment(t: int = 6, b: int = 40) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    truncated = np.zeros((t, b), bool)
    truncated[2, 3] = True
    return {"obs": rng.normal(size=(t, b, 4)).astype(np.float32),
            "actions": rng.integers(0, 2, (t, b)), "rewards": np.ones((t, b), np.float32),
            "terminateds": rng.random((t, b)) < 0.1, "truncateds": truncated,
            "mask": np.ones((t, b), bool), "action_logp": np.full((t, b), -0.69, np.float32),
            "action_dist_inputs": np.zeros((t, b, 2), np.float32),
            "next_obs": rng.normal(size=(b, 4)).astype(np.float32),
            "trunc_index": np.array([[2, 3]]), "trunc_obs": rng.normal(size=(1, 4)).astype(np.float32)}


def test_a_ppo_update_with_the_fast_paths_equals_the_plain_update():
    cfg = PPOConfig().training(num_epochs=3, minibatch_size=64, entropy_coeff=0.01,
                               model={"fcnet_hiddens": [32, 32]}).debugging(seed=3)
    policies = []
    for plain in (False, True):
        torch.manual_seed(0)
        policy = PPOTorchPolicy(OBS, ACT, cfg)
        if plain:
            weights = policy.model.state_dict()
            policy.model = PlainModel(OBS, ACT, 2, cfg.model)
            policy.model.load_state_dict(weights)
        policies.append(policy.for_learning())
    fast, plain = policies
    assert type(fast.model.pi_trunk[0]) is SmallInputLinear
    assert type(plain.model.pi_trunk[0]) is nn.Linear
    before = {k: v.clone() for k, v in plain.model.state_dict().items()}
    stats = [p.update(fragment(), timesteps=240) for p in policies]
    assert stats[0]["num_grad_updates"] == stats[1]["num_grad_updates"] == 12
    for key in ("total_loss", "vf_loss", "entropy", "mean_kl_loss", "vf_explained_var"):
        assert stats[0][key] == pytest.approx(stats[1][key], rel=1e-4, abs=1e-5), key
    for (k, a), b in zip(fast.model.state_dict().items(), plain.model.state_dict().values()):
        assert not torch.equal(b, before[k]), k  # the update moved every parameter
        assert torch.allclose(a, b, rtol=1e-4, atol=1e-5), k
