"""DQN's and SAC's RLModules (RLlib's new stack): RLlib's import paths, the default classes
folding into today's networks (numpy runners included), a user's Q module as DQN's Q network
and a user's SAC module as SAC's actor and critics (their contracts, the losses, the targets)
and each bad module as one line.
Real policies and gymnasium spaces; the run is tests/integration/test_rl_module_dqn.py."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import nn

from rlmesh.algorithms.dqn import DQNConfig, DQNTorchPolicy, QModel
from rlmesh.algorithms.dqn.torch.default_dqn_torch_rl_module import (QF_PREDS,
                                                                     DefaultDQNTorchRLModule)
from rlmesh.algorithms.dqn.torch.dqn_rainbow_torch_rl_module import DQNRainbowTorchRLModule
from rlmesh.algorithms.sac import SACConfig, SACTorchPolicy
from rlmesh.algorithms.sac.torch.default_sac_torch_rl_module import DefaultSACTorchRLModule
from rlmesh.config.settings import ConfigError
from rlmesh.core.columns import Columns
from rlmesh.core.rl_module.rl_module import RLModule, RLModuleSpec
from rlmesh.core.rl_module.torch import TorchRLModule
from rlmesh.policy.q_module_model import QModuleModel
from rlmesh.policy.sac_module_model import SACModuleModel

OBS = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
ACT = gym.spaces.Discrete(2)
BOX_ACT = gym.spaces.Box(-2.0, 2.0, (1,), np.float32)


class LinearQ(TorchRLModule):
    """QNetAPI: Q-values from one linear layer."""

    def setup(self):
        self.q = nn.Linear(4, 2)

    def compute_q_values(self, batch):
        return {QF_PREDS: self.q(batch[Columns.OBS])}

    def _forward(self, batch, **kwargs):
        return self.compute_q_values(batch)


class TrainOnlyQ(TorchRLModule):
    """No compute_q_values: its Q-values are _forward_train's qf_preds."""

    def setup(self):
        self.q = nn.Linear(4, 2)

    def _forward_train(self, batch, **kwargs):
        return {QF_PREDS: self.q(batch[Columns.OBS]) + 100.0}


class WideDefault(DefaultDQNTorchRLModule):
    """A subclass of the default keeping its passes."""


class NoQ(TorchRLModule):
    def setup(self):
        self.q = nn.Linear(4, 2)

    def compute_q_values(self, batch):
        return {"q": self.q(batch[Columns.OBS])}


class WrongWidthQ(TorchRLModule):
    def setup(self):
        self.q = nn.Linear(4, 3)

    def _forward(self, batch, **kwargs):
        return {QF_PREDS: self.q(batch[Columns.OBS])}


class NotADict(TorchRLModule):
    def setup(self):
        self.q = nn.Linear(4, 2)

    def compute_q_values(self, batch):
        return self.q(batch[Columns.OBS])


def dqn(spec=None, **training) -> DQNConfig:
    config = DQNConfig().environment("CartPole-v1").training(**training)
    return config if spec is None else config.rl_module(rl_module_spec=spec)


def dqn_policy(spec, **training) -> DQNTorchPolicy:
    return DQNTorchPolicy(OBS, ACT, dqn(spec, **training))


# --- RLlib's import paths ---

def test_rllibs_import_paths_name_the_default_modules():
    from rlmesh.algorithms.dqn.torch import DefaultDQNTorchRLModule as via_package
    from rlmesh.algorithms.sac.torch.sac_torch_rl_module import SACTorchRLModule
    from rlmesh.models import default_modules

    assert via_package is DefaultDQNTorchRLModule is DQNRainbowTorchRLModule
    assert DefaultDQNTorchRLModule is default_modules.DefaultDQNTorchRLModule
    assert SACTorchRLModule is DefaultSACTorchRLModule is default_modules.DefaultSACTorchRLModule
    # the algorithm packages still export what they did as modules
    assert DQNConfig.algorithm_path == "rlmesh.algorithms.dqn.dqn:DQN"
    assert SACConfig.algorithm_path == "rlmesh.algorithms.sac.sac:SAC"
    from rlmesh.runtime.import_path import import_object

    assert import_object(DQNConfig.algorithm_path).__name__ == "DQN"
    assert import_object(SACConfig.algorithm_path).__name__ == "SAC"
    # checkpoints written before the move name the classes by the package
    assert import_object("rlmesh.algorithms.dqn:DQNTorchPolicy") is DQNTorchPolicy
    assert import_object("rlmesh.algorithms.sac:SACTorchPolicy") is SACTorchPolicy


