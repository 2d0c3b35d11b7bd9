"""``Policy``: the one contract between an algorithm and the roles, in RLlib's names.

Runner side: ``compute_actions`` on a batch of observations (with recurrent state, previous
actions and rewards), ``get_initial_state``, weights in. Learner side: ``update`` on the
time-major batch the learner received (by default: the samples cut into trajectories, each
through ``postprocess_trajectory``, then ``learn_on_batch``), weights and state out.

The same class is built in the env runners (to act) and in the learner (to learn); the
learner's weights reach the runners' copies through the param server. A policy names
itself by import path (``runner_class``), never pickled; torch is not imported here.
"""

from __future__ import annotations

import sys
from typing import Any

import gymnasium as gym
import numpy as np

from rlmesh.rl.columns import ColumnSpec, SampleBatch, postprocessed_samples
from rlmesh.rl.nested_spaces import from_column, to_column


class PolicyError(TypeError):
    """A policy class that does not implement the contract."""


#: Errors in the user's policy code that say all there is to say in one line: a policy class
#: that breaks the contract, a loss that asks for a column the batch lacks, a NaN or inf
#: from an env or in an update (``on_nonfinite``), a device out of memory in an update (it
#: names the batch sizes to lower). By class name: they cross processes so.
POLICY_ERRORS = ("PolicyError", "MissingColumn", "NonFiniteError", "LearnerOutOfMemory")


class Policy:
    """Subclass and implement ``compute_actions`` and ``learn_on_batch`` (RLlib's "policy
    from scratch"); ``rlmesh.policy.TorchPolicy`` implements both for a torch model and a
    loss. Constructed as ``Cls(observation_space, action_space, config)``, ``config`` the
    algorithm's config (attribute or item access: ``config.lr``, ``config["lr"]``)."""

    #: Columns this policy adds to its samples beyond the env's, by name: state_in/out and
    #: extra action outputs are also discovered from the first ``compute_actions`` call.
    view_requirements: dict[str, ColumnSpec] = {}
    #: The env runner acting with this copy (1..num_env_runners; 0: the driver's or a
    #: learner's), set by the runner: per-runner exploration reads it (APEX's epsilons).
    worker_index: int = 0

    def __init__(self, observation_space: gym.Space, action_space: gym.Space, config: Any) -> None:
        self.observation_space = observation_space
        self.action_space = action_space
        # A config built outside an algorithm may hold defaults that depend on the
        # observations ('auto'); this policy's resolve them (the algorithm's already did).
        resolve = getattr(config, "for_observations", None)
        self.config = resolve([observation_space]) if resolve is not None else config
        self.global_timestep = 0

    # --- runner side ---

    def compute_actions(self, obs_batch: np.ndarray, state_batches: list[np.ndarray] | None = None,
                        prev_action_batch: np.ndarray | None = None,
                        prev_reward_batch: np.ndarray | None = None,
                        explore: bool | None = None, timestep: int | None = None,
                        **kwargs: Any) -> tuple[np.ndarray, list[np.ndarray], dict[str, np.ndarray]]:
        """``(actions [N, ...], state_outs [each N, ...], extra_fetches {name: [N, ...]})``
        for a batch of N observations; every extra fetch becomes a sample column."""
        raise PolicyError(f"{type(self).__name__} does not implement compute_actions(obs_batch, "
                          "state_batches, ...) -> (actions, state_outs, extra_fetches)")

    def compute_single_action(self, obs: Any, state: list[Any] | None = None,
                              prev_action: Any = None, prev_reward: Any = None,
                              explore: bool | None = None, timestep: int | None = None
                              ) -> tuple[Any, list[Any], dict[str, Any]]:
        """``compute_actions`` on a batch of one: ``(action, state_out, extra_fetches)``.
        ``obs`` (and ``prev_action``) as the env gives them, nested dicts / tuples for
        Tuple/Dict spaces; the action comes back the same way."""
        actions, states, extra = self.compute_actions(
            to_column(self.observation_space, obs)[None], [np.asarray(s)[None] for s in state or []],
            None if prev_action is None else to_column(self.action_space, prev_action, "action")[None],
            None if prev_reward is None else np.asarray([prev_reward], np.float32),
            explore=explore, timestep=timestep)
        return (from_column(self.action_space, np.asarray(actions)[0]),
                [np.asarray(s)[0] for s in states], {k: np.asarray(v)[0] for k, v in extra.items()})

    def score_actions(self, obs_batch: np.ndarray, actions: np.ndarray, state_batches: Any = None,
                      prev_action_batch: Any = None, prev_reward_batch: Any = None
                      ) -> dict[str, np.ndarray]:
        """The extra outputs ``compute_actions`` would have given had it chosen ``actions``
        (``action_logp``, ``action_dist_inputs``): what a policy server records when a
        simulator chose the action itself (``log_action``). A recurrent policy scores from
        the given state (and previous action/reward) and adds the state the step leaves
        (``state_out_i``)."""
        raise PolicyError(f"{type(self).__name__} cannot score actions it did not choose; "
                          "log_action needs a policy with an action distribution")

    def compute_log_likelihoods(self, actions: np.ndarray, obs_batch: np.ndarray) -> np.ndarray:
        """Log-probability of each action given its observation (RLlib's name)."""
        return self.score_actions(obs_batch, actions)["action_logp"]

    def get_initial_state(self) -> list[Any]:
        """One entry per recurrent state tensor (RLlib's ``get_initial_state``); [] when the
        policy has no state."""
        return []

    def is_recurrent(self) -> bool:
        return len(self.get_initial_state()) > 0

    def seed(self, seed: int | None) -> None:
        """Seed this copy's sampling; runners give each copy its own seed."""

    # --- learner side ---

    def postprocess_trajectory(self, sample_batch: SampleBatch,
                               other_agent_batches: dict[str, Any] | None = None,
                               episode: Any = None) -> SampleBatch:
        """One trajectory's samples (one env, one episode or the part of it in the batch, in
        time order, ``next_obs`` the observation after its last step) -> the same with added
        columns (returns, advantages). Runs where the batch is learned from."""
        return sample_batch

    def learn_on_batch(self, samples: SampleBatch) -> dict[str, float]:
        """Learn from flat samples; returns statistics to report."""
        raise PolicyError(f"{type(self).__name__} does not implement learn_on_batch(samples) "
                          "-> stats")

    def update(self, batch: dict[str, Any], timesteps: int, **kwargs: Any) -> dict[str, float]:
        """What the learner calls with the time-major batch it received: the valid samples,
        each trajectory through ``postprocess_trajectory`` when the class overrides it, then
        ``learn_on_batch``. ``timesteps`` is the run's env steps sampled so far."""
        self.global_timestep = timesteps
        post = (self.postprocess_trajectory
                if type(self).postprocess_trajectory is not Policy.postprocess_trajectory else None)
        samples = postprocessed_samples(batch, post)
        stats = dict(self.learn_on_batch(samples) or {})
        stats.setdefault("num_env_steps_trained", samples.count)
        return stats

    # --- weights and state ---

    def get_weights(self) -> dict[str, np.ndarray]:
        """What runners need to act as this policy, as ``{name: array}``."""
        return {}

    def set_weights(self, weights: dict[str, Any]) -> None:
        pass

    def get_state(self) -> dict[str, Any]:
        """Everything a checkpoint keeps (plain data, arrays or tensors)."""
        return {"weights": self.get_weights(), "global_timestep": self.global_timestep}

    def set_state(self, state: dict[str, Any]) -> None:
        self.set_weights(state.get("weights", {}))
        self.global_timestep = int(state.get("global_timestep", 0))

    def export_model(self, export_dir: str, onnx: int | None = None) -> str:
        raise PolicyError(f"{type(self).__name__} has no torch model to export; "
                          "export_model is for TorchPolicy subclasses")

    @classmethod
    def with_updates(cls, **overrides: Any) -> type:
        """RLlib's ``with_updates``: a subclass with some functions replaced (by path: the
        template is a higher layer, ``rlmesh.policy.policy_template.with_updates``)."""
        from rlmesh.runtime.import_path import import_object

        return import_object("rlmesh.policy.policy_template:with_updates")(cls, **overrides)

    # --- where it runs ---

    @classmethod
    def runner_class(cls, config: Any, observation_space: gym.Space | None = None,
                     action_space: gym.Space | None = None) -> str:
        """Import path of the class env runners act with: this class, unless a lighter
        implementation of the same policy exists (``TorchPolicy``'s numpy fast path)."""
        return class_path(cls)


