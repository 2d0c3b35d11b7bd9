"""The offline_data group (RLlib's ``.offline_data()``): where samples are written (``output``)
and read from (``input``), and how a policy is scored on logged data (off-policy estimation).
Mixed into AlgorithmConfig; each setting is declared here once, as in base.py."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from rlmesh.config.settings import setting

#: The off-policy estimators rlmesh.offline.estimators implements, by RLlib's short names.
ESTIMATORS = ("is", "wis")


def estimator_kind(name: Any) -> str | None:
    """'is' or 'wis' for a method's name or RLlib class path (…ImportanceSampling,
    …WeightedImportanceSampling); None for anything else."""
    if not isinstance(name, str):
        return None
    short = name.rpartition(".")[2].lower()
    if short in ESTIMATORS:
        return short
    return {"importancesampling": "is", "weightedimportancesampling": "wis"}.get(short)


@dataclass(kw_only=True)
class OfflineSettings:
    input_: str | list | dict = setting(
        "sampler", "offline_data", key="input",
        doc="Where training samples come from: 'sampler' (the env runners), a directory, a "
            "file or a glob of JSON-lines / Parquet files (or a list of them), or a mix "
            "{'sampler': 0.4, '/data/expert': 0.6} giving each source its share of every "
            "train batch. With num_env_runners 0 the driver reads the data; with runners, each "
            "reads its own shard of the files and draws each fragment from one source by "
            "the shares (MARWIL, BC). A train batch of whole episodes is split "
            "between data-parallel learners. Episodes cut into several records are joined "
            "by eps_id (docs/offline.md).")
    input_config: dict = setting(
        {}, "offline_data",
        doc="Options of the dataset reader: 'shuffle' (bool, default True: episodes in "
            "random order each pass) and 'format' ('json' or 'parquet'; default: by each "
            "file's extension).")
    output: str | None = setting(
        None, "offline_data",
        doc="A directory every env runner writes what it samples to (one writer per "
            "runner, its own files: output-<time>_worker-<i>_<n>.json or .parquet): every "
            "column of the fragment, episode ids, t, agent_index and policy_id, in RLlib's "
            "SampleBatch JSON-lines format or Parquet. None: nothing is written.")
    output_format: Literal["json", "parquet"] = setting(
        "json", "offline_data",
        doc="'json': JSON lines, one SampleBatch record per line, which RLlib's JsonReader "
            "loads (uncompressed columns); 'parquet': Parquet files (pip install "
            "'rlmesh[data]'), several times smaller and faster to read for large data.")
    output_max_file_size: int = setting(
        64 * 1024 * 1024, "offline_data", gt=0,
        doc="A runner starts a new output file once its current one reaches this many "
            "bytes (RLlib's 64 MiB default).")
    output_compress_columns: list = setting(
        [], "offline_data",
        doc="JSON output: these columns (e.g. ['obs', 'new_obs']) are written zlib-"
            "compressed and base64-encoded with their dtype and shape. RLlib's own "
            "compression pickles, which rlmesh never reads or writes, so RLlib cannot load "
            "compressed columns: keep [] for data RLlib must read. Parquet compresses every "
            "column (zstd) regardless.")
    off_policy_estimation_methods: list | dict = setting(
        [], "offline_data", aliases=("input_evaluation",),
        doc="Off-policy estimators scored on the dataset each iteration, reported under "
            "off_policy_estimation/<name>/{v_behavior, v_target, v_gain}: 'is' (importance "
            "sampling) and 'wis' (weighted IS), as a list of names or RLlib's dict "
            "{name: {'type': 'is'}}. They need the logged action_logp (or action_prob).")
    off_policy_estimation_episodes: int = setting(
        20, "offline_data", ge=1,
        doc="Episodes of the dataset each estimator scores per iteration.")

    def offline_data(self, **kwargs):
        """Set the offline_data group (see ``fields_table("offline_data")``)."""
        return self._set("offline_data", kwargs)

    def _offline_checks(self) -> list[str]:
        """Cross checks of this group (called from AlgorithmConfig._cross_checks)."""
        problems = []
        methods = self.off_policy_estimation_methods
        names = ([m.get("type", n) if isinstance(m, dict) else n for n, m in methods.items()]
                 if isinstance(methods, dict) else list(methods))
        for name in names:
            if estimator_kind(name) is None:
                problems.append(f"off_policy_estimation_methods: unknown estimator {name!r}; "
                                f"known: {', '.join(ESTIMATORS)}")
        mix = self.input_
        if isinstance(mix, dict):
            shares = list(mix.values())
            if not mix or not all(isinstance(s, (int, float)) and s > 0 for s in shares):
                problems.append(f"input: a mix maps each source to a share > 0, got {mix!r}")
            elif abs(sum(shares) - 1.0) > 1e-6:
                problems.append(f"input: the shares of a mix add up to 1, got {sum(shares):g}")
        return problems
