"""ESConfig: OpenAI-ES's settings (Salimans et al. 2017) in RLlib's names and defaults, and
``EvolutionConfig``, the settings ES and ARS share (the noise, evaluation episodes, and the
rule that both update in the driver, with no learner process)."""

from __future__ import annotations

from dataclasses import dataclass

from rlmesh.config.base import AlgorithmConfig, setting
from rlmesh.rl.spec import MODEL_DEFAULTS


@dataclass(kw_only=True)
class EvolutionConfig(AlgorithmConfig, defaults={"observation_filter": "MeanStdFilter"}):
    """What evolution strategies share: perturbations drawn from a noise table, evaluated by
    runners (one env each) that send back returns only; the driver steps the parameters."""

    noise_stdev: float = setting(
        0.02, "training", gt=0,
        doc="Scale s of the perturbations: the runners evaluate theta + s * e and "
            "theta - s * e, e a slice of the noise table.")
    noise_size: int = setting(
        25_000_000, "training", ge=1,
        doc="Entries (float32) of the noise table, made once per node from a fixed seed and "
            "mapped read-only by every process there (a file under $RLMESH_NOISE_DIR, "
            "default the temporary directory). RLlib's default is 250M (1 GB); its tuned "
            "examples use 25M (100 MB), this default. Must exceed the policy's parameters.")
    eval_prob: float = setting(
        0.003, "training", ge=0, le=1,
        doc="Probability that a runner's next episode evaluates the unperturbed policy "
            "instead of a perturbation; those episodes are the results' episode_reward_mean.")
    action_noise_std: float = setting(
        0.01, "training", ge=0,
        doc="Std of Gaussian noise added to Box actions in perturbed episodes (not in "
            "evaluation episodes); Discrete actions take no noise.")

    def _cross_checks(self) -> list[str]:
        problems = super()._cross_checks()
        name = type(self).__name__.removesuffix("Config")
        if self.num_learners != 0:
            problems.append(f"num_learners: {name} has no learner process (the driver steps the "
                            f"parameters from the returns the runners send); set 0, got "
                            f"{self.num_learners}")
        if self.num_envs_per_env_runner != 1:
            problems.append(f"num_envs_per_env_runner: a {name} runner evaluates one episode "
                            f"at a time in one env; scale out with num_env_runners, got "
                            f"{self.num_envs_per_env_runner}")
        if self.sample_async:
            problems.append(f"sample_async: {name}'s runners evaluate perturbations on their "
                            f"own already; there is no train batch to sample ahead")
        return problems


# RLlib's ESConfig.__init__ values (noise_size: see its doc).
_ES_DEFAULTS = {
    "train_batch_size": 10000,
    "num_env_runners": 2,
    "model": dict(MODEL_DEFAULTS),
}


@dataclass(kw_only=True)
class ESConfig(EvolutionConfig, defaults=_ES_DEFAULTS):
    """OpenAI-ES, configured as in RLlib::

        ESConfig().environment("CartPole-v1").training(episodes_per_batch=50, stepsize=0.01)

    Each iteration evaluates at least ``episodes_per_batch`` episodes and
    ``train_batch_size`` env steps of mirrored perturbations.
    """

    #: The algorithm build() makes from this config.
    algorithm_path = "rlmesh.algorithms.es:ES"

    episodes_per_batch: int = setting(
        1000, "training", ge=2,
        doc="Perturbed episodes (half as many mirrored pairs) evaluated per iteration at "
            "least; an iteration also runs on until train_batch_size env steps.")
    stepsize: float = setting(
        0.01, "training", gt=0,
        doc="Adam's step size on the gradient estimate.")
    l2_coeff: float = setting(
        0.005, "training", ge=0,
        doc="Weight decay: l2_coeff * theta is taken off the gradient estimate each step.")
