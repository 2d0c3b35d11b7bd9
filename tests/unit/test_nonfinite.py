"""The guards against NaN and inf without processes: the sampler's rows (which episode is
dropped), the learner's own check of a train batch that reached it from elsewhere (a policy
client's chunks), gradients applied from elsewhere (A3C), and the code names a checkpoint
or a message may hold (rlmesh.runtime.import_path)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from rlmesh.algorithms import PPOConfig
from rlmesh.runtime.import_path import code_names, resolve_sent
from rlmesh.policy.numpy_mlp import NumpyMLPPolicy
from rlmesh.rl.finite import NonFiniteError
from rlmesh.roles.env_runner import default_policy_specs
from rlmesh.roles.env_sampler import EnvSampler
from rlmesh.roles.learner import Learner
from tests.integration.hostile_envs import PoisonedCartPole

SPACES = (gym.spaces.Box(-np.inf, np.inf, (4,), np.float32), gym.spaces.Discrete(2))


def sampler(env_config: dict, on_nonfinite: str) -> EnvSampler:
    cfg = PPOConfig()
    policy = NumpyMLPPolicy(*SPACES, cfg)
    return EnvSampler(lambda i: PoisonedCartPole(env_config), 2, policy, seeds=[1, 2],
                      on_nonfinite=on_nonfinite)


@pytest.mark.parametrize("poison", [{"obs": "nan"}, {"reward": "inf"}])
def test_the_sampler_drops_the_episode_of_a_non_finite_step(poison):
    s = sampler({**poison, "at": 3}, "skip")
    fragment = s.sample(20)
    assert fragment["num_nonfinite_steps_skipped"] >= 2  # both envs, at their third step
    assert np.isfinite(fragment["obs"]).all() and np.isfinite(fragment["rewards"]).all()
    assert np.isfinite(fragment["next_obs"]).all()
    # The dropped episodes' rows are masked: no episode of the fragment reached step 3.
    assert not fragment["mask"][:3].any() and all(e["length"] < 3 for e in fragment["episodes"])
    assert fragment["env_steps"] == int(fragment["mask"].sum())
    with pytest.raises(NonFiniteError, match=r"env 0 returned a non-finite .*on_nonfinite='skip'"):
        sampler({**poison, "at": 3}, "raise").sample(20)


def learner(on_nonfinite: str) -> Learner:
    cfg = PPOConfig().fault_tolerance(on_nonfinite=on_nonfinite)
    return Learner(cfg, default_policy_specs(*SPACES, cfg))


def test_the_learner_checks_a_batch_from_elsewhere_before_updating():
    batch = {"obs": np.zeros((8, 2, 4), np.float32), "rewards": np.zeros((8, 2), np.float32)}
    batch["rewards"][3, 1] = np.inf
    skipping = learner("skip")
    weights = skipping.get_weights()
    assert skipping.update_from_batch({"default_policy": batch}, 0) == {
        "default_policy": {"num_nonfinite_batches_skipped": 1}}
    after = skipping.get_weights()
    assert all(np.array_equal(weights["default_policy"][k], after["default_policy"][k])
               for k in weights["default_policy"])
    with pytest.raises(NonFiniteError, match="policy 'default_policy'.*'rewards' holds inf"):
        learner("raise").update_from_batch({"default_policy": batch}, 0)


def test_gradients_from_elsewhere_are_applied_only_when_finite():
    policy = learner("skip").policy("default_policy")
    grads = {name: np.full(p.shape, np.nan, np.float32)
             for name, p in policy.model.named_parameters()}
    before = {k: v.copy() for k, v in policy.get_weights().items()}
    policy.apply_gradients(grads)
    assert policy.num_nonfinite_updates_skipped == 1
    assert all(np.array_equal(before[k], v) for k, v in policy.get_weights().items())


def test_code_names_in_plain_data():
    data = {"config": {"env": "ale_py:ALE/Pong-v5", "address": "tcp://127.0.0.1:5555",
                       "callbacks_class": "pkg.mod:Cb", "model": {"custom_model": "/x/m.py:Net"},
                       "note": "a: b"}}
    assert sorted(code_names(data)) == [("config.callbacks_class", "pkg.mod:Cb"),
                                        ("config.env", "ale_py:ALE/Pong-v5"),
                                        ("config.model.custom_model", "/x/m.py:Net")]


def test_a_sent_name_resolves_only_within_the_roots_never_a_file():
    assert resolve_sent("tests.integration.code_marker:env_name", "fn", {"tests"}, None)
    for path, roots in (("/tmp/x.py:f", {"tests"}), ("x.py:f", {"x"}), ("os:system", {"tests"}),
                        ("__mp_main__:f", {"tests"})):
        with pytest.raises(PermissionError):
            resolve_sent(path, "fn", roots, None)


def test_a_nan_observation_never_reaches_the_mean_std_filter():
    from rlmesh.rl.filters import MeanStdFilter

    s = sampler({"obs": "nan", "at": 3}, "skip")
    s.obs_filter = MeanStdFilter((4,))
    s.sample(20)
    assert np.isfinite(s.obs_filter.rs.mean).all() and np.isfinite(s.obs_filter.rs.std).all()