# --- the default classes are today's networks ---

@pytest.mark.parametrize("module_class", [
    DefaultDQNTorchRLModule,
    "rlmesh.algorithms.dqn.torch.default_dqn_torch_rl_module:DefaultDQNTorchRLModule",
    DQNRainbowTorchRLModule])
def test_the_default_dqn_module_is_dqns_own_network(module_class):
    config = dqn(RLModuleSpec(module_class=module_class, model_config={"fcnet_hiddens": [16]}))
    assert config.module_spec is None and config.model["fcnet_hiddens"] == [16]
    p = DQNTorchPolicy(OBS, ACT, config)
    assert type(p.model) is QModel and p.model.trunk[0].out_features == 16
    assert DQNTorchPolicy.runner_class(config, OBS, ACT).endswith("NumpyQPolicy")


def test_the_default_dqn_module_computes_what_qmodel_does():
    settings = dict(hiddens=[8], dueling=True, num_atoms=1)
    config = dqn(**settings)
    p = DQNTorchPolicy(OBS, ACT, config)
    module = RLModuleSpec(module_class=DefaultDQNTorchRLModule, observation_space=OBS,
                          action_space=ACT, model_config={**config.model, **settings}).build()
    module.qf.load_state_dict(p.model.state_dict())  # the same layers, the same names
    obs = torch.as_tensor(np.stack([OBS.sample() for _ in range(5)]))
    q = module.compute_q_values({Columns.OBS: obs})[QF_PREDS]
    assert torch.allclose(q, p.model.q_values(obs))
    acted = module.forward_inference({Columns.OBS: obs})
    assert torch.equal(acted[Columns.ACTIONS], q.argmax(-1))
    # TargetNetworkAPI: a frozen copy that follows only when told
    module.make_target_networks()
    (online, target), = module.get_target_network_pairs()
    assert online is module.qf and not any(t.requires_grad for t in target.parameters())
    assert torch.allclose(module.forward_target({Columns.OBS: obs})[QF_PREDS], q)


def test_the_default_dqn_module_gives_the_return_distribution_with_atoms():
    module = RLModuleSpec(module_class=DefaultDQNTorchRLModule, observation_space=OBS,
                          action_space=ACT,
                          model_config={"num_atoms": 5, "v_min": -1.0, "v_max": 1.0}).build()
    obs = torch.zeros(3, 4)
    dist = module.compute_advantage_distribution({Columns.OBS: obs})
    assert dist["qf_logits"].shape == (3, 2, 5) and dist["atoms"].tolist() == [-1, -0.5, 0, 0.5, 1]
    assert torch.allclose(dist["qf_probs"].sum(-1), torch.ones(3, 2))
    q = module.forward_train({Columns.OBS: obs})[QF_PREDS]
    assert torch.allclose(q, (dist["qf_probs"] * dist["atoms"]).sum(-1), atol=1e-6)


