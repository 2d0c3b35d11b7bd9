"""RLlib's ray.rllib.utils / ray.rllib.execution module paths that Trainer-era code imports
(IMPALA's trainer source imports them all): the markers work, the execution operators are
refused in one line naming what to write instead."""

from __future__ import annotations

import importlib
import warnings

import pytest

from rlmesh.policy.policy import Policy
from rlmesh.utils.annotations import DeveloperAPI, OverrideToImplementCustomLogic, PublicAPI, override
from rlmesh.utils.deprecation import DEPRECATED_VALUE, deprecation_warning


def test_override_checks_the_parent_and_markers_change_nothing():
    class Mine(Policy):
        @override(Policy)
        def compute_actions(self, obs_batch, state_batches=None, **kw):
            return obs_batch, [], {}

        @OverrideToImplementCustomLogic
        def hook(self):
            return 1

    assert Mine.hook(None) == 1 and DeveloperAPI(len) is len and PublicAPI(stability="beta")(len) is len
    with pytest.raises(NameError, match="'comptue_actions' is not a method of it"):
        class Typo(Policy):
            @override(Policy)
            def comptue_actions(self):
                pass


def test_deprecation_warning_warns_or_raises():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        deprecation_warning("old_key", "new_key")
    assert "`old_key` is deprecated; use `new_key` instead" in str(caught[0].message)
    with pytest.raises(ValueError, match="old_key"):
        deprecation_warning("old_key", error=True)
    assert DEPRECATED_VALUE == -1


@pytest.mark.parametrize("module,name", [
    ("rlmesh.execution.learner_thread", "LearnerThread"),
    ("rlmesh.execution.multi_gpu_learner_thread", "MultiGPULearnerThread"),
    ("rlmesh.execution.tree_agg", "gather_experiences_tree_aggregation"),
    ("rlmesh.execution.replay_ops", "MixInReplay"),
    ("rlmesh.execution.concurrency_ops", "Concurrently"),
])
def test_execution_operators_are_refused_in_one_line(module, name):
    with pytest.raises(ImportError) as refused:
        exec(f"from {module} import {name}", {})
    text = str(refused.value)
    assert "\n" not in text and name in text and "training_step" in text
    assert importlib.import_module(module).__name__ == module


def test_tf_policy_modules_name_the_torch_class():
    with pytest.raises(ImportError, match="rlmesh.agents.ppo.ppo_torch_policy.PPOTorchPolicy"):
        exec("from rlmesh.agents.ppo.ppo_tf_policy import PPOTFPolicy", {})
    from rlmesh.agents.ppo.ppo_torch_policy import PPOTorchPolicy
    from rlmesh.algorithms.ppo import PPOTorchPolicy as today

    assert PPOTorchPolicy is today


def test_ppo_module_names_the_plan_operators_rllibs_ppo_defined():
    from rlmesh.agents.ppo.ppo import UpdateKL, warn_about_bad_reward_scales
    from rlmesh.execution import metric_ops

    assert UpdateKL is metric_ops.UpdateKL
    assert warn_about_bad_reward_scales is metric_ops.warn_about_bad_reward_scales


def test_torch_utils_explained_variance_is_rlmeshs():
    import torch

    from rlmesh.utils.torch_utils import explained_variance

    targets = torch.tensor([1.0, 2.0, 3.0, 4.0])
    assert float(explained_variance(targets, targets)) == 1.0
    assert float(explained_variance(targets, torch.zeros(4))) < 0.5
