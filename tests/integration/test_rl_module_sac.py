"""SAC with a user's RLModule as its actor and twin critics learns Pendulum past a low bar
end to end: runners act with the module in torch, the learner trains its actor and critics
with their own optimizers and Polyak-averaged target critics, and the checkpoint's module
dir builds the trained module."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from rlmesh.algorithms.sac.torch.default_sac_torch_rl_module import DefaultSACTorchRLModule
from rlmesh.core.columns import Columns
from rlmesh.core.rl_module.rl_module import RLModule, RLModuleSpec
from rlmesh.core.rl_module.torch import TorchRLModule
from tests.integration.test_sac_td3_ddpg import sac_config, train_until

pytestmark = pytest.mark.usefixtures("no_children_left")


def mlp(n_in: int, n_out: int, width: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(n_in, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(),
                         nn.Linear(width, n_out))


class TwinQSAC(TorchRLModule):
    """A Gaussian actor (mean, log-std) and two critics Q(s, a), each its own MLP."""

    def setup(self):
        width = self.model_config.get("width", 64)
        obs_dim, act_dim = self.observation_space.shape[0], self.action_space.shape[0]
        self.pi = mlp(obs_dim, 2 * act_dim, width)
        self.qf = mlp(obs_dim + act_dim, 1, width)
        self.qf_twin = mlp(obs_dim + act_dim, 1, width)

    def _forward(self, batch, **kwargs):
        return {Columns.ACTION_DIST_INPUTS: self.pi(batch[Columns.OBS])}

    def compute_q_values(self, batch):
        x = torch.cat([batch[Columns.OBS], batch[Columns.ACTIONS]], -1)
        return {"qf_preds": self.qf(x).squeeze(-1), "qf_twin_preds": self.qf_twin(x).squeeze(-1)}


# test_sac_td3_ddpg's SAC settings; SAC's own networks cross -600 after about 4-7k steps.
@pytest.mark.timeout(400)
def test_sac_with_a_users_module_learns_pendulum_past_a_low_bar(tmp_path):
    config = sac_config().rl_module(
        rl_module_spec=RLModuleSpec(module_class=TwinQSAC, model_config={"width": 64}))
    with config.build() as algo:
        best, result = train_until(algo, -600, 8000)
        assert best >= -600, f"best mean return {best} after {result['timesteps_total']} steps"
        stats = result["info"]["learner"]["default_policy"]
        assert np.isfinite(stats["critic_loss"]) and stats["num_grad_updates"] > 0
        path = str(algo.save(tmp_path / "ckpt"))
        obs = np.random.default_rng(0).uniform(-1, 1, (8, 3)).astype(np.float32)
        greedy = np.array([algo.compute_single_action(o, explore=False) for o in obs])
    module = RLModule.from_checkpoint(f"{path}/learner_group/learner/rl_module/default_policy")
    assert isinstance(module, TwinQSAC)
    with torch.no_grad():
        inputs = module.forward_inference({Columns.OBS: torch.as_tensor(obs)})[
            Columns.ACTION_DIST_INPUTS]
    # explore=False acts with the squashed Gaussian's mode: tanh of the mean, to [-2, 2]
    assert np.allclose(np.tanh(inputs[:, :1].numpy()) * 2.0, greedy, atol=1e-5)


def test_sacs_default_module_is_sacs_own_networks_in_a_run():
    config = sac_config().rl_module(rl_module_spec=RLModuleSpec(
        module_class=DefaultSACTorchRLModule)).training(num_steps_sampled_before_learning_starts=100)
    config.reporting(min_sample_timesteps_per_iteration=200)
    assert config.module_spec is None
    with config.build() as algo:
        result = algo.train()
        assert set(algo.get_policy().model.keys()) == {"actor", "q"}
        assert result["info"]["learner"]["default_policy"]["num_grad_updates"] > 0
