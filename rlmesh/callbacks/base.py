"""The callbacks class users subclass (``Callbacks``: RLlib's ``DefaultCallbacks`` and
``RLlibCallback``), its hook names, and the check that every public method is one."""

from __future__ import annotations

from typing import Any

from rlmesh.callbacks.episode import Episode


class Callbacks:
    """Subclass and override what you need; every hook takes keyword arguments only and
    may ignore the ones it does not use (accept ``**kwargs`` to stay compatible).

    Where each runs: ``on_algorithm_init``, ``on_train_result``, ``on_evaluate_start/end``
    and ``on_checkpoint_loaded`` in the driver; the env, episode and sample hooks in the env
    runner process that steps the env (``env_runner`` is that EnvRunner:
    ``env_runner.worker_index``, ``env_runner.envs``; evaluation runners included,
    ``env_runner.in_evaluation`` True); ``on_learn_on_batch`` in the learner.

    RLlib's new stack's arguments come too: ``metrics_logger`` (the env runner's
    ``env_runner.metrics``, a MetricsLogger whose values reach ``result["env_runners"]``;
    in ``on_train_result`` the driver's ``algorithm.metrics``, reaching the result's top
    level), and for the episode hooks ``env`` (that index's env as the user's creator built
    it; the vector env under a vector sampler) and ``rl_module`` (the policy's model).
    ``episode`` is a ``SingleAgentEpisode`` (multi-agent: a ``MultiAgentEpisode``) whose
    ``get_observations(-1)`` and other getters read its steps so far. A method
    whose name is not a hook is an error (a misspelled hook would never run). Name the
    class by import path (``"my_pkg.cb:MyCallbacks"``) or pass it, defined at module
    level, to ``config.callbacks(...)``.
    """

    def on_algorithm_init(self, *, algorithm: Any, **kwargs: Any) -> None:
        """In the driver, once every process is up and the first weights are published."""

    def on_environment_created(self, *, env_runner: Any, env: Any, env_context: Any,
                               **kwargs: Any) -> None:
        """After an env runner made one of its envs (again after an env was recreated)."""

    def on_episode_created(self, *, episode: Episode, env_runner: Any, env_index: int,
                           **kwargs: Any) -> None:
        """Before the env's reset that starts ``episode`` (it has no observation yet)."""

    def on_episode_start(self, *, episode: Episode, env_runner: Any, env_index: int,
                         **kwargs: Any) -> None:
        """After the env's reset; ``episode.last_observation`` is the first observation."""

    def on_episode_step(self, *, episode: Episode, env_runner: Any, env_index: int,
                        **kwargs: Any) -> None:
        """After each step, the last one included (before ``on_episode_end``)."""

    def on_episode_end(self, *, episode: Episode, env_runner: Any, env_index: int,
                       **kwargs: Any) -> None:
        """When the episode terminated or was truncated; set ``episode.custom_metrics`` here."""

    def on_postprocess_trajectory(self, *, env_runner: Any, policy_id: str, policies: dict,
                                  postprocessed_batch: dict, **kwargs: Any) -> None:
        """In the env runner, on each fragment before it ships: its time-major ``[T, B]``
        columns, which may be changed in place (rewards reshaped, say). Returns and
        advantages are computed later, on the learner, from what this leaves."""

    def on_sample_end(self, *, env_runner: Any, samples: dict, **kwargs: Any) -> None:
        """In the env runner, after each fragment (``samples``) is complete."""

    def on_learn_on_batch(self, *, policy: Any, train_batch: dict, result: dict,
                          **kwargs: Any) -> None:
        """In the learner, before ``policy`` updates on ``train_batch``; keys put in
        ``result`` join the policy's statistics (info/learner/<policy id>)."""

    def on_train_result(self, *, algorithm: Any, result: dict, **kwargs: Any) -> None:
        """In the driver, after each training iteration (its evaluation included); may add
        keys to ``result``."""

    def on_evaluate_start(self, *, algorithm: Any, **kwargs: Any) -> None:
        """In the driver, before an evaluation."""

    def on_evaluate_end(self, *, algorithm: Any, evaluation_metrics: dict,
                        **kwargs: Any) -> None:
        """In the driver, after an evaluation; ``evaluation_metrics`` may be changed."""

    def on_checkpoint_loaded(self, *, algorithm: Any, **kwargs: Any) -> None:
        """In the driver, after ``algorithm.restore()`` loaded a checkpoint."""


HOOKS = tuple(name for name in vars(Callbacks) if name.startswith("on_"))


def check_hooks(cls: type) -> None:
    """ConfigError naming the closest hook for a public method of ``cls`` (below Callbacks)
    that is not one: ``on_episode_ended`` would otherwise never be called. Helpers of the
    class are fine when their name neither starts with ``on_`` nor nearly spells a hook."""
    import difflib

    from rlmesh.config.settings import ConfigError

    for klass in cls.__mro__:
        if klass is Callbacks or not issubclass(klass, Callbacks):
            continue
        for name, value in vars(klass).items():
            if not callable(value) or name.startswith("_") or name in HOOKS:
                continue
            close = difflib.get_close_matches(name, HOOKS, n=1, cutoff=0.5)
            near = difflib.get_close_matches(name, HOOKS, n=1, cutoff=0.8)
            if not name.startswith("on_") and not near:
                continue  # the class's own helper ("episode_ended" is still caught)
            hint = f"did you mean {close[0]!r}?" if close else f"the hooks are {', '.join(HOOKS)}"
            raise ConfigError(f"callbacks {cls.__qualname__}.{name} is not a callback hook, "
                            f"so it would never be called; {hint}")


DefaultCallbacks = Callbacks  # RLlib's older name
