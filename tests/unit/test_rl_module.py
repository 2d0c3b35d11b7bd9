"""RLModules (RLlib's new stack) as a policy's network: specs, the config key, the
adapter's contract (which forward pass runs where), and each bad module as one line before
any sampling. Real policies and gymnasium spaces; the runs are in
tests/integration/test_rl_module_runs.py."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import nn

from examples.custom_rl_module import ConvActorCritic, MLPActorCritic
from examples.lstm_rl_module import LSTMActorCritic
from rlmesh.algorithms.appo import APPOConfig
from rlmesh.algorithms.ppo import PPOConfig, PPOTorchPolicy
from rlmesh.config.settings import ConfigError
from rlmesh.core.columns import Columns
from rlmesh.core.rl_module.multi_rl_module import MultiRLModule, MultiRLModuleSpec
from rlmesh.core.rl_module.rl_module import RLModule, RLModuleSpec, SingleAgentRLModuleSpec
from rlmesh.core.rl_module.torch import TorchRLModule
from rlmesh.algorithms.ppo.torch.default_ppo_torch_rl_module import DefaultPPOTorchRLModule
from rlmesh.policy.module_model import ModuleModel
from rlmesh.policy.module_state import MODULES_DIR, load_module, write_modules

OBS = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
ACT = gym.spaces.Discrete(2)


class Recording(TorchRLModule):
    """Logits that say which forward pass made them: inference favours action 0, exploration
    action 1, training neither; values from _forward_train."""

    def setup(self):
        self.w = nn.Linear(4, 2)
        self.v = nn.Linear(4, 1)

    def _forward_inference(self, batch, **kwargs):
        return {Columns.ACTION_DIST_INPUTS: torch.tensor([[50.0, -50.0]]).expand(len(batch["obs"]), 2)}

    def _forward_exploration(self, batch, **kwargs):
        return {Columns.ACTION_DIST_INPUTS: torch.tensor([[-50.0, 50.0]]).expand(len(batch["obs"]), 2)}

    def _forward_train(self, batch, **kwargs):
        obs = batch[Columns.OBS]
        return {Columns.ACTION_DIST_INPUTS: self.w(obs), Columns.VF_PREDS: self.v(obs).squeeze(-1)}


class NoValues(TorchRLModule):
    def setup(self):
        self.w = nn.Linear(4, 2)

    def _forward(self, batch, **kwargs):
        return {Columns.ACTION_DIST_INPUTS: self.w(batch[Columns.OBS])}


class NoLogits(TorchRLModule):
    def setup(self):
        self.w = nn.Linear(4, 2)

    def _forward(self, batch, **kwargs):
        return {"logits": self.w(batch[Columns.OBS]), Columns.VF_PREDS: self.w(batch["obs"])[:, 0]}


class WrongWidth(TorchRLModule):
    def setup(self):
        self.w = nn.Linear(4, 3)

    def _forward(self, batch, **kwargs):
        out = self.w(batch[Columns.OBS])
        return {Columns.ACTION_DIST_INPUTS: out, Columns.VF_PREDS: out[:, 0]}


class ForgetsState(LSTMActorCritic):
    def _forward(self, batch, **kwargs):
        out = super()._forward(batch, **kwargs)
        del out[Columns.STATE_OUT]
        return out


def ppo(spec) -> PPOConfig:
    return PPOConfig().environment("CartPole-v1").rl_module(rl_module_spec=spec)


def policy(spec, config_class=PPOConfig, policy_class=PPOTorchPolicy, obs=OBS):
    config = config_class().environment("CartPole-v1").rl_module(rl_module_spec=spec)
    return policy_class(obs, ACT, config)


# --- specs ---

def test_a_spec_builds_its_module_with_its_model_config():
    module = RLModuleSpec(module_class=MLPActorCritic, observation_space=OBS, action_space=ACT,
                          model_config={"hidden_dim": 8}).build()
    assert isinstance(module, TorchRLModule) and module.encoder[0].out_features == 8 and not module.shared
    out = module.forward_train({Columns.OBS: torch.zeros(3, 4)})
    assert out[Columns.ACTION_DIST_INPUTS].shape == (3, 2)
    assert module.compute_values({Columns.OBS: torch.zeros(3, 4)}).shape == (3,)
    assert not module.is_stateful()
    # RLlib's older names still build
    old = SingleAgentRLModuleSpec(module_class=MLPActorCritic, observation_space=OBS,
                                  action_space=ACT, model_config_dict={"hidden_dim": 4})
    assert old.build().encoder[0].out_features == 4


def test_a_spec_without_spaces_or_class_says_what_is_missing():
    with pytest.raises(ValueError, match="needs observation_space and action_space"):
        RLModuleSpec(module_class=MLPActorCritic).build()
    with pytest.raises(ValueError, match="module_class is None"):
        RLModuleSpec().build()


def test_a_multi_spec_builds_a_module_per_id():
    multi = MultiRLModuleSpec(observation_space=OBS, action_space=ACT, rl_module_specs={
        "a": RLModuleSpec(module_class=MLPActorCritic, model_config={"hidden_dim": 8}),
        "b": RLModuleSpec(module_class=MLPActorCritic, model_config={"hidden_dim": 16})}).build()
    assert isinstance(multi, MultiRLModule) and sorted(multi.keys()) == ["a", "b"]
    assert multi["b"].encoder[0].out_features == 16
    out = multi.forward_inference({"a": {Columns.OBS: torch.zeros(2, 4)}})
    assert set(out) == {"a"} and out["a"][Columns.ACTION_DIST_INPUTS].shape == (2, 2)
    with pytest.raises(TypeError, match=r"rl_module_specs\['x'\] must be an RLModuleSpec"):
        MultiRLModuleSpec(rl_module_specs={"x": MLPActorCritic})


def test_a_stateful_module_says_so():
    module = RLModuleSpec(module_class=LSTMActorCritic, observation_space=OBS,
                          action_space=ACT, model_config={"lstm_cell_size": 8}).build()
    assert module.is_stateful() and sorted(module.get_initial_state()) == ["c", "h"]


# --- the config ---

def test_the_spec_crosses_processes_as_data():
    config = ppo(RLModuleSpec(module_class=MLPActorCritic, model_config={"hidden_dim": 32}))
    assert config.module_spec["module_class"] == "examples.custom_rl_module:MLPActorCritic"
    assert config.module_spec["model_config"] == {"hidden_dim": 32}
    again = PPOConfig.from_dict(config.to_dict())
    assert again.module_spec == config.module_spec
    config.validate()


def test_the_default_module_is_the_default_model_with_its_model_config():
    config = ppo(RLModuleSpec(module_class=DefaultPPOTorchRLModule,
                              model_config={"fcnet_hiddens": [16]}))
    assert config.module_spec is None and config.model["fcnet_hiddens"] == [16]
    p = PPOTorchPolicy(OBS, ACT, config)
    assert not isinstance(p.model, ModuleModel)  # rlmesh's own model, numpy runners and all
    assert PPOTorchPolicy.runner_class(config, OBS, ACT).endswith("NumpyMLPPolicy")


def test_a_users_module_acts_in_torch_on_the_runners():
    config = ppo(RLModuleSpec(module_class=MLPActorCritic))
    assert PPOTorchPolicy.runner_class(config, OBS, ACT).endswith(":PPOTorchPolicy")


def test_model_config_keys_the_model_does_not_read_reach_the_module_only():
    config = ppo(RLModuleSpec(module_class=MLPActorCritic)).rl_module(
        model_config={"hidden_dim": 12, "fcnet_hiddens": [8]})
    assert config.model["fcnet_hiddens"] == [8] and config.module_model_config == {"hidden_dim": 12}
    p = PPOTorchPolicy(OBS, ACT, config)
    assert p.model.module.model_config["hidden_dim"] == 12
    # without a module a key nobody reads is the error it always was
    with pytest.raises(ConfigError, match="unknown model_config key 'hidden_dim'"):
        PPOConfig().environment("CartPole-v1").rl_module(model_config={"hidden_dim": 12}).validate()


def test_a_spec_that_is_not_one_is_one_line():
    with pytest.raises(ConfigError) as err:
        ppo(MLPActorCritic)
    assert "expected an RLModuleSpec or a MultiRLModuleSpec" in str(err.value)
    assert "\n" not in str(err.value)


def test_an_algorithm_with_its_own_networks_refuses_a_module():
    from rlmesh.algorithms.ddpg import DDPGTorchPolicy
    from rlmesh.algorithms.ddpg_config import DDPGConfig

    box = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
    config = DDPGConfig().environment("Pendulum-v1").rl_module(
        rl_module_spec=RLModuleSpec(module_class=MLPActorCritic))
    with pytest.raises(ValueError, match="DDPGTorchPolicy builds its own networks"):
        DDPGTorchPolicy(OBS, box, config)


# --- which pass runs where ---

def test_acting_explores_or_infers_and_learning_trains():
    p = policy(RLModuleSpec(module_class=Recording))
    obs = np.zeros((5, 4), np.float32)
    assert (p.compute_actions(obs, explore=True)[0] == 1).all()  # forward_exploration
    assert (p.compute_actions(obs, explore=False)[0] == 0).all()  # forward_inference
    dist_inputs, values = p.model(torch.as_tensor(obs))  # the learner's pass
    assert torch.allclose(dist_inputs, p.model.module.w(torch.as_tensor(obs)))
    assert values.shape == (5,)


def test_values_come_from_compute_values_with_the_passes_embeddings():
    p = policy(RLModuleSpec(module_class=MLPActorCritic))
    obs = torch.zeros(3, 4)
    _, values = p.model(obs)
    assert torch.allclose(values, p.model.module.compute_values({Columns.OBS: obs}))
    assert torch.allclose(p.model.values(obs), values)


def test_a_stateful_module_steps_with_its_state_as_it_trains_on_sequences():
    p = policy(RLModuleSpec(module_class=LSTMActorCritic, model_config={"lstm_cell_size": 8}))
    assert p.recurrent and [s.shape for s in p.get_initial_state()] == [(8,), (8,)]
    obs = np.random.default_rng(0).normal(size=(6, 4)).astype(np.float32)
    state = [s[None] for s in p.get_initial_state()]
    stepped = []
    for t in range(6):
        _, state, extras = p.compute_actions(obs[t:t + 1], state, explore=False)
        stepped.append(extras[Columns.ACTION_DIST_INPUTS][0])
    initial = [torch.as_tensor(s[None]) for s in p.get_initial_state()]
    sequence, values, _ = p.model.forward_seq(torch.as_tensor(obs)[None], initial)
    np.testing.assert_allclose(np.array(stepped), sequence[0].detach().numpy(), atol=1e-5)
    assert values.shape == (1, 6)


def test_a_conv_module_takes_image_observations():
    image = gym.spaces.Box(0, 255, (10, 10, 3), np.uint8)
    p = policy(RLModuleSpec(module_class=ConvActorCritic), obs=image)
    actions, _, extras = p.compute_actions(np.stack([image.sample() for _ in range(4)]))
    assert actions.shape == (4,) and extras[Columns.ACTION_DIST_INPUTS].shape == (4, 2)


# --- bad modules: one line naming the key and the method, at build ---

@pytest.mark.parametrize("module, words", [
    (NoValues, ["NoValues gives no values", "'vf_preds'", "compute_values"]),
    (NoLogits, ["NoLogits._forward_train returned no 'action_dist_inputs'", "['logits', 'vf_preds']"]),
    (WrongWidth, ["WrongWidth._forward_train", "must have shape (2, 2)", "got (2, 3)"]),
    (ForgetsState, ["ForgetsState is stateful", "'state_out'", "['c', 'h']"]),
])
def test_a_module_missing_what_the_algorithm_needs_is_one_line(module, words):
    with pytest.raises((KeyError, ValueError, TypeError)) as err:
        policy(RLModuleSpec(module_class=module))
    message = err.value.args[0]
    assert all(w in message for w in words), message
    assert "\n" not in message


def test_a_module_that_is_no_torch_module_is_refused():
    class Plain(RLModule):
        def _forward(self, batch, **kwargs):
            return {Columns.ACTION_DIST_INPUTS: torch.zeros(len(batch["obs"]), 2)}

    with pytest.raises(TypeError, match="subclass rlmesh.core.rl_module.torch.TorchRLModule"):
        ModuleModel(Plain(observation_space=OBS, action_space=ACT), 2)


# --- checkpoints ---

def test_a_module_dir_builds_the_trained_module(tmp_path):
    p = policy(RLModuleSpec(module_class=MLPActorCritic, model_config={"hidden_dim": 8}))
    with torch.no_grad():
        p.model.module.pi.weight.fill_(0.5)
    from rlmesh.env.registry import space_to_data

    write_modules(tmp_path, {"default_policy": {
        "module_class": "examples.custom_rl_module:MLPActorCritic",
        "observation_space": space_to_data(OBS), "action_space": space_to_data(ACT),
        "model_config": {"hidden_dim": 8}}}, {"default_policy": p.get_state()})
    folder = tmp_path / MODULES_DIR / "default_policy"
    module = RLModule.from_checkpoint(folder)
    assert isinstance(module, MLPActorCritic) and not module.training
    assert torch.equal(module.pi.weight, torch.full_like(module.pi.weight, 0.5))
    assert isinstance(load_module(folder), MLPActorCritic)
    with pytest.raises(FileNotFoundError, match="holds no module_spec.msgpack"):
        RLModule.from_checkpoint(tmp_path)


def test_appo_takes_a_module_too():
    p = policy(RLModuleSpec(module_class=MLPActorCritic), APPOConfig,
               __import__("rlmesh.algorithms.appo", fromlist=["APPOTorchPolicy"]).APPOTorchPolicy)
    assert isinstance(p.model, ModuleModel)


def test_a_module_dir_keeps_the_algorithms_network_settings(tmp_path):
    """A subclass of DQN's default module reads DQN's settings (hiddens): the checkpoint's
    module dir holds them, so RLModule.from_checkpoint builds the same network."""
    from rlmesh.algorithms.dqn import DQNConfig, DQNTorchPolicy
    from rlmesh.algorithms.dqn.torch.default_dqn_torch_rl_module import DefaultDQNTorchRLModule
    from rlmesh.env.registry import space_to_data
    from rlmesh.policy.module_model import modules_to_save
    from rlmesh.policy.policy import class_path

    class_name = "tests.unit.test_rl_module:OwnDQNModule"
    config = (DQNConfig().environment("CartPole-v1").training(hiddens=[32])
              .rl_module(rl_module_spec=RLModuleSpec(module_class=OwnDQNModule)))
    p = DQNTorchPolicy(OBS, ACT, config)
    specs = {"default_policy": {"policy_class": class_path(DQNTorchPolicy), "config": {},
                                "observation_space": space_to_data(OBS),
                                "action_space": space_to_data(ACT)}}
    saved = modules_to_save(config, specs)
    assert saved["default_policy"]["module_class"] == class_name
    assert saved["default_policy"]["model_config"]["hiddens"] == [32]
    write_modules(tmp_path, saved, {"default_policy": p.get_state()})
    module = RLModule.from_checkpoint(tmp_path / MODULES_DIR / "default_policy")
    assert isinstance(module, OwnDQNModule) and isinstance(module, DefaultDQNTorchRLModule)
    obs = torch.zeros(2, 4)
    assert torch.allclose(module.compute_q_values({Columns.OBS: obs})["qf_preds"],
                          p.model.module.compute_q_values({Columns.OBS: obs})["qf_preds"],
                          atol=1e-6)


from rlmesh.algorithms.dqn.torch.default_dqn_torch_rl_module import (  # noqa: E402
    DefaultDQNTorchRLModule as _DefaultDQN)


class OwnDQNModule(_DefaultDQN):
    """DQN's default Q network as a user's subclass (it runs through the module's passes)."""


def test_a_default_modules_settings_become_the_algorithms_and_another_algorithm_refuses_it():
    from rlmesh.algorithms.dqn import DQNConfig

    config = DQNConfig().rl_module(rl_module_spec=RLModuleSpec(
        module_class=_DefaultDQN, model_config={"dueling": False, "fcnet_hiddens": [32]}))
    assert config.dueling is False and config.model["fcnet_hiddens"] == [32]
    assert config.module_spec is None
    config.validate()
    with pytest.raises(ConfigError) as err:
        PPOConfig().rl_module(rl_module_spec=RLModuleSpec(module_class=_DefaultDQN))
    assert ("DefaultDQNTorchRLModule is the default module of DQN, not of PPO"
            in str(err.value)) and "\n" not in str(err.value)


def test_rllibs_default_model_config_passes_what_the_user_set():
    from rlmesh.core.rl_module.default_model_config import DefaultModelConfig

    config = PPOConfig().environment("CartPole-v1").rl_module(model_config=DefaultModelConfig(
        fcnet_hiddens=[32], head_fcnet_hiddens=[16], vf_share_layers=False))
    assert config.model["fcnet_hiddens"] == [32]
    assert config.model["post_fcnet_hiddens"] == [16]  # RLlib's head is rlmesh's post_fcnet
    assert config.model["vf_share_layers"] is False and config.module_model_config == {}
    config.validate()
    with pytest.raises(ConfigError, match="unknown model_config key 'fcnet_kernel_initializer'"):
        PPOConfig().rl_module(model_config=DefaultModelConfig(
            fcnet_kernel_initializer="xavier_uniform_")).validate()
    # a module reads what rlmesh's model does not
    module = ppo(RLModuleSpec(module_class=MLPActorCritic)).rl_module(
        model_config=DefaultModelConfig(fcnet_kernel_initializer="xavier_uniform_"))
    assert module.module_model_config == {"fcnet_kernel_initializer": "xavier_uniform_"}
    module.validate()
