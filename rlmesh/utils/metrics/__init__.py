"""RLlib new stack's metrics names (``rlmesh.utils.metrics``; the keys of the result dict
that scripts index) and ``MetricsLogger`` (``metrics_logger.py``)."""

from rlmesh.utils.metrics.metrics_logger import MetricsLogger, Stats

# Groups of the result.
ENV_RUNNER_RESULTS = "env_runners"
EVALUATION_RESULTS = "evaluation"
LEARNER_RESULTS = "learners"
ALL_MODULES = "__all_modules__"  # the learners' values over all modules
TIMERS = "timers"
FAULT_TOLERANCE_STATS = "fault_tolerance"

# Episodes (result["env_runners"][...]).
EPISODE_RETURN_MEAN = "episode_return_mean"
EPISODE_RETURN_MIN = "episode_return_min"
EPISODE_RETURN_MAX = "episode_return_max"
EPISODE_LEN_MEAN = "episode_len_mean"
EPISODE_LEN_MIN = "episode_len_min"
EPISODE_LEN_MAX = "episode_len_max"
NUM_EPISODES = "num_episodes"
NUM_EPISODES_LIFETIME = "num_episodes_lifetime"

# Counters.
NUM_ENV_STEPS_SAMPLED = "num_env_steps_sampled"
NUM_ENV_STEPS_SAMPLED_LIFETIME = "num_env_steps_sampled_lifetime"
NUM_ENV_STEPS_TRAINED = "num_env_steps_trained"
NUM_ENV_STEPS_TRAINED_LIFETIME = "num_env_steps_trained_lifetime"
NUM_AGENT_STEPS_SAMPLED = "num_agent_steps_sampled"
NUM_AGENT_STEPS_SAMPLED_LIFETIME = "num_agent_steps_sampled_lifetime"
NUM_MODULE_STEPS_TRAINED = "num_module_steps_trained"
TRAINING_ITERATION = "training_iteration"

__all__ = [name for name in dir() if name.isupper()] + ["MetricsLogger", "Stats"]