@pytest.mark.parametrize("action_space", [BOX_ACT, ACT])
def test_the_default_sac_module_is_sacs_own_networks(action_space):
    config = (SACConfig().environment("Pendulum-v1")
              .training(q_model_config={"fcnet_hiddens": [8]})
              .rl_module(rl_module_spec=RLModuleSpec(module_class=DefaultSACTorchRLModule)))
    assert config.module_spec is None
    p = SACTorchPolicy(OBS, action_space, config)
    assert set(p.model.keys()) == {"actor", "q"}
    assert SACTorchPolicy.runner_class(config, OBS, action_space).endswith("NumpySACPolicy")
    # The module built from the same settings holds the same layers under pi / qf.
    module = RLModuleSpec(module_class=DefaultSACTorchRLModule, observation_space=OBS,
                          action_space=action_space,
                          model_config={"q_model_config": {"fcnet_hiddens": [8]}}).build()
    module.pi.load_state_dict(p.model["actor"].state_dict())
    module.qf.load_state_dict(p.model["q"].state_dict())
    obs = torch.as_tensor(np.stack([OBS.sample() for _ in range(3)]))
    dist_inputs = module.forward_exploration({Columns.OBS: obs})[Columns.ACTION_DIST_INPUTS]
    assert torch.allclose(dist_inputs, p.model["actor"](obs))
    actions = torch.zeros(3, 1) if action_space is BOX_ACT else None
    out = module.compute_q_values({Columns.OBS: obs, Columns.ACTIONS: actions})
    q1, q2 = p.model["q"](obs, actions)
    assert torch.allclose(out["qf_preds"], q1) and torch.allclose(out["qf_twin_preds"], q2)


class MySAC(DefaultSACTorchRLModule):
    """A subclass of SAC's default: not folded into SAC's own networks, it runs as a module."""


class LinearSAC(TorchRLModule):
    """An actor and one critic of its own (Box actions of one dim)."""

    def setup(self):
        self.pi = nn.Linear(4, 2)
        self.qf = nn.Linear(5, 1)

    def _forward(self, batch, **kwargs):
        return {Columns.ACTION_DIST_INPUTS: self.pi(batch[Columns.OBS])}

    def compute_q_values(self, batch):
        x = torch.cat([batch[Columns.OBS], batch[Columns.ACTIONS]], -1)
        return {QF_PREDS: self.qf(x).squeeze(-1)}


class SharedTrunkSAC(LinearSAC):
    def compute_q_values(self, batch):
        out = super().compute_q_values(batch)
        return {QF_PREDS: out[QF_PREDS] + self.pi(batch[Columns.OBS])[:, 0]}


class NoCriticSAC(TorchRLModule):
    def setup(self):
        self.pi = nn.Linear(4, 2)

    def _forward(self, batch, **kwargs):
        return {Columns.ACTION_DIST_INPUTS: self.pi(batch[Columns.OBS])}


class WideActorSAC(LinearSAC):
    def setup(self):
        super().setup()
        self.pi = nn.Linear(4, 3)


def sac_config(spec=None, **training):
    net = {"fcnet_hiddens": [16, 16]}
    config = SACConfig().environment("Pendulum-v1").training(
        q_model_config=net, policy_model_config=net, train_batch_size=8, **training)
    return config if spec is None else config.rl_module(rl_module_spec=spec)


def sac_batch(discrete, n=8):
    rng = np.random.default_rng(0)
    return {"obs": torch.as_tensor(rng.uniform(-1, 1, (n, 4)), dtype=torch.float32),
            "next_obs": torch.as_tensor(rng.uniform(-1, 1, (n, 4)), dtype=torch.float32),
            "actions": (torch.as_tensor(rng.integers(0, 2, n)) if discrete
                        else torch.as_tensor(rng.uniform(-1, 1, (n, 1)), dtype=torch.float32)),
            "rewards": torch.ones(n), "discounts": torch.full((n,), 0.99)}


