"""RLlib's default values where rlmesh's differ, per algorithm and API stack: what the keys an
RLlib file leaves out meant there (``AlgorithmConfig.rllib_defaults()``, ``rlmesh train
--defaults rllib``, and the default for a file that sets ``framework``). Every other rlmesh
default is RLlib's already; tests/conformance/test_rllib_defaults.py checks both claims
against the defaults RLlib 2.60 reports (``XConfig().to_dict()``), kept in
tests/conformance/rllib_2_60_defaults.json."""

from __future__ import annotations

# Every algorithm: RLlib passes Box actions to the env unclipped (normalize_actions rescales
# them into the bounds already).
_COMMON = {"clip_actions": False}

# rlmesh's PPO is tuned (ppo_config.py says why each value differs); RLlib's is not.
_PPO = {
    "lr": 5e-5, "train_batch_size": 4000, "minibatch_size": 128, "num_epochs": 30,
    "grad_clip": None, "lambda": 1.0, "use_kl_loss": True, "kl_coeff": 0.2, "kl_target": 0.01,
    "vf_loss_coeff": 1.0, "clip_param": 0.3, "vf_clip_param": 10.0,
    "model": {"fcnet_hiddens": [256, 256], "fcnet_activation": "tanh", "vf_share_layers": False},
}

COMMON_DEFAULTS = {"old": _COMMON, "new": _COMMON}

ALGORITHM_DEFAULTS = {
    # The classic stack (RLlib's YAML tuned examples, Ray 2.0-2.9).
    "old": {"PPO": _PPO, "SAC": {"min_time_s_per_iteration": 1}},
    # The new stack (Ray 2.10 on): the same values, and SAC's runners step one env step per
    # fragment as before; DQN's replay is its prioritized episode buffer (the same here).
    "new": {"PPO": _PPO, "SAC": {"min_time_s_per_iteration": 1}},
}
