"""The Atari PPO benchmark's parity settings, written once: rlmesh's side (bench_atari.py) and
every peer (peer_*_atari.py) read them from here, so each does the same learner work per
sample. Standard library only: the peers import it from venvs that have no rlmesh."""

from __future__ import annotations

ATARI_PPO = {
    # --- the env: DeepMind's preprocessing, no sticky actions ---
    "env_id": "ALE/Pong-v5",  # gymnasium's id (RLlib, rlmesh)
    "game": "pong",  # the ROM's name (envpool's Pong-v5, ale-py's AtariVectorEnv)
    "sf_env": "atari_pong",  # Sample Factory's name for it (sf_examples.atari)
    "frame_skip": 4,  # each agent step is 4 frames (max-pooled over the last two)
    "screen_size": 84,  # frames resized to 84 x 84
    "grayscale": True,
    "framestack": 4,  # observations (4, 84, 84) uint8, or (84, 84, 4) channels-last
    "noop_max": 30,  # up to 30 no-op actions after a reset
    "repeat_action_probability": 0.0,  # no sticky actions (v5's default is 0.25)
    "full_action_space": False,  # Pong's 6 actions
    "reward_clip": True,  # rewards clipped to their sign for learning
    # --- the network: Nature CNN ---
    "conv_filters": [[32, 8, 4], [64, 4, 2], [64, 3, 1]],  # [channels, kernel, stride]
    "dense": 512,  # one ReLU dense layer after the convolutions, then policy and value heads
    # --- sampling: 8 envs, 128 steps each per iteration ---
    "num_envs": 8,
    "num_env_runners": 2,  # RLlib: 2 runners x 4 envs; Sample Factory: 2 workers x 4 envs
    "num_envs_per_env_runner": 4,
    "rollout_fragment_length": 128,  # steps per env per iteration
    "train_batch_size": 1024,  # num_envs x rollout_fragment_length
    # --- PPO ---
    "minibatch_size": 256,  # 4 minibatches per epoch
    "num_epochs": 2,
    "lr": 2.5e-4,
    "gamma": 0.99,
    "lambda": 0.95,  # GAE
    "clip_param": 0.1,
    "vf_loss_coeff": 0.5,
    "entropy_coeff": 0.01,
    "grad_clip": 0.5,  # global gradient norm
    "device": "cpu",  # the learner's device
    # torch threads per process (learner, and the policy where it acts): one, as Sample
    # Factory's learner and rlmesh's (num_cpus_per_learner "auto") use; torch's default of
    # one per core made a batch-8 Nature CNN forward 5-7x slower on this busy 2-core machine
    # (36 ms against 5-8 ms).
    "torch_threads": 1,
}


def peer_main(doc: str):
    """A peer's command line (``--steps``, ``--seed``) and the stream its one JSON line goes
    to: the real stdout, kept aside, while stdout itself goes to stderr (the peers' worker
    processes inherit it and print there)."""
    import argparse
    import os

    parser = argparse.ArgumentParser(description=doc.split("\n")[0])
    parser.add_argument("--steps", type=int, default=20_000, help="env steps (agent steps)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    json_out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    return args, json_out
