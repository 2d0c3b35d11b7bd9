"""Offline data: what runners write (``output``), what offline algorithms read (``input``),
off-policy estimators and converters from other tools' datasets. docs/offline.md."""

from rlmesh.offline.reader import DatasetError, OfflineDataset, resolve_files, shard_files
from rlmesh.offline.writer import OutputWriter

__all__ = ["DatasetError", "OfflineDataset", "OutputWriter", "resolve_files", "shard_files"]
