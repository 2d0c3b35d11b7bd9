"""``PolicyAccess``: what a user calls on a run's policies (RLlib's names): get, add and remove a
policy, weights in and out, actions from the newest weights through the global observation
filter, and exports. ``Algorithm`` inherits it; the driver's policy copies live here."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from rlmesh.driver import acting, export, policies
from rlmesh.driver.inference import env_action
from rlmesh.driver.learner_failure import learner_calls
from rlmesh.policy.policy import Policy
from rlmesh.policy.policy_spec import build_policy_from_data
from rlmesh.rl.columns import DEFAULT_POLICY_ID


class PolicyAccess:
    """The policy calls of ``Algorithm``, on the run's attributes it sets (``RunView``'s, and
    ``env_runners``); its ``_policies`` come from ``_driver_policies``."""

    def _driver_policies(self) -> dict[str, Policy]:
        """The policies ``get_policy`` returns: the learner's own when it runs here, else
        copies that load the param server's newest weights when used (``get_policy``)."""
        self._copy_versions: dict[str, int] = {}  # the version each copy holds
        if self.learner_group.local is not None:
            return self.learner_group.local.policies
        return {pid: build_policy_from_data(spec, self.config, runner=False)
                for pid, spec in self.policy_specs.items()}

    def get_policy(self, policy_id: str = DEFAULT_POLICY_ID) -> Policy:
        """The policy ``policy_id`` (``compute_actions``, ``.model``, ``export_model``), at
        the newest published weights."""
        try:
            policy = self._policies[policy_id]
        except KeyError:
            raise KeyError(f"no policy {policy_id!r}; this algorithm has {sorted(self._policies)}") from None
        if self.learner_group.local is None:  # a copy: the param server's newest, if newer
            latest = self.mesh.param_server.latest(policy_id)
            if latest is not None and latest[0] > self._copy_versions.get(policy_id, -1):
                policy.set_weights(latest[1])
                self._copy_versions[policy_id] = latest[0]
        return policy

    def add_policy(self, policy_id: str, policy_cls: Any = None, **kwargs: Any) -> Policy:
        """Add a policy while training (RLlib's signature: ``observation_space``,
        ``action_space``, ``config``, ``policy_state``, ``policy_mapping_fn``,
        ``policies_to_train``); see ``policies.add_policy``."""
        data = policies.add_policy(self, policy_id, policy_cls, **kwargs)
        if self.learner_group.local is None:  # the driver's copy, at the weights published next
            self._policies[policy_id] = build_policy_from_data(data, self.config, runner=False)
        self.learner_group.publish([policy_id])
        return self.get_policy(policy_id)

    def remove_policy(self, policy_id: str, **kwargs: Any) -> None:
        """Remove a policy while training (``policy_mapping_fn``, ``policies_to_train``)."""
        policies.remove_policy(self, policy_id, **kwargs)
        self._policies.pop(policy_id, None)

    def get_weights(self, policies: list[str] | None = None) -> dict[str, dict[str, np.ndarray]]:
        """``{policy_id: {name: array}}``."""
        return self.learner_group.get_weights(policies)

    def set_weights(self, weights: dict[str, dict[str, Any]]) -> None:
        """Load ``{policy_id: {name: array}}`` into the learners and publish it."""
        self.env_runners.drop_sample_ahead()
        self.learner_group.set_weights(weights)
        self.learner_group.publish(list(weights))

    def compute_single_action(self, observation: Any, state: list[Any] | None = None,
                              explore: bool | None = False, policy_id: str = DEFAULT_POLICY_ID,
                              prev_action: Any = None, prev_reward: Any = None,
                              full_fetch: bool = False) -> Any:
        """The action for one observation, from the newest weights (driver-side copy), as
        the env takes it; with ``state`` (a recurrent policy) or ``full_fetch`` (RLlib's)
        ``(action, state_out, extra)`` (start an episode from
        ``get_policy().get_initial_state()``; ``prev_action`` and ``prev_reward`` for a model
        that reads them). A recurrent policy without ``state`` warns once
        (``acting.warn_without_state`` says why it does not refuse)."""
        policy = self.get_policy(policy_id)
        if state is None and policy.is_recurrent():
            acting.warn_without_state(self, policy_id, stacklevel=2)
        # Nested (Tuple/Dict) observations go as they are: MeanStdFilter takes Box ones only.
        obs = self.obs_filter(observation, update=False)
        action, state_out, extra = policy.compute_single_action(
            obs, state, prev_action, prev_reward, explore=explore)
        action = env_action(self.config, policy.action_space, action)
        return (action, state_out, extra) if state is not None or full_fetch else action

    def compute_action(self, observation: Any, state: list[Any] | None = None,
                       prev_action: Any = None, prev_reward: Any = None,
                       policy_id: str = DEFAULT_POLICY_ID, full_fetch: bool = False,
                       explore: bool | None = None) -> Any:
        """RLlib's Trainer-era name and argument order for ``compute_single_action``;
        ``explore`` None follows the config's ``explore``, as the Trainer's did."""
        return self.compute_single_action(observation, state, explore, policy_id, prev_action,
                                          prev_reward, full_fetch)

    def compute_actions(self, observations: dict[Any, Any], state: dict[Any, Any] | None = None,
                        prev_action: dict[Any, Any] | None = None,
                        prev_reward: dict[Any, Any] | None = None,
                        policy_id: str = DEFAULT_POLICY_ID, full_fetch: bool = False,
                        explore: bool | None = None) -> Any:
        """RLlib's old API: ``{key: obs}`` -> ``{key: action}`` (``acting.compute_actions``)."""
        return acting.compute_actions(self, observations, state, prev_action, prev_reward,
                                      policy_id, full_fetch, explore)

    def export_policy_model(self, export_dir: str | Path, policy_id: str = DEFAULT_POLICY_ID,
                            onnx: int | None = None) -> str:
        """RLlib's name for ``get_policy(policy_id).export_model(export_dir, onnx)``
        (docs/export.md); returns the model file's path."""
        return export.export_policy_model(self, self.get_policy(policy_id), export_dir,
                                          policy_id, onnx)

    def export_policy_checkpoint(self, export_dir: str | Path,
                                 policy_id: str = DEFAULT_POLICY_ID) -> str:
        """A checkpoint of policy ``policy_id`` alone (``export.export_policy_checkpoint``:
        ``InferencePolicy.from_checkpoint(dir)`` and ``rlmesh rollout`` load it)."""
        with learner_calls(self):
            state = self.learner_group.get_state()
        return export.export_policy_checkpoint(self, state, export_dir, policy_id)
