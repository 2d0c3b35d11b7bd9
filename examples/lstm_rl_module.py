"""A stateful RLModule (an LSTM) trained by PPO on CartPole without velocities
(rlmesh.env.stateless.StatelessCartPole, RLlib's): the module returns its initial state from
``get_initial_state``, reads ``batch[Columns.STATE_IN]`` and returns ``Columns.STATE_OUT``,
as RLlib's docs write one. Runners carry each env's state; learners train on sequences of
``model_config["max_seq_len"]`` steps from the state recorded at their start.

    python -m examples.lstm_rl_module      # to a mean return of 450 (from the repository root)
"""

from __future__ import annotations

import argparse

import numpy as np
import torch
from torch import nn

from rlmesh.algorithms.ppo import PPOConfig
from rlmesh.core.columns import Columns
from rlmesh.core.rl_module.apis import ValueFunctionAPI
from rlmesh.core.rl_module.rl_module import RLModuleSpec
from rlmesh.core.rl_module.torch import TorchRLModule
from rlmesh.env.stateless import StatelessCartPole


class LSTMActorCritic(TorchRLModule, ValueFunctionAPI):
    """obs [B, T, ...] -> dense -> LSTM -> (logits, value) per step."""

    def setup(self) -> None:
        self.cell_size = self.model_config.get("lstm_cell_size", 64)
        self.embed = nn.Sequential(nn.Linear(self.observation_space.shape[0], 64), nn.Tanh())
        self.lstm = nn.LSTM(64, self.cell_size, batch_first=True)
        self.pi = nn.Linear(self.cell_size, self.action_space.n)
        self.vf = nn.Linear(self.cell_size, 1)

    def get_initial_state(self) -> dict:
        return {"h": np.zeros(self.cell_size, np.float32), "c": np.zeros(self.cell_size, np.float32)}

    def _run_lstm(self, batch: dict) -> tuple[torch.Tensor, dict]:
        state = batch[Columns.STATE_IN]
        out, (h, c) = self.lstm(self.embed(batch[Columns.OBS]),
                                (state["h"].unsqueeze(0), state["c"].unsqueeze(0)))
        return out, {"h": h.squeeze(0), "c": c.squeeze(0)}

    def _forward(self, batch: dict, **kwargs) -> dict:
        features, state_out = self._run_lstm(batch)
        return {Columns.ACTION_DIST_INPUTS: self.pi(features), Columns.STATE_OUT: state_out,
                Columns.EMBEDDINGS: features}

    def compute_values(self, batch: dict, embeddings: torch.Tensor | None = None) -> torch.Tensor:
        if embeddings is None:
            embeddings, _ = self._run_lstm(batch)
        return self.vf(embeddings).squeeze(-1)


def config(seed: int = 0) -> PPOConfig:
    """stateless-cartpole-ppo.yaml's training settings (MeanStdFilter, normalize_rewards,
    24 envs, batches of 768) with the module above in place of use_lstm."""
    return (PPOConfig().environment(StatelessCartPole, normalize_rewards=True)
            .env_runners(num_env_runners=2, num_envs_per_env_runner=12, sample_async=True,
                         observation_filter="MeanStdFilter", rollout_fragment_length="auto")
            .training(train_batch_size=768, minibatch_size=384, num_epochs=10, lr=0.002,
                      lr_schedule=[[0, 0.002], [200000, 0.0]], gamma=0.98, lambda_=0.95,
                      use_kl_loss=False, entropy_coeff=0.0, vf_loss_coeff=0.5, grad_clip=0.5)
            .rl_module(rl_module_spec=RLModuleSpec(
                module_class=LSTMActorCritic,
                model_config={"lstm_cell_size": 64, "max_seq_len": 32}))
            .debugging(seed=seed))


if __name__ == "__main__":
    from examples.custom_rl_module import train

    parser = argparse.ArgumentParser()
    parser.add_argument("--seed", type=int, default=0)
    train(config(parser.parse_args().seed), 450.0)