@pytest.mark.parametrize("action_space", [BOX_ACT, ACT])
def test_a_sac_module_trains_as_sacs_own_networks_with_the_same_weights(action_space):
    own = SACTorchPolicy(OBS, action_space, sac_config()).for_learning()
    config = sac_config(RLModuleSpec(module_class=MySAC))
    assert SACTorchPolicy.runner_class(config, OBS, action_space).endswith(":SACTorchPolicy")
    p = SACTorchPolicy(OBS, action_space, config).for_learning()
    assert isinstance(p.model, SACModuleModel)
    assert all(k == "log_alpha" or k.startswith("module.") for k in p.model.state_dict())
    p.model.module.pi.load_state_dict(own.model["actor"].state_dict())
    p.model.module.qf.load_state_dict(own.model["q"].state_dict())
    p.target_model.module.qf.load_state_dict(own.target_model.state_dict())
    mb = sac_batch(action_space is ACT)
    torch.manual_seed(1)
    own_loss, own_stats = own.loss(mb)
    torch.manual_seed(1)
    loss, stats = p.loss(mb)
    assert torch.allclose(loss, own_loss, atol=1e-5)
    for key in ("critic_loss", "actor_loss", "alpha_loss"):
        assert torch.allclose(stats[key], own_stats[key], atol=1e-5), key
    # one optimizer each: the actor's parameters and the critics' apart
    actor, critic = (set(map(id, p.model[k].parameters())) for k in ("actor", "q"))
    assert actor and critic and not actor & critic
    assert {id(q) for q in p.q_params} == critic


def test_a_sac_modules_target_critics_follow_and_its_actor_is_no_target():
    p = SACTorchPolicy(OBS, BOX_ACT, sac_config(RLModuleSpec(module_class=LinearSAC))).for_learning()
    with torch.no_grad():
        p.model.module.qf.weight.add_(1.0)
        p.model.module.pi.weight.add_(1.0)
    target_pi = p.target_model.module.pi.weight.clone()
    before = p.target_model.module.qf.weight.clone()
    p.update_target(0.5)
    online = p.model.module.qf.weight
    assert torch.allclose(p.target_model.module.qf.weight, (before + online) / 2)
    assert torch.equal(p.target_model.module.pi.weight, target_pi)
    # a single critic: no qf_twin_preds, the min is that critic
    obs, actions = torch.zeros(3, 4), torch.zeros(3, 1)
    assert torch.equal(p.model["q"].min(obs, actions), p.model["q"](obs, actions)[0])
    # the runners' weights are the module's (they act with it in torch)
    assert set(p.get_weights()) == {"module.pi.weight", "module.pi.bias", "module.qf.weight",
                                    "module.qf.bias", "_timestep"}


@pytest.mark.parametrize("module_class, words", [
    (SharedTrunkSAC, "SharedTrunkSAC: SAC steps the actor and the critics with separate "
                     "optimizers, but both read ['pi.bias', 'pi.weight']"),
    (NoCriticSAC, "NoCriticSAC has no compute_q_values(batch)"),
    (WideActorSAC, "WideActorSAC._forward_exploration: for 2 observations "
                   "'action_dist_inputs' must have shape (2, 2)"),
])
def test_a_sac_module_missing_what_sac_needs_is_one_line(module_class, words):
    with pytest.raises((TypeError, ValueError)) as err:
        SACTorchPolicy(OBS, BOX_ACT, sac_config(RLModuleSpec(module_class=module_class)))
    assert words in str(err.value) and "\n" not in str(err.value)


def test_cql_refuses_a_module_in_one_line():
    from rlmesh.algorithms.cql import CQLTorchPolicy
    from rlmesh.algorithms.cql_config import CQLConfig

    config = CQLConfig().environment("Pendulum-v1").rl_module(
        rl_module_spec=RLModuleSpec(module_class=MySAC))
    with pytest.raises(ConfigError) as err:
        CQLTorchPolicy(OBS, BOX_ACT, config)
    message = str(err.value)
    assert "CQLTorchPolicy builds networks beyond SAC's" in message and "\n" not in message


# --- a user's Q module ---

