"""A custom RLModule (RLlib's new API stack) trained by PPO or APPO on CartPole-v1: an MLP
encoder whose features feed a policy head and a value head, written as an RLlib user writes
one; only the imports differ (``ray.rllib`` -> ``rlmesh``). ``ConvActorCritic`` is the same
idea with a small conv encoder, for image observations.

    python -m examples.custom_rl_module              # PPO to a mean return of 450
    python -m examples.custom_rl_module --run APPO   # APPO to 150
"""

from __future__ import annotations

import argparse

import torch
from torch import nn

from rlmesh.core.columns import Columns
from rlmesh.core.rl_module.apis import ValueFunctionAPI
from rlmesh.core.rl_module.rl_module import RLModuleSpec
from rlmesh.core.rl_module.torch import TorchRLModule


def linear(inputs: int, outputs: int, gain: float = 2 ** 0.5) -> nn.Linear:
    """A dense layer initialised orthogonally (CleanRL's PPO; rlmesh's default model does the
    same): PyTorch's default initialisation made APPO learn CartPole ~4x slower here."""
    layer = nn.Linear(inputs, outputs)
    nn.init.orthogonal_(layer.weight, gain)
    nn.init.zeros_(layer.bias)
    return layer


def mlp(inputs: int, width: int) -> nn.Sequential:
    return nn.Sequential(linear(inputs, width), nn.Tanh(), linear(width, width), nn.Tanh())


class MLPActorCritic(TorchRLModule, ValueFunctionAPI):
    """obs -> encoder -> logits, and a value head: its own MLP, or (``vf_share_layers``)
    a linear layer on the encoder's features, which the forward pass hands over as
    ``Columns.EMBEDDINGS``. A value function of its own learns CartPole's growing returns
    without pulling the policy's features along (PPO, and APPO even more, learn faster)."""

    def setup(self) -> None:
        width = self.model_config.get("hidden_dim", 64)
        inputs = self.observation_space.shape[0]
        self.shared = self.model_config.get("vf_share_layers", False)
        self.encoder = mlp(inputs, width)
        self.pi = linear(width, self.action_space.n, gain=0.01)  # near-uniform first actions
        self.vf = (linear(width, 1, gain=1.0) if self.shared
                   else nn.Sequential(mlp(inputs, width), linear(width, 1, gain=1.0)))

    def _forward(self, batch: dict, **kwargs) -> dict:
        features = self.encoder(batch[Columns.OBS])
        return {Columns.ACTION_DIST_INPUTS: self.pi(features), Columns.EMBEDDINGS: features}

    def compute_values(self, batch: dict, embeddings: torch.Tensor | None = None) -> torch.Tensor:
        if not self.shared:
            return self.vf(batch[Columns.OBS]).squeeze(-1)
        if embeddings is None:
            embeddings = self.encoder(batch[Columns.OBS])
        return self.vf(embeddings).squeeze(-1)


class ConvActorCritic(TorchRLModule, ValueFunctionAPI):
    """Image observations (HWC, uint8 or float) -> a small conv encoder -> (logits, value)."""

    def setup(self) -> None:
        height, width, channels = self.observation_space.shape
        self.encoder = nn.Sequential(
            nn.Conv2d(channels, 16, 3, stride=1), nn.ReLU(),
            nn.Conv2d(16, 32, 3, stride=1), nn.ReLU(), nn.Flatten())
        with torch.no_grad():
            size = self.encoder(torch.zeros(1, channels, height, width)).shape[1]
        self.pi = nn.Linear(size, self.action_space.n)
        self.vf = nn.Linear(size, 1)

    def _features(self, obs: torch.Tensor) -> torch.Tensor:
        x = obs.float() / (255.0 if obs.dtype == torch.uint8 else 1.0)
        return self.encoder(x.permute(0, 3, 1, 2))

    def _forward(self, batch: dict, **kwargs) -> dict:
        features = self._features(batch[Columns.OBS])
        return {Columns.ACTION_DIST_INPUTS: self.pi(features), Columns.EMBEDDINGS: features}

    def compute_values(self, batch: dict, embeddings: torch.Tensor | None = None) -> torch.Tensor:
        if embeddings is None:
            embeddings = self._features(batch[Columns.OBS])
        return self.vf(embeddings).squeeze(-1)


def config(run: str = "PPO", seed: int = 0):
    """CartPole with the module above: PPO with cartpole-ppo.yaml's settings, APPO with
    cartpole-appo.yaml's."""
    spec = RLModuleSpec(module_class=MLPActorCritic,
                        model_config={"hidden_dim": 64, "vf_share_layers": False})
    if run == "APPO":
        from rlmesh.algorithms.appo import APPOConfig

        return (APPOConfig().environment("CartPole-v1")
                .env_runners(num_env_runners=2, num_envs_per_env_runner=8,
                             rollout_fragment_length=50)
                .training(train_batch_size=500, lr=0.001, gamma=0.99, clip_param=0.4,
                          use_kl_loss=False, vf_loss_coeff=0.5, entropy_coeff=0.0,
                          grad_clip=40.0)
                .reporting(min_time_s_per_iteration=1)
                .rl_module(rl_module_spec=spec).debugging(seed=seed))
    from rlmesh.algorithms.ppo import PPOConfig

    return (PPOConfig().environment("CartPole-v1")
            .env_runners(num_env_runners=2, num_envs_per_env_runner=12, sample_async=True,
                         rollout_fragment_length="auto")
            .training(train_batch_size=768, minibatch_size=384, num_epochs=10, lr=0.002,
                      lr_schedule=[[0, 0.002], [200000, 0.0]], gamma=0.98, lambda_=0.95,
                      use_kl_loss=False, entropy_coeff=0.0, vf_loss_coeff=0.5, grad_clip=0.5)
            .rl_module(rl_module_spec=spec).debugging(seed=seed))


def train(cfg, stop_reward: float, max_env_steps: int = 300_000, log: bool = True) -> dict:
    """Train until the mean return reaches ``stop_reward``; the last result."""
    algo = cfg.build()
    try:
        while True:
            result = algo.train()
            if log:
                print(f"iter {result['training_iteration']:3d} env steps "
                      f"{result['timesteps_total']:7d} return {result['episode_reward_mean']:6.1f}")
            if (result["episode_reward_mean"] >= stop_reward
                    or result["timesteps_total"] >= max_env_steps):
                return result
    finally:
        algo.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--run", default="PPO", choices=("PPO", "APPO"))
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    train(config(args.run, args.seed), 450.0 if args.run == "PPO" else 150.0)
