"""The optimizer group (config/optimizer.py): opt_type and RMSProp's decay, epsilon and
momentum, declared once and read by IMPALA, APPO, A2C and A3C, whose learners build the
optimizer it names (rl/optim.py ``from_config``)."""

from __future__ import annotations

import gymnasium as gym
import pytest
import torch

from rlmesh.algorithms.a2c import A2CConfig, A2CTorchPolicy
from rlmesh.algorithms.a3c import A3CConfig, A3CTorchPolicy
from rlmesh.algorithms.appo_config import APPOConfig
from rlmesh.algorithms.impala_config import ImpalaConfig
from rlmesh.config.base import ConfigError
from rlmesh.rl.optim import Adam, RMSprop
from tests.unit.test_config_streaming import declarations

SHARED = ("opt_type", "decay", "momentum", "epsilon")
USERS = (ImpalaConfig, APPOConfig, A2CConfig, A3CConfig)
CARTPOLE = gym.make("CartPole-v1")


def test_each_optimizer_setting_is_declared_once_for_every_algorithm_that_reads_it():
    for name in SHARED:
        assert declarations(name) == ["config/optimizer.py"], name
        for config in USERS:
            assert name in config().to_dict(), (name, config.__name__)
    # RLlib's defaults: Adam; RMSProp's decay 0.99, epsilon 0.1, no momentum.
    assert all(c().opt_type == "adam" and c().epsilon == 0.1 for c in USERS)


@pytest.mark.parametrize("config_class, policy_class",
                         [(A2CConfig, A2CTorchPolicy), (A3CConfig, A3CTorchPolicy)])
def test_opt_type_rmsprop_builds_rmsprop_with_the_given_settings(config_class, policy_class):
    config = config_class().training(opt_type="rmsprop", decay=0.95, epsilon=1e-5,
                                     momentum=0.5, lr=3e-3, model={"fcnet_hiddens": [8]})
    policy = policy_class(CARTPOLE.observation_space, CARTPOLE.action_space, config)
    optimizer = policy.for_learning().optimizer
    assert isinstance(optimizer, RMSprop)
    group = optimizer.param_groups[0]
    assert (group["lr"], group["alpha"], group["eps"], group["momentum"]) == (3e-3, 0.95, 1e-5, 0.5)
    # It steps as torch's RMSprop with those settings would.
    reference = [p.detach().clone().requires_grad_() for p in policy.model.parameters()]
    torch_opt = torch.optim.RMSprop(reference, lr=3e-3, alpha=0.95, eps=1e-5, momentum=0.5)
    torch.manual_seed(0)
    for _ in range(3):
        grads = [torch.randn_like(p) for p in reference]
        for p, q, g in zip(policy.model.parameters(), reference, grads):
            p.grad, q.grad = g.clone(), g.clone()
        optimizer.step()
        torch_opt.step()
    for p, q in zip(policy.model.parameters(), reference):
        torch.testing.assert_close(p.detach(), q.detach())


def test_a2c_keeps_adam_by_default():
    policy = A2CTorchPolicy(CARTPOLE.observation_space, CARTPOLE.action_space, A2CConfig())
    assert isinstance(policy.for_learning().optimizer, Adam)


def test_an_unknown_opt_type_is_a_one_line_config_error():
    with pytest.raises(ConfigError) as err:
        A2CConfig().environment("CartPole-v1").training(opt_type="sgd").validate()
    lines = [line.strip() for line in str(err.value).splitlines()]
    assert "opt_type: expected 'adam' or 'rmsprop', got 'sgd'" in lines
    assert sum("opt_type" in line for line in lines) == 1
