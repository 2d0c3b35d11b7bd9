"""``input`` read on the env runners: runner i of n reads its own shard of the files
(``shard_files``) and serves fragments from it in place of its env, each fragment drawn
from one source of the input by its share; data reaches the driver only as train batches."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from rlmesh.offline.reader import DatasetError, OfflineDataset

if TYPE_CHECKING:
    from rlmesh.config.base import AlgorithmConfig


class ShardedInput:
    """A runner's sources: ``[(share, its shard of a dataset, or None for the env)]``.
    ``sample`` gives a fragment of the shard a draw picks, or None where the draw picks
    the env (the runner then samples its env as usual)."""

    def __init__(self, config: AlgorithmConfig, shard_index: int, num_shards: int,
                 policies: dict[str, Any], multi_agent: bool) -> None:
        source = config.input_
        mix = source if isinstance(source, dict) else {source: 1.0}
        options = dict(config.input_config)
        seed = None if config.seed is None else config.seed + 1000 * shard_index
        self.rng = np.random.default_rng(seed)
        self.sources: list[tuple[float, OfflineDataset | None]] = []
        for where, share in mix.items():
            dataset = None
            if where != "sampler":
                dataset = OfflineDataset(where, shard_index, num_shards,
                                         shuffle=options.get("shuffle", True), seed=seed,
                                         fmt=options.get("format"))
            self.sources.append((float(share), dataset))
        # Multi-agent: each policy of this runner that has steps in the shard, on its own
        # agents' trajectories; else every step for the one policy.
        self.policy_ids: list[str | None] = [None]
        for _, dataset in self.sources:
            if dataset is None:
                continue
            if multi_agent:
                self.policy_ids = [p for p in policies if dataset.episodes_of(p)]
                if not self.policy_ids:  # nothing to serve: sampling would never end
                    raise DatasetError(
                        f"input {dataset.source!r}: this runner's shard {dataset.files} has "
                        f"no steps of its policies {sorted(policies)}")
            for pid in self.policy_ids:
                policy = policies[pid] if pid is not None else next(iter(policies.values()))
                dataset.check_spaces(policy.observation_space, policy.action_space,
                                     config.env, pid)
        self.multi_agent = multi_agent
        self.num_fragments = self.num_steps_read = 0

    @classmethod
    def from_config(cls, config: AlgorithmConfig, worker_index: int,
                    runner: Any) -> "ShardedInput | None":
        """The runner's shard when the algorithm reads ``input`` on its runners (its config
        class says ``reads_input_on_runners``), ``input`` names files and this is one of
        ``num_env_runners`` remote runners; else None (the driver reads, as with 0 runners)."""
        source = config.input_
        names_files = source != "sampler" and (not isinstance(source, dict)
                                               or any(k != "sampler" for k in source))
        if not (getattr(config, "reads_input_on_runners", False) and names_files
                and config.num_env_runners > 0 and worker_index > 0
                and not runner.in_evaluation):
            return None
        from rlmesh.env.multi_agent_env import is_multi_agent

        return cls(config, worker_index - 1, config.num_env_runners, runner.policies,
                   is_multi_agent(runner.envs[0]))

    def sample(self, num_steps: int) -> dict[str, Any] | None:
        shares = np.array([s for s, _ in self.sources])
        dataset = self.sources[self.rng.choice(len(shares), p=shares / shares.sum())][1]
        if dataset is None:
            return None
        parts = {pid: dataset.sample(num_steps, policy_id=pid) for pid in self.policy_ids}
        steps = sum(p["env_steps"] for p in parts.values())
        self.num_fragments += 1
        self.num_steps_read += steps
        head = {"env_steps": steps, "episodes": [], "num_env_errors": 0,
                "num_nonfinite_steps_skipped": 0}
        if self.multi_agent:
            return {**head, "policy_batches": parts, "agent_steps": steps}
        return {**parts[None], **head}

    def stats(self) -> dict[str, Any]:
        datasets = [d for _, d in self.sources if d is not None]
        return {"num_records_skipped": sum(d.num_skipped for d in datasets),
                "skipped": [p for d in datasets for p in d.problems][:5],
                "num_episodes": sum(len(d.episodes) for d in datasets),
                "num_steps": sum(d.num_steps for d in datasets),
                "files": [str(f) for d in datasets for f in d.files],
                "num_fragments_served": self.num_fragments,
                "num_steps_served": self.num_steps_read}

