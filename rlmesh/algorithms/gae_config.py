"""The advantage estimator's settings in RLlib's names (``use_critic``, ``use_gae``,
``lambda``): declared once here and mixed into the configs that estimate advantages from
a critic over sampled fragments (PPO, A2C and A3C, APPO with ``vtrace=False``)."""

from __future__ import annotations

from dataclasses import dataclass

from rlmesh.config.settings import setting


@dataclass(kw_only=True)
class GAESettings:
    use_critic: bool = setting(
        True, "training",
        doc="Learn a value function as the baseline and to bootstrap cut fragments; GAE "
            "needs it. False: the advantages are the discounted returns, no value loss.")
    use_gae: bool = setting(
        True, "training",
        doc="Advantages by Generalized Advantage Estimation with lambda; False: the "
            "discounted return (bootstrapped from the critic where the fragment is cut) "
            "minus the critic's value, which is GAE with lambda 1.")
    lambda_: float = setting(
        1.0, "training", key="lambda", ge=0, le=1,
        doc="GAE lambda: 0 bootstraps from the value function after one step (less "
            "variance, more bias), 1 uses the observed return up to the fragment's end.")

    def gae_lambda(self) -> float:
        """The lambda the advantages are computed with: ``lambda`` under GAE, else 1."""
        return self.lambda_ if self.use_gae else 1.0

    def _gae_problems(self) -> list[str]:
        if self.use_gae and not self.use_critic:
            return ["use_critic: GAE needs the value function; set use_critic=True or "
                    "use_gae=False"]
        return []