def class_path(cls: type) -> str:
    """The import path other processes load ``cls`` by (a script's classes by its file)."""
    from rlmesh.runtime.import_path import path_of

    path = path_of(cls, "policy class")
    # A class made by a template under one name and assigned to another (RLlib's
    # ``CustomPolicy = PPOTorchPolicy.with_updates(name="MyPPO", ...)``): named by the latter.
    module = sys.modules.get(cls.__module__)
    if module is not None and getattr(module, cls.__qualname__, None) is not cls:
        alias = next((k for k, v in vars(module).items() if v is cls), None)
        if alias is not None:
            return f"{path.rpartition(':')[0]}:{alias}"
    return path


def check_policy_class(cls: Any, where: str) -> type[Policy]:
    """``cls`` if it is a Policy subclass that implements the runner and learner sides, else
    a one-line PolicyError saying what is missing."""
    if not (isinstance(cls, type) and issubclass(cls, Policy)):
        raise PolicyError(f"{where}: {cls!r} is not a subclass of rlmesh.policy.Policy")
    if cls.compute_actions is Policy.compute_actions:
        raise PolicyError(f"{where}: {cls.__qualname__} does not implement compute_actions")
    if cls.learn_on_batch is Policy.learn_on_batch and cls.update is Policy.update:
        raise PolicyError(f"{where}: {cls.__qualname__} implements neither learn_on_batch nor "
                          "update, so it cannot learn")
    if "<" in cls.__qualname__:
        raise PolicyError(f"{where}: {cls.__qualname__} is defined inside a function; policies "
                          "are sent to other processes by import path, so define it at module level")
    check_importable(cls, where)
    return cls


def check_importable(cls: type, where: str) -> None:
    """A one-line error unless other processes find ``cls`` under its import path (a class
    made by build_policy or build_algorithm must be assigned to a module-level name equal
    to the name it was given)."""
    from rlmesh.runtime.import_path import import_object

    if cls.__module__ in ("__main__", "__mp_main__"):
        return  # named by the script's file; other processes run the script to find it
    path = class_path(cls)
    try:
        found = import_object(path) is cls
    except (ValueError, ImportError):
        found = False
    if not found:
        raise PolicyError(f"{where}: other processes cannot import {cls.__qualname__} as {path}; "
                          f"assign it to the module-level name {cls.__qualname__!r} in "
                          f"{cls.__module__}")
