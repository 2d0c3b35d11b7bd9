"""Observation filters for learning from data (``observation_filter``): the filter fitted on
a dataset's observations, and episodes or fragments read from it put through one, so that the
learner, the evaluation runners and ``compute_single_action`` all see the same numbers."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from rlmesh.offline.reader import OfflineDataset
from rlmesh.offline.records import NEW_OBS
from rlmesh.rl.columns import Columns
from rlmesh.rl.filters import MeanStdFilter, NoFilter, make_filter


def dataset_filter(datasets: list[OfflineDataset], name: str, obs_space: gym.Space
                   ) -> NoFilter:
    """``observation_filter`` ``name`` for learning from ``datasets``: 'MeanStdFilter' takes
    the mean and std of every observation in them, which stay fixed where nothing is sampled
    to update them (the offline literature's state normalisation: CORL's ``normalize``,
    d3rlpy's observation scaler). 'NoFilter': observations as recorded."""
    obs_filter = make_filter(name, obs_space)
    if isinstance(obs_filter, MeanStdFilter):
        for dataset in datasets:
            for e in dataset.episodes:
                obs_filter.rs.push(np.asarray(e[Columns.OBS]).reshape(-1, *obs_filter.shape))
    return obs_filter


# Observation columns of an episode (obs, new_obs) and of a fragment read from one (obs,
# the bootstrap observations next_obs and trunc_obs).
OBS_COLUMNS = (Columns.OBS, NEW_OBS, Columns.NEXT_OBS, "trunc_obs")


def filtered(rows: dict[str, Any], obs_filter: NoFilter) -> dict[str, Any]:
    """``rows`` (an episode, a fragment) with its observations as the policy reads them:
    each of ``OBS_COLUMNS`` through ``obs_filter``, without updating it; the rest shared."""
    if type(obs_filter) is NoFilter:
        return rows
    return {k: obs_filter(v, update=False) if k in OBS_COLUMNS else v for k, v in rows.items()}
