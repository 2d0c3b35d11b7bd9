"""ImpalaConfig: the settings of the asynchronous pipeline (in-flight fragments, the learner
queue, replay, broadcasts, aggregators) and of IMPALA's V-trace loss, in RLlib's names."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from rlmesh.config.base import AlgorithmConfig, setting
from rlmesh.config.entropy import EntropySchedule
from rlmesh.config.optimizer import OptimizerSettings
from rlmesh.config.streaming import StreamingSettings
from rlmesh.rl.spec import MODEL_DEFAULTS

# RLlib's IMPALAConfig.__init__ values for settings AlgorithmConfig already declares.
_IMPALA_DEFAULTS = {
    "min_time_s_per_iteration": 10.0,
    "lr": 5e-4,
    "rollout_fragment_length": 50,
    "train_batch_size": 500,
    "num_env_runners": 2,
    "grad_clip": 40.0,
    "num_epochs": 1,
    "model": {**MODEL_DEFAULTS, "vf_share_layers": True},
}


@dataclass(kw_only=True)
class ImpalaConfig(AlgorithmConfig, StreamingSettings, OptimizerSettings, EntropySchedule,
                   defaults=_IMPALA_DEFAULTS):
    """IMPALA (Espeholt et al. 2018): runners sample without waiting for the learner, the
    learner corrects for their policy lag with V-trace. Configured as in RLlib::

        ImpalaConfig().environment("CartPole-v1").training(lr=5e-4, vf_loss_coeff=0.5)
    """

    #: The algorithm build() makes from this config.
    algorithm_path = "rlmesh.algorithms.impala:IMPALA"

    # --- V-trace ---
    vtrace: bool = setting(
        True, "training",
        doc="Correct for the runners' policy lag with V-trace. False: train as if on-policy "
            "on each fragment: IMPALA's loss becomes A3C's (advantages and value targets "
            "are the discounted returns bootstrapped from the learner's critic, GAE with "
            "lambda 1); APPO's becomes PPO's clipped surrogate with the ratio to the "
            "behaviour policy and GAE advantages (use_gae, lambda, use_critic), no target "
            "network.")
    vtrace_clip_rho_threshold: float = setting(
        1.0, "training", gt=0,
        doc="V-trace's rho-bar: importance weights in the value targets are clipped here.")
    vtrace_clip_pg_rho_threshold: float = setting(
        1.0, "training", gt=0,
        doc="Clip of the importance weights in the policy-gradient advantages.")
    vtrace_lambda: float = setting(
        1.0, "training", ge=0, le=1,
        doc="V-trace's lambda (the IMPALA paper's remark 2, rlax's lambda_): the traces c_t "
            "scaled by it, trading the targets' variance for bias as GAE's lambda does; "
            "on-policy, vs - V are GAE's advantages at this lambda. 1 (RLlib's V-trace, "
            "which has none): the n-step returns.")
    center_advantages: bool | Literal["auto"] = setting(
        "auto", "training",
        doc="Subtract each minibatch's mean from the policy-gradient advantages (a constant "
            "baseline: no bias, less variance). 'auto': for Box (Gaussian) actions only. "
            "Before the critic has learned the returns' scale, every advantage has the same "
            "sign; a Gaussian lowers the density of every sampled action by widening, and its "
            "log_std ran to the clip within 40k steps of RLlib's pendulum-appo.yaml, where "
            "nothing moves it back (docs/benchmark_log.md, 'V-trace on continuous actions'). "
            "A softmax has no such direction, so discrete actions keep RLlib's loss. Under "
            "IMPALA's V-trace the baseline is weighted as the advantages are (rho_pg), so a "
            "stale sample keeps its near-zero weight.")
    vtrace_drop_last_ts: bool = setting(
        False, "training",
        doc="True: drop each fragment's last step and bootstrap from its observation (older "
            "RLlib); False: train on every step and bootstrap from the observation after it. "
            "Read with vtrace=True only.")

    # --- loss ---
    vf_loss_coeff: float = setting(
        0.5, "training", ge=0, doc="Weight of the value loss in the total loss.")
    entropy_coeff: float = setting(
        0.01, "training", ge=0, doc="Weight of the entropy bonus subtracted from the loss.")

    # --- optimizer (opt_type and RMSProp's settings: config/optimizer.py) ---
    separate_vf_optimizer: bool = setting(
        False, "training", key="_separate_vf_optimizer",
        doc="Train the value branch with an optimizer of its own at _lr_vf (needs "
            "vf_share_layers=False).")
    lr_vf: float = setting(
        5e-4, "training", key="_lr_vf", gt=0,
        doc="Learning rate of the value optimizer when _separate_vf_optimizer is set.")
    after_train_step: Any = setting(
        None, "training",
        doc="A function (or its import path 'pkg.mod:fn') called in the learner process as "
            "fn(learner, stats) after every update.")

    # --- the asynchronous pipeline (and config/streaming.py's in-flight fragments and
    # broadcast_interval) ---
    learner_queue_size: int = setting(
        3, "training", ge=1,
        doc="Train batches waiting for each learner, at most: each waiting batch adds to "
            "the policy lag of those behind it.")
    learner_queue_timeout: float = setting(
        300.0, "training", gt=0,
        doc="Seconds a learner waits for a train batch before the run stops with an error "
            "(runners dead or stuck).")
    minibatch_buffer_size: int = setting(
        1, "training", ge=1,
        doc="Train batches the learner cycles through; with num_sgd_iter > 1 each is "
            "trained on num_sgd_iter times before it is replaced.")
    epochs_in_update: bool = setting(
        False, "training",
        doc="True: the learner makes its num_epochs passes over a train batch inside one "
            "update, as PPO's update does (targets computed once, one target-network sync "
            "and one weights broadcast per batch). False (RLlib's APPO and IMPALA): each "
            "pass is an update of its own, the batch replayed from the minibatch buffer "
            "(so with minibatch_buffer_size > 1 the passes over a batch are interleaved "
            "with other batches'), its targets recomputed and the weights published after "
            "every pass.")
    replay_proportion: float = setting(
        0.0, "training", ge=0,
        doc="Replayed train batches mixed in per new one (0.5: one replayed per two new).")
    replay_buffer_num_slots: int = setting(
        0, "training", ge=0, doc="Train batches kept for replay (replay_proportion > 0).")
    max_policy_lag: int | None = setting(
        None, "training", ge=0,
        doc="Train batches sampled more than this many policy versions ago are dropped "
            "(and counted); None keeps every batch.")
    num_aggregation_workers: int = setting(
        0, "learners", ge=0,
        doc="Aggregator processes between runners and learners: each takes the fragments "
            "of its share of the runners and builds train batches; 0: the learners do.")
    aggregators_per_node: int = setting(
        0, "learners", ge=0,
        doc="Aggregators on each node that has runners, each taking its own node's runners' "
            "fragments, so only joined train batches cross the network (tree aggregation, "
            "docs/scale.md); on one machine, this many in all. Replaces "
            "num_aggregation_workers' count when above 0.")

    def _cross_checks(self) -> list[str]:
        problems = super()._cross_checks()
        problems += self._entropy_schedule_problems()
        if self.rollout_fragment_length == "auto":
            problems.append("rollout_fragment_length: IMPALA needs a number of steps per "
                            "fragment (RLlib's default: 50), got 'auto'")
        if self.batch_mode != "truncate_episodes":
            problems.append("batch_mode: IMPALA samples 'truncate_episodes' fragments, got "
                            f"{self.batch_mode!r}")
        if self.num_aggregation_workers > max(1, self.num_env_runners):
            problems.append(f"num_aggregation_workers: more aggregators "
                            f"({self.num_aggregation_workers}) than env runners "
                            f"({self.num_env_runners}) leaves some with no input; use at most "
                            f"{max(1, self.num_env_runners)}")
        if self.replay_proportion > 0 and self.replay_buffer_num_slots < 1:
            problems.append("replay_buffer_num_slots: replay_proportion > 0 needs at least one "
                            "slot")
        if self.separate_vf_optimizer and self.model.get("vf_share_layers", True):
            problems.append("_separate_vf_optimizer: needs a value branch of its own; set "
                            "model={'vf_share_layers': False}")
        if self.policy_server_address is not None:
            problems.append("policy_server_address: external simulators feed synchronous "
                            "algorithms (PPO) only so far")
        return problems

    def _driver_side_cpus(self) -> float:
        # RLlib's IMPALA: the aggregators join the driver's bundle, next to the learner
        # (per node ones sit beside their node's runners instead).
        return 0.0 if self.aggregators_per_node else float(self.num_aggregation_workers)

    def warnings(self) -> list[str]:
        """Settings that work but are probably not what was meant."""
        out = []
        if self.num_aggregation_workers > 1 and self.num_aggregation_workers > self.num_env_runners / 2:
            out.append(f"num_aggregation_workers={self.num_aggregation_workers} is more than half "
                       f"the env runners ({self.num_env_runners}): each aggregator would serve "
                       f"fewer than two; {max(1, self.num_env_runners // 2)} or fewer is "
                       "usually enough")
        return out
