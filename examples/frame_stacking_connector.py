"""Env-to-module connectors (RLlib's ConnectorV2) in place of memory: CartPole without its
velocities (rlmesh.env.stateless.StatelessCartPole) is learnable by a plain MLP once it sees
the last four observations: the ``MeanStdFilter`` connector normalizes each observation in
its episode, then ``FrameStackingEnvToModule`` stacks the last four. The policy's
observation space is the pipeline's output (4 frames x 2 values = 8), and the fragments
store what the policy saw.

    python -m examples.frame_stacking_connector          # to a mean return of 450
"""

from __future__ import annotations

import argparse

from rlmesh.algorithms.ppo import PPOConfig
from rlmesh.connectors.env_to_module import FrameStackingEnvToModule, MeanStdFilter
from rlmesh.env.stateless import StatelessCartPole


def config(seed: int = 0) -> PPOConfig:
    return (PPOConfig().environment(StatelessCartPole)
            .env_runners(num_env_runners=2, num_envs_per_env_runner=12,
                         rollout_fragment_length="auto",
                         env_to_module_connector=lambda env: [
                             MeanStdFilter(), FrameStackingEnvToModule(num_frames=4)])
            .training(train_batch_size=768, minibatch_size=384, num_epochs=10, lr=0.002,
                      lr_schedule=[[0, 0.002], [200000, 0.0]], gamma=0.98, lambda_=0.95,
                      use_kl_loss=False, entropy_coeff=0.0, vf_loss_coeff=0.5, grad_clip=0.5,
                      model={"fcnet_hiddens": [64, 64], "vf_share_layers": False})
            .debugging(seed=seed))


if __name__ == "__main__":
    from examples.custom_rl_module import train  # until the return, printing each iteration

    parser = argparse.ArgumentParser()
    parser.add_argument("--seed", type=int, default=0)
    train(config(parser.parse_args().seed), 450.0)