@pytest.mark.parametrize("module_class", [LinearQ, TrainOnlyQ, WideDefault])
def test_a_users_q_module_is_dqns_q_network_and_acts_in_torch(module_class):
    config = dqn(RLModuleSpec(module_class=module_class), hiddens=[8])
    p = DQNTorchPolicy(OBS, ACT, config)
    assert isinstance(p.model, QModuleModel) and type(p.model.module) is module_class
    assert DQNTorchPolicy.runner_class(config, OBS, ACT).endswith(":DQNTorchPolicy")
    obs = torch.as_tensor(np.stack([OBS.sample() for _ in range(6)]))
    q = p.model.q_values(obs)
    if module_class is TrainOnlyQ:
        assert torch.allclose(q, p.model.module.q(obs) + 100.0)
    elif module_class is WideDefault:  # DQN's settings reach the module's model_config
        assert p.model.module.qf.a_branch[0].out_features == 8
    greedy = p.compute_actions(obs.numpy(), explore=False)[0]
    assert np.array_equal(greedy, q.argmax(-1).numpy())


def test_a_users_q_module_learns_through_dqns_loss_and_target():
    p = dqn_policy(RLModuleSpec(module_class=LinearQ), train_batch_size=8).for_learning()
    assert isinstance(p.target_model, QModuleModel)
    rng = np.random.default_rng(0)
    mb = {"obs": torch.as_tensor(rng.uniform(-1, 1, (8, 4)), dtype=torch.float32),
          "next_obs": torch.as_tensor(rng.uniform(-1, 1, (8, 4)), dtype=torch.float32),
          "actions": torch.as_tensor(rng.integers(0, 2, 8)),
          "rewards": torch.ones(8), "discounts": torch.full((8,), 0.99),
          "weights": torch.ones(8)}
    before = p.model.module.q.weight.detach().clone()
    loss, stats = p.loss(mb)
    loss.backward()
    grad = p.model.module.q.weight.grad
    assert grad is not None and grad.abs().sum() > 0
    assert stats["td_error"].shape == (8,)
    p.optimizer.step()
    assert not torch.equal(p.model.module.q.weight, before)
    # the target copy did not move with it
    assert torch.equal(p.target_model.module.q.weight, before)


def test_a_users_q_module_reaches_checkpoints_by_its_weights():
    p = dqn_policy(RLModuleSpec(module_class=LinearQ))
    keys = set(p.model.state_dict())
    assert keys == {"module.q.weight", "module.q.bias"}  # module_state.py's "module." prefix


@pytest.mark.parametrize("module_class, words", [
    (NoQ, "NoQ.compute_q_values returned no 'qf_preds'"),
    (WrongWidthQ, "WrongWidthQ._forward_train: for 2 observations 'qf_preds' must be a tensor "
                  "of shape (2, 2)"),
    (NotADict, "NotADict.compute_q_values returned Tensor; return a dict with 'qf_preds'"),
])
def test_a_q_module_missing_what_dqn_needs_is_one_line(module_class, words):
    with pytest.raises((TypeError, ValueError)) as err:
        dqn_policy(RLModuleSpec(module_class=module_class))
    assert words in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("training, words", [
    ({"num_atoms": 51}, "num_atoms: a user's RLModule (LinearQ) runs DQN with num_atoms=1 only"),
    ({"noisy": True}, "noisy: a user's RLModule (LinearQ) runs DQN without noisy nets"),
])
def test_distributional_or_noisy_dqn_refuse_a_users_module_in_one_line(training, words):
    with pytest.raises(ValueError) as err:
        dqn_policy(RLModuleSpec(module_class=LinearQ), **training)
    assert words in str(err.value) and "\n" not in str(err.value)
    # the same settings with DQN's own network build
    dqn_policy(RLModuleSpec(module_class=DefaultDQNTorchRLModule), **training)


class Plain(RLModule):
    """At module level: a class defined in a test would be handed (with torch) to every later
    child process of the test session, and runners that must not import torch would."""

    def compute_q_values(self, batch):
        return {QF_PREDS: torch.zeros(len(batch[Columns.OBS]), 2)}


def test_a_module_that_is_no_torch_module_is_refused_for_dqn():
    with pytest.raises(TypeError, match="Plain is not a torch.nn.Module"):
        dqn_policy(RLModuleSpec(module_class=Plain))
