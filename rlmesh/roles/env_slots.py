"""One env of a sampler and how it recovers: recreated after a failure with a seed of its
own (so that it does not replay the failure), its reset retried; the seeds of runners' envs."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Callable

import gymnasium as gym

from rlmesh.callbacks import Episode

log = logging.getLogger(__name__)

SEED_STRIDE = 1000  # env i of runner w starts from seed + SEED_STRIDE * w + i
RESEED_STRIDE = 7919  # a recreated env gets a new seed, so it does not replay its failure
MAX_RESET_ATTEMPTS = 3  # recreate-and-reset tries in a row before the env counts as broken
# Failed steps of one env, each followed by a recreation, with no good step between, before
# the env counts as broken: recreating it again would only fail again, unseen.
MAX_STEP_ERRORS_IN_A_ROW = 5


class EnvError(RuntimeError):
    """An env that fails however often it is recreated; the message's first line says
    which and how often, the rest is the first traceback."""


@dataclass
class EnvSlot:
    """One env and where its current episode stands."""

    env: gym.Env
    seed: int | None  # for the next reset; used once
    obs: Any = None  # what the next action is taken from
    episode: Episode | None = None
    start_row: int = 0  # row of the current fragment where the episode began
    restarts: int = 0
    errors_in_a_row: int = 0  # failed steps since its last good one

    def recreate(self, make_env: Callable[[int], gym.Env], index: int,
                 base_seed: int | None) -> None:
        """A new env ``index`` in place of this one, which failed."""
        try:
            self.env.close()
        except Exception:
            log.warning("env %d raised in close() after failing", index, exc_info=True)
        self.restarts += 1
        self.env = make_env(index)
        self.seed = None if base_seed is None else base_seed + RESEED_STRIDE * self.restarts

    def reset_env(self, make_env: Callable[[int], gym.Env], index: int, base_seed: int | None,
                  counters: dict[str, int]) -> tuple[Any, dict[str, Any] | None]:
        """The env's reset ``(obs, info)``; a reset that raises is logged, counted in
        ``counters["env_errors"]`` and tried again on a recreated env, at most
        ``MAX_RESET_ATTEMPTS`` times in all."""
        for attempt in range(MAX_RESET_ATTEMPTS):
            try:
                obs, info = self.env.reset(seed=self.seed)
                break
            except Exception:
                log.exception("env %d raised in reset() (attempt %d of %d); recreating it",
                              index, attempt + 1, MAX_RESET_ATTEMPTS)
                counters["env_errors"] += 1
                self.recreate(make_env, index, base_seed)
        else:
            raise RuntimeError(f"env {index} failed to reset {MAX_RESET_ATTEMPTS} times in a "
                               "row, each time recreated; the log has the tracebacks")
        self.seed = None
        return obs, info
