"""What an env runner does for policies added or removed while training (self-play
leagues): build or drop its acting copy, and take the new multi-agent settings (mapping
function, policies_to_train) as plain data."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rlmesh.policy.policy_spec import build_policy_from_data

if TYPE_CHECKING:
    from rlmesh.config.base import AlgorithmConfig


class MultiAgentPolicies:
    """Mixed into EnvRunner: ``add_policy`` / ``remove_policy`` called by the driver."""

    policies: dict[str, Any]
    versions: dict[str, int]
    config: AlgorithmConfig
    sampler: Any
    _main_script: str | None
    _inbox: dict[str, Any]

    def _wanted_versions(self) -> dict[str, int]:
        """A multi-agent runner asks only for the policies its agents have acted with, and
        for those it never loaded: a league of frozen snapshots costs a runner nothing for
        the snapshots it does not play (one first used later acts, for one fragment, with
        the weights it was loaded with)."""
        from rlmesh.roles.multi_agent_sampler import MultiAgentSampler

        if not isinstance(self.sampler, MultiAgentSampler) or not self.sampler.used_policies:
            return dict(self.versions)
        used = self.sampler.used_policies
        return {pid: v for pid, v in self.versions.items() if pid in used or v < 0}

    def set_multi_agent(self, settings: dict[str, Any]) -> None:
        """Take new multi_agent settings (``{"policy_mapping_fn": path, ...}``)."""
        from rlmesh.roles.multi_agent_sampler import MultiAgentSampler, bind_policies

        for key, value in settings.items():
            setattr(self.config, key, value)
        if isinstance(self.sampler, MultiAgentSampler):
            bind_policies(self.sampler, self.policies, self.config, self._main_script)

    def add_policy(self, policy_id: str, spec: dict[str, Any], settings: dict[str, Any]) -> None:
        """A new policy (weights follow from the param server), then ``settings``."""
        self.policies[policy_id] = build_policy_from_data(spec, self.config, runner=True)
        self.versions[policy_id] = -1
        self.set_multi_agent(settings)

    def remove_policy(self, policy_id: str, settings: dict[str, Any]) -> None:
        """Drop a policy; episodes in which an agent acts with it are discarded first."""
        from rlmesh.roles.multi_agent_sampler import MultiAgentSampler

        self.policies.pop(policy_id, None)
        self.versions.pop(policy_id, None)
        self._inbox.pop(policy_id, None)  # a push of its weights not yet taken
        if getattr(self, "policy_id", None) == policy_id:  # the runner's "main" policy id
            self.policy_id = next(iter(self.policies))
            self.sampler.policy = self.policies[self.policy_id]
        self.set_multi_agent(settings)  # the new episodes below map without it
        if isinstance(self.sampler, MultiAgentSampler):
            self.sampler.drop_episodes_of(policy_id)
