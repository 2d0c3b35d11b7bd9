"""RLlib's Trainer-era constructor on today's Algorithm: ``PPOTrainer(config=dict, env=...)``
becomes the config object ``Algorithm`` runs with (today: ``PPOConfig().environment(env)``,
then ``.build()``). A dict spelled as only RLlib spells keys (or given with ``env``) starts
from RLlib's classic-stack defaults, as ``rlmesh train -f`` does for such a file."""

from __future__ import annotations

from typing import Any

from rlmesh.config.base import AlgorithmConfig, ConfigError


def trainer_config(config_class: type[AlgorithmConfig], config: Any, env: Any = None,
                   logger_creator: Any = None) -> AlgorithmConfig:
    """The config ``Algorithm(config, env, logger_creator)`` runs with. ``env``: a gymnasium
    id, a name given to ``register_env``, an import path, or a gymnasium.Env class built
    with the env_config; it replaces the config's env, as in RLlib. A config object given
    alone is returned as it is."""
    if isinstance(config, AlgorithmConfig) and env is None and logger_creator is None:
        return config
    if logger_creator is not None:
        raise ConfigError("logger_creator: rlmesh's Algorithm does not log its results itself; "
                          "log each train() result with rlmesh.results.ResultLogger(dir), or "
                          "train with rlmesh train / rlmesh.tune.run, which write result.json, "
                          "progress.csv and TensorBoard")
    if config is None:
        config = {}
    if isinstance(config, dict):
        from rlmesh.config.rllib import rllib_keys_in

        trainer_era = env is not None or bool(rllib_keys_in(config_class, config))
        config = (config_class.rllib_defaults("old").update_from_dict(config) if trainer_era
                  else config_class.from_dict(config))
    elif isinstance(config, AlgorithmConfig):
        config = config.copy() if env is not None else config
    else:
        raise ConfigError(f"config: expected a dict of config keys or a {config_class.__name__}, "
                          f"got {type(config).__name__}")
    if env is not None:
        config.environment(env=env)
    return config
