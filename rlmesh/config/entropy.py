"""The entropy bonus's schedule, ``entropy_coeff_schedule`` in RLlib's format: declared once
here and mixed into the configs with an entropy bonus (PPO, A2C and A3C, IMPALA and APPO),
each of which declares its own ``entropy_coeff`` default."""

from __future__ import annotations

from dataclasses import dataclass

from rlmesh.config.schedules import validate_schedule, value_at
from rlmesh.config.settings import setting


@dataclass(kw_only=True)
class EntropySchedule:
    entropy_coeff_schedule: list | None = setting(
        None, "training",
        doc="entropy_coeff by env steps, [[timestep, coeff], ...], linear between points; "
            "replaces entropy_coeff when set.")

    def entropy_coeff_at(self, timestep: int) -> float:
        """The entropy bonus's weight after ``timestep`` env steps."""
        if self.entropy_coeff_schedule:
            return value_at(self.entropy_coeff_schedule, timestep)
        return float(self.entropy_coeff)  # type: ignore[attr-defined]  (the config's own)

    def _entropy_schedule_problems(self) -> list[str]:
        if self.entropy_coeff_schedule is None:
            return []
        try:
            validate_schedule(self.entropy_coeff_schedule)
        except ValueError as e:
            return [f"entropy_coeff_schedule: {e}"]
        return []
