"""Evolution strategies without processes: the noise table (deterministic, one file per
node), centered ranks, the mirrored gradient estimates of ES and ARS on a known quadratic,
the flat-parameter policy and its checkpoint state, the configs' rules."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from rlmesh.algorithms.ars_config import ARSConfig
from rlmesh.algorithms.es import join_rollouts
from rlmesh.algorithms.es_config import ESConfig
from rlmesh.config.base import ConfigError
from rlmesh.policy.es_policy import ARSPolicy, ESPolicy
from rlmesh.rl.es_math import Adam, ars_gradient, centered_ranks, es_gradient
from rlmesh.rl.noise_table import NoiseTable, make_noise


def test_noise_table_is_the_same_from_the_same_seed_and_made_once_per_directory(tmp_path):
    a = NoiseTable.shared(100_000, seed=7, directory=tmp_path / "node-a")
    b = NoiseTable.shared(100_000, seed=7, directory=tmp_path / "node-b")
    np.testing.assert_array_equal(np.asarray(a.noise), np.asarray(b.noise))
    np.testing.assert_array_equal(np.asarray(a.noise), make_noise(100_000, seed=7))
    assert not np.array_equal(np.asarray(a.noise), make_noise(100_000, seed=8))
    noise = np.asarray(a.noise)
    assert abs(noise.mean()) < 0.02 and abs(noise.std() - 1) < 0.02
    # A second process of the node maps the same file, read-only, without writing it again.
    (path,) = (tmp_path / "node-a").glob("noise-7-100000.f32")
    mtime = path.stat().st_mtime_ns
    c = NoiseTable.shared(100_000, seed=7, directory=tmp_path / "node-a")
    assert path.stat().st_mtime_ns == mtime
    assert isinstance(c.noise, np.memmap) and not c.noise.flags.writeable
    with pytest.raises(ValueError):
        c.noise[0] = 1.0


def test_noise_table_made_in_chunks_equals_one_draw(monkeypatch):
    import rlmesh.rl.noise_table as nt

    whole = nt.make_noise(10_000, seed=3)
    monkeypatch.setattr(nt, "_CHUNK", 999)
    np.testing.assert_array_equal(nt.make_noise(10_000, seed=3), whole)


def test_sample_index_leaves_room_for_the_whole_perturbation():
    table = NoiseTable(make_noise(1000))
    rng = np.random.default_rng(0)
    assert max(table.sample_index(rng, 990) for _ in range(200)) <= 10
    with pytest.raises(ValueError, match="noise_size"):
        table.sample_index(rng, 1001)


def test_centered_ranks_span_minus_half_to_half_by_order_only():
    x = np.array([[10.0, -3.0], [1e6, 2.0]])
    np.testing.assert_allclose(centered_ranks(x), [[1 / 6, -0.5], [0.5, -1 / 6]], rtol=1e-6)
    # Blind to the scale and to outliers: a monotone transform changes nothing.
    np.testing.assert_array_equal(centered_ranks(np.exp(x / 1e5)), centered_ranks(x))


def quadratic_returns(table, theta, center, sigma, n, rng):
    """Mirrored pairs of f(theta) = -|theta - center|^2, as runners would report them."""
    dim = theta.size
    indices = np.array([table.sample_index(rng, dim) for _ in range(n)])
    returns = np.array([[-np.sum((theta + s * sigma * table.get(i, dim) - center) ** 2)
                         for s in (1, -1)] for i in indices])
    return indices, returns


def cosine(a, b):
    return float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))


def test_mirrored_gradient_estimates_point_along_the_true_gradient_of_a_quadratic():
    table = NoiseTable(make_noise(200_000, seed=1))
    rng = np.random.default_rng(0)
    theta, center = np.zeros(10), np.linspace(-1, 1, 10)
    indices, returns = quadratic_returns(table, theta, center, 0.05, 2000, rng)
    true = -2 * (theta - center)  # ascent direction of -|theta - c|^2
    assert cosine(es_gradient(table, indices, returns, 10), true) > 0.9
    assert cosine(ars_gradient(table, indices, returns, 10, top=2000), true) > 0.95
    # ARS with every direction and no rank transform: (r+ - r-) / 2s is exactly the
    # directional derivative here, so the estimate is grad / std(returns) * 2s on average.
    g = ars_gradient(table, indices, returns, 10, top=2000) * returns.std() / (2 * 0.05)
    np.testing.assert_allclose(g, true, atol=0.3)  # 2000 pairs: sampling error ~0.08


def test_adam_climbs_the_quadratic_with_the_es_estimate():
    table = NoiseTable(make_noise(100_000, seed=2))
    rng = np.random.default_rng(1)
    theta, center = np.zeros(5), np.array([0.5, -0.3, 0.2, 0.0, 0.4])
    adam = Adam(5, stepsize=0.05)
    for _ in range(150):
        indices, returns = quadratic_returns(table, theta, center, 0.05, 50, rng)
        theta = adam.step(theta, es_gradient(table, indices, returns, 5))
    assert np.linalg.norm(theta - center) < 0.1


def es_policy(cls=ESPolicy, config=None, **spaces):
    config = config or ESConfig().training(model={"fcnet_hiddens": [8]}, noise_size=10_000)
    return cls(spaces.get("obs", gym.spaces.Box(-1, 1, (4,))),
               spaces.get("act", gym.spaces.Discrete(2)), config)


def test_policy_parameters_are_one_flat_vector_the_layers_view():
    policy = es_policy()
    assert policy.dim == 4 * 8 + 8 + 8 * 2 + 2
    theta = np.arange(policy.dim, dtype=np.float32) / policy.dim
    policy.set_flat(theta)
    np.testing.assert_array_equal(policy._layers[0][0], theta[:32].reshape(4, 8))
    obs = np.ones((3, 4), np.float32)
    h = np.tanh(obs @ theta[:32].reshape(4, 8) + theta[32:40])
    logits = h @ theta[40:56].reshape(8, 2) + theta[56:58]
    np.testing.assert_array_equal(policy.compute_actions(obs)[0], logits.argmax(-1))
    with pytest.raises(ValueError, match="58"):
        policy.set_weights({"theta": np.zeros(5)})
    # A table too small for the policy is named when the policy is built, not mid-run.
    small = ESConfig().training(model={"fcnet_hiddens": [8]}, noise_size=50)
    with pytest.raises(ValueError, match="raise noise_size"):
        es_policy(config=small)


def test_box_actions_are_the_outputs_and_ars_starts_linear_at_zero():
    config = ARSConfig().training(noise_size=10_000)
    policy = es_policy(ARSPolicy, config, obs=gym.spaces.Box(-1, 1, (3,)),
                       act=gym.spaces.Box(-2, 2, (1,)))
    assert policy.dim == 3 + 1 and not policy.theta.any()
    policy.set_flat(np.array([1, 0, 0, 0.5], np.float32))
    actions = policy.compute_actions(np.array([[0.2, 9, 9]], np.float32))[0]
    assert actions.shape == (1, 1) and actions[0, 0] == pytest.approx(0.7)


def test_update_steps_theta_and_the_state_round_trips_with_its_optimizer(tmp_path, monkeypatch):
    monkeypatch.setenv("RLMESH_NOISE_DIR", str(tmp_path))
    policy = es_policy()
    before = policy.get_flat()
    rng = np.random.default_rng(0)
    batch = {"noise_indices": rng.integers(0, 9000, 20), "returns": rng.normal(size=(20, 2)),
             "lengths": np.full((20, 2), 10)}
    stats = policy.update(batch, 100)
    assert not np.array_equal(policy.get_flat(), before)
    assert stats["num_env_steps_trained"] == 400 and stats["num_noisy_episodes"] == 40
    state = policy.get_state()
    other = es_policy()
    other.set_state(state)
    np.testing.assert_array_equal(other.get_flat(), policy.get_flat())
    assert other.optimizer.t == 1
    policy.update(batch, 200)
    other.update(batch, 200)  # the same Adam moments: the same next step
    np.testing.assert_allclose(other.get_flat(), policy.get_flat(), rtol=1e-6)


def test_join_rollouts_counts_every_step_and_keeps_evaluation_episodes_apart():
    reply = {"noise_indices": np.array([3, 9]), "returns": np.ones((2, 2), np.float32),
             "lengths": np.full((2, 2), 5, np.int32), "eval_returns": np.array([7.0]),
             "eval_lengths": np.array([4]), "env_steps": 24}
    batch = join_rollouts([reply, {**reply, "eval_returns": np.zeros(0), "eval_lengths": np.zeros(0)}])
    assert batch["env_steps"] == 48 and batch["returns"].shape == (4, 2)
    assert batch["episodes"] == [{"return": 7.0, "length": 4}]


def test_configs_refuse_learner_processes_and_more_used_than_evaluated_directions():
    with pytest.raises(ConfigError, match="num_learners: ES has no learner process"):
        ESConfig().environment("CartPole-v1").learners(num_learners=1).validate()
    with pytest.raises(ConfigError, match="rollouts_used: at most num_rollouts"):
        ARSConfig().training(num_rollouts=8, rollouts_used=9).validate()
    with pytest.raises(ConfigError, match="num_envs_per_env_runner"):
        ARSConfig().env_runners(num_envs_per_env_runner=4).validate()
    with pytest.raises(ConfigError, match="sample_async: ES's runners evaluate perturbations"):
        ESConfig().env_runners(sample_async=True).validate()
    # Declared once each, with RLlib's names, and settable from dicts and builders.
    assert ESConfig.from_dict({"episodes_per_batch": 50, "stepsize": 0.02}).stepsize == 0.02
    assert ARSConfig().model["fcnet_hiddens"] == []


def test_es_and_ars_are_registered():
    from rlmesh.driver.algorithm_registry import get_algorithm_class

    assert get_algorithm_class("ES").__name__ == "ES"
    assert get_algorithm_class("ars").__name__ == "ARS"
