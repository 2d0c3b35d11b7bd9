"""CQLConfig: conservative Q-learning's settings in RLlib's CQLConfig names (bc_iters,
temperature, num_actions, lagrangian, lagrangian_thresh, min_q_weight, deterministic_backup)
and two of rlmesh's own (bc_blend_iters, importance_sampling) over everything of SACConfig,
and how much an offline iteration trains."""

from __future__ import annotations

from dataclasses import dataclass

from rlmesh.algorithms.offline_replay_config import OfflineReplayConfig
from rlmesh.algorithms.sac_config import SACConfig
from rlmesh.config.base import setting

# RLlib's CQLConfig values where they differ from SAC's. The learning rates are those of
# RLlib's hopper-cql.yaml (actor 1e-4, critic 3e-4, entropy 1e-4), the CQL paper's (Kumar et
# al. 2020, actor 1e-4 and critic 3e-4); RLlib's new stack sets critic and alpha to 1e-3.
_CQL_DEFAULTS = {
    "train_batch_size": 256,
    "optimization_config": {"actor_learning_rate": 1e-4, "critic_learning_rate": 3e-4,
                            "entropy_learning_rate": 1e-4},
    "replay_buffer_config": {"type": "MultiAgentReplayBuffer"},
    "num_steps_sampled_before_learning_starts": 0,
    # SAC's sampling pipeline as it was (SAC's own defaults changed in issue 54); offline,
    # only evaluation samples.
    "rollout_fragment_length": 1,
    "training_intensity": None,
    "min_sample_timesteps_per_iteration": 1000,
}


@dataclass(kw_only=True)
class CQLConfig(SACConfig, OfflineReplayConfig, defaults=_CQL_DEFAULTS):
    """Conservative Q-learning (Kumar et al. 2020) from a dataset (``input``), configured as
    in RLlib::

        CQLConfig().environment("Pendulum-v1").offline_data(input="/data/pendulum")
            .training(min_q_weight=5.0, bc_iters=0)

    Box actions: SAC's losses plus the conservative term. Discrete actions: DQN's loss plus
    min_q_weight x (logsumexp_a Q(s, a) - Q(s, a_data)) (``cql_discrete.py``).
    """

    #: The algorithm build() makes from this config.
    algorithm_path = "rlmesh.algorithms.cql:CQL"

    bc_iters: int = setting(
        20_000, "training", ge=0,
        doc="Gradient steps at the start in which the actor clones the data's actions "
            "(maximises their log-likelihood, with SAC's entropy term) instead of "
            "maximising Q; the critics train as usual meanwhile.")
    bc_blend_iters: int = setting(
        0, "training", ge=0,
        doc="Gradient steps after bc_iters over which the actor's loss moves linearly from "
            "cloning to SAC's (Q-maximising) loss; 0 (RLlib's CQL): at once. A clone that "
            "turns to the critics at once can follow their gradient out of the data's "
            "actions faster than the conservative term pushes Q down there.")
    importance_sampling: bool = setting(
        True, "training",
        doc="True (CQL(H), the paper's code's default): in the logsumexp each sampled "
            "action's Q less the log-density it was drawn with; False (the paper's code's "
            "other version): the sampled actions' Q as they are, so that a policy which has "
            "narrowed keeps its own actions in the term (a peaked density takes them out).")
    temperature: float = setting(
        1.0, "training", gt=0,
        doc="Temperature of the conservative term's logsumexp over actions: "
            "temperature x logsumexp(Q / temperature).")
    num_actions: int = setting(
        10, "training", ge=1,
        doc="Actions drawn per state for the conservative term: num_actions uniformly "
            "random, num_actions from the policy at s and num_actions from the policy at s' "
            "(each Q taken at s).")
    lagrangian: bool = setting(
        False, "training",
        doc="Tune the conservative term's weight (alpha') by dual gradient descent so that "
            "the gap logsumexp Q - Q(s, a_data) stays near lagrangian_thresh (Box actions).")
    lagrangian_thresh: float = setting(
        5.0, "training",
        doc="The gap the Lagrangian version aims the conservative term at (the paper's "
            "tau, 'target action gap').")
    min_q_weight: float = setting(
        5.0, "training", ge=0,
        doc="Weight of the conservative term, min_q_weight x (temperature x logsumexp_a "
            "(Q(s, a) / temperature) - Q(s, a_data)), added to each critic's squared TD "
            "error (with lagrangian: the weight alpha' is tuned and this scales the gap).")
    deterministic_backup: bool = setting(
        True, "training",
        doc="True: the critics' target is r + gamma min Q'(s', a'), a' ~ pi(s'), without "
            "SAC's -alpha log pi(a'|s') (the CQL paper's choice); False: with it.")
