"""IQLConfig: implicit Q-learning's settings in RLlib's IQLConfig names (beta, expectile,
actor_lr, critic_lr, value_lr, twin_q, tau, target_network_update_freq) over the offline
replay settings; the defaults are the IQL paper's for MuJoCo where RLlib's differ."""

from __future__ import annotations

from dataclasses import dataclass

from rlmesh.algorithms.offline_replay_config import OfflineReplayConfig
from rlmesh.config.base import setting
from rlmesh.rl.spec import MODEL_DEFAULTS

# Kostrikov et al. 2021 (appendix B): batch 256, [256, 256] ReLU networks, Polyak 0.005
# after every step. RLlib's IQLConfig keeps tau 1.0 (the target a copy of the critics
# after every step: no target network to speak of).
_IQL_DEFAULTS = {
    "train_batch_size": 256,
    "tau": 5e-3,
    "target_network_update_freq": 0,
    "replay_buffer_config": {"type": "MultiAgentReplayBuffer"},
    "model": {**MODEL_DEFAULTS, "fcnet_hiddens": [256, 256], "fcnet_activation": "relu"},
}


@dataclass(kw_only=True)
class IQLConfig(OfflineReplayConfig, defaults=_IQL_DEFAULTS):
    """Implicit Q-learning (Kostrikov et al. 2021) from a dataset (``input``), configured as
    in RLlib::

        IQLConfig().environment("Pendulum-v1").offline_data(input="/data/pendulum")
            .training(beta=3.0, expectile=0.7, actor_lr=3e-4)

    The actor, the critics and the value network are each an MLP of ``model``'s
    fcnet_hiddens and fcnet_activation.
    """

    #: The algorithm build() makes from this config.
    algorithm_path = "rlmesh.algorithms.iql:IQL"

    beta: float = setting(
        3.0, "training", gt=0,
        doc="Inverse temperature of the advantage-weighted actor: each logged action's "
            "log-likelihood is weighted by exp(beta x (Q'(s, a) - V(s))), capped at 100. The "
            "paper's 3.0 for MuJoCo (RLlib's default: 0.1, nearly behaviour cloning).")
    expectile: float = setting(
        0.7, "training", gt=0,
        doc="The expectile V regresses on min Q'(s, a_data) with: errors above V weigh "
            "expectile, below it 1 - expectile (0.5: the mean, nearer 1: the best actions "
            "the data shows). The paper's 0.7 for MuJoCo (RLlib's default 0.8).")
    actor_lr: float = setting(3e-4, "training", gt=0, doc="Adam learning rate of the actor.")
    critic_lr: float = setting(
        3e-4, "training", gt=0, doc="Adam learning rate of the Q network(s).")
    value_lr: float = setting(
        3e-4, "training", gt=0, doc="Adam learning rate of the value network.")
    twin_q: bool = setting(
        True, "training",
        doc="Two Q networks (and targets); V and the actor's advantages read the smaller "
            "target estimate.")

    def _cross_checks(self) -> list[str]:
        problems = super()._cross_checks()
        if not self.expectile < 1:
            problems.append(f"expectile: must be in (0, 1), got {self.expectile}")
        if self.lr_schedule is not None:  # it would drive none of the three optimizers
            problems.append("lr_schedule: IQL has no single learning rate; set actor_lr, "
                            "critic_lr and value_lr")
        return problems
