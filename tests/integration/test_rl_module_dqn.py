"""DQN with a user's RLModule as its Q network (RLlib's new stack, QNetAPI) learns CartPole
end to end: runners act with the module in torch, the learner trains it through DQN's loss
and target network, and the checkpoint's module dir builds the trained module."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn

from rlmesh.algorithms.dqn.torch.default_dqn_torch_rl_module import QF_PREDS
from rlmesh.core.columns import Columns
from rlmesh.core.rl_module.rl_module import RLModule, RLModuleSpec
from rlmesh.core.rl_module.torch import TorchRLModule
from tests.integration.test_dqn import cartpole_config


class MLPQ(TorchRLModule):
    """Q(s, .) from an MLP whose width model_config gives (RLlib's QNetAPI)."""

    def setup(self):
        width = self.model_config.get("q_width", 64)
        n_in, n_out = self.observation_space.shape[0], self.action_space.n
        self.net = nn.Sequential(nn.Linear(n_in, width), nn.ReLU(), nn.Linear(width, width),
                                 nn.ReLU(), nn.Linear(width, n_out))

    def compute_q_values(self, batch):
        return {QF_PREDS: self.net(batch[Columns.OBS])}

    def _forward(self, batch, **kwargs):
        q = self.compute_q_values(batch)
        return {**q, Columns.ACTIONS: q[QF_PREDS].argmax(-1)}


# Test_dqn.py's fast CartPole settings: ~10k env steps; ~20 s alone on 2 shared cores.
@pytest.mark.timeout(300)
def test_dqn_with_a_users_q_module_learns_cartpole(tmp_path):
    config = cartpole_config().rl_module(
        rl_module_spec=RLModuleSpec(module_class=MLPQ, model_config={"q_width": 64}))
    with config.build() as algo:
        best = -math.inf
        for _ in range(30):
            result = algo.train()
            best = max(best, result["episode_reward_mean"])
            if best >= 60:  # a random policy's mean is ~22
                break
        assert best >= 60, f"DQN with a user's Q module did not learn CartPole: best {best}"
        assert result["info"]["learner"]["default_policy"]["num_target_updates"] >= 1
        path = str(algo.save(tmp_path / "ckpt"))
        obs = np.random.default_rng(0).uniform(-0.2, 0.2, (16, 4)).astype(np.float32)
        greedy = [int(algo.compute_single_action(o, explore=False)) for o in obs]
    # RLlib's layout: the trained module, built without the algorithm, acts as the policy did
    module = RLModule.from_checkpoint(f"{path}/learner_group/learner/rl_module/default_policy")
    assert isinstance(module, MLPQ) and module.net[0].out_features == 64
    with torch.no_grad():
        q = module.compute_q_values({Columns.OBS: torch.as_tensor(obs)})[QF_PREDS]
    assert q.argmax(-1).tolist() == greedy


# Two policies, one module each: p0 a user's Q module, p1 DQN's default module (its own
# QModel). ~3k env steps.
@pytest.mark.timeout(300)
def test_multi_agent_dqn_trains_a_users_q_module_beside_the_default_one():
    from rlmesh.algorithms.dqn.torch.default_dqn_torch_rl_module import DefaultDQNTorchRLModule
    from rlmesh.algorithms.dqn import QModel
    from rlmesh.core.rl_module.multi_rl_module import MultiRLModuleSpec
    from rlmesh.policy.q_module_model import QModuleModel
    from tests.integration.test_multi_agent_dqn import two_cartpoles

    spec = MultiRLModuleSpec(rl_module_specs={
        "p0": RLModuleSpec(module_class=MLPQ, model_config={"q_width": 32}),
        "p1": RLModuleSpec(module_class=DefaultDQNTorchRLModule)})
    with two_cartpoles().rl_module(rl_module_spec=spec).build() as algo:
        assert isinstance(algo.get_policy("p0").model, QModuleModel)
        assert type(algo.get_policy("p1").model) is QModel
        before = algo.get_weights()
        for _ in range(3):
            result = algo.train()
        after = algo.get_weights()
    for pid in ("p0", "p1"):
        assert np.isfinite(result["info"]["learner"][pid]["total_loss"])
        assert any(not np.array_equal(before[pid][k], after[pid][k]) for k in before[pid])
    assert "module.net.0.weight" in after["p0"]
