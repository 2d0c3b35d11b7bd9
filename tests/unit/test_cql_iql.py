"""CQL's and IQL's losses on hand-made batches (no processes): the conservative term lowers
Q of actions the data did not take (continuous and discrete), the Lagrangian weight moves
the right way, behaviour cloning for bc_iters, IQL's expectile loss and advantage weighting;
their configs read RLlib's names; the dataset's n-step transitions and the checks of the
data against the env; RLlib's own CQL tuned examples load."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

from rlmesh.algorithms.cql import CQLTorchPolicy
from rlmesh.algorithms.cql_config import CQLConfig
from rlmesh.algorithms.cql_discrete import DiscreteCQLTorchPolicy
from rlmesh.algorithms.iql import IQLTorchPolicy, expectile_loss
from rlmesh.algorithms.iql_config import IQLConfig
from rlmesh.algorithms.offline_replay import check_action_range, dataset_transitions
from rlmesh.config.base import ConfigError
from rlmesh.driver.algorithm_registry import get_config_class
from rlmesh.offline.convert import write
from rlmesh.offline.reader import DatasetError, OfflineDataset, resolve_files
from rlmesh.offline.records import episode_record

OBS = gym.spaces.Box(-8.0, 8.0, (3,), np.float32)
BOX = gym.spaces.Box(-2.0, 2.0, (1,), np.float32)
CARTPOLE_OBS = gym.spaces.Box(-5.0, 5.0, (4,), np.float32)
TWO = gym.spaces.Discrete(2)
SMALL = {"fcnet_hiddens": [32, 32]}
DATA = "/data/made-up"  # validate() does not read it; these tests build policies only


@pytest.fixture(autouse=True)
def one_thread():
    """Small networks: one torch thread, as the learner runs them (threads fight on 2 cores)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def cql_policy(action_space=BOX, obs_space=OBS, autocast=None, **training):
    cfg = CQLConfig().training(q_model_config=SMALL, policy_model_config=SMALL, **training)
    cfg.offline_data(input=DATA)
    if autocast:
        cfg.learners(torch_autocast=autocast)
    cfg.validate()
    discrete = isinstance(action_space, gym.spaces.Discrete)
    cls = DiscreteCQLTorchPolicy if discrete else CQLTorchPolicy
    return cls(obs_space, action_space, cfg).for_learning()


def iql_policy(**training):
    cfg = IQLConfig().training(model=SMALL, **training).offline_data(input=DATA)
    cfg.validate()
    return IQLTorchPolicy(OBS, BOX, cfg).for_learning()


def fixed_batch(actions, rewards=None, n=64, obs_dim=3, seed=0):
    """Terminal transitions (the target is the reward alone) from random states."""
    rng = np.random.default_rng(seed)
    actions = np.asarray(actions)
    return {"obs": rng.normal(size=(n, obs_dim)).astype(np.float32),
            "next_obs": rng.normal(size=(n, obs_dim)).astype(np.float32),
            "actions": actions, "terminateds": np.ones(n, bool),
            "rewards": (np.zeros(n, np.float32) if rewards is None
                        else np.asarray(rewards, np.float32)),
            "discounts": np.zeros(n, np.float32), "weights": np.ones(n, np.float32)}


def train(policy, b, steps):
    """``steps`` gradient steps on ``b`` through the learner's entry point ([K, B])."""
    stats = policy.update({k: np.repeat(np.asarray(v)[None], steps, 0) for k, v in b.items()},
                          timesteps=0)
    assert stats["num_nonfinite_updates_skipped"] == 0
    return stats


def q_mean(policy, obs, actions):
    with torch.no_grad():
        return float(policy.model["q"].min(torch.as_tensor(obs), torch.as_tensor(actions)).mean())


# --- CQL ---


@pytest.mark.parametrize("weight, autocast", [(0.0, None), (5.0, None), (5.0, "bf16")])
def test_the_conservative_term_lowers_q_of_actions_the_data_did_not_take(weight, autocast):
    torch.manual_seed(0)
    policy = cql_policy(min_q_weight=weight, bc_iters=0, autocast=autocast)
    b = fixed_batch(np.full((64, 1), 0.5, np.float32))  # every logged action 0.5, reward 0
    train(policy, b, 150)
    # The actor acts in [-1, 1] (normalize_actions): -0.9 is far from anything logged.
    gap = q_mean(policy, b["obs"], b["actions"]) - q_mean(policy, b["obs"],
                                                         np.full((64, 1), -0.9, np.float32))
    if weight:
        assert gap > 0.5, gap  # the data's action valued above the unseen one
    else:
        assert abs(gap) < 0.5, gap  # plain TD learning says nothing of -0.9


@pytest.mark.parametrize("thresh, direction", [(100.0, -1), (-100.0, 1)])
def test_the_lagrangian_weight_grows_while_the_gap_exceeds_the_threshold(thresh, direction):
    torch.manual_seed(0)
    policy = cql_policy(lagrangian=True, lagrangian_thresh=thresh, bc_iters=0)
    stats = train(policy, fixed_batch(np.full((64, 1), 0.5, np.float32)), 20)
    assert "cur_alpha_prime_lr" in stats
    moved = float(policy.model.log_alpha_prime.detach())  # starts at 0 (alpha' = 1)
    assert moved * direction > 0, moved


def test_for_bc_iters_steps_the_actor_clones_the_logged_actions():
    torch.manual_seed(0)
    policy = cql_policy(bc_iters=1000, optimization_config={"actor_learning_rate": 1e-3})
    b = fixed_batch(np.full((64, 1), 0.8, np.float32))
    mode = lambda: float(np.mean(policy.compute_actions(b["obs"], explore=False)[0]))  # noqa: E731
    before = mode()
    train(policy, b, 200)
    assert abs(mode() - 0.8) < abs(before - 0.8) and abs(mode() - 0.8) < 0.2, (before, mode())


def test_after_bc_iters_the_actors_loss_moves_from_cloning_to_q_over_bc_blend_iters():
    """At each step of the blend the actor's loss is (1 - w) x cloning + w x SAC's loss, w
    rising linearly to 1 after bc_blend_iters steps; the same draws on each side."""
    b, bc, blend = 16, 10, 3
    torch.manual_seed(0)
    policy = cql_policy(bc_iters=bc, bc_blend_iters=blend)
    mb = {key: torch.as_tensor(v) for key, v in fixed_batch(
        np.random.default_rng(1).uniform(-1, 1, (b, 1)).astype(np.float32), n=b).items()}

    def actor_loss_at(step: int) -> float:
        policy.state["num_grad_steps"] = step
        torch.manual_seed(7)
        return float(policy.loss(mb)[1]["actor_loss"])

    cloning, sac = actor_loss_at(bc), actor_loss_at(bc + blend + 1)
    assert actor_loss_at(0) == pytest.approx(cloning) and abs(cloning - sac) > 0.1
    for j in range(1, blend + 1):
        w = j / (blend + 1)
        assert actor_loss_at(bc + j) == pytest.approx((1 - w) * cloning + w * sac, rel=1e-5)
    assert actor_loss_at(bc + 100) == pytest.approx(sac)
    # bc_blend_iters 0 (RLlib's CQL): the step after bc_iters is SAC's loss already.
    policy.config.bc_blend_iters = 0
    assert actor_loss_at(bc + 1) == pytest.approx(sac)


def test_the_deterministic_backup_leaves_the_entropy_out_of_the_target():
    torch.manual_seed(0)
    b = fixed_batch(np.zeros((64, 1), np.float32))
    b["discounts"][:] = 0.99
    losses = {}
    for backup in (True, False):
        torch.manual_seed(0)
        policy = cql_policy(deterministic_backup=backup, min_q_weight=0.0, initial_alpha=50.0)
        losses[backup] = float(train(policy, b, 1)["td_loss"])
    # alpha x (-log pi) of a broad policy is large: with it in the target the error is too.
    assert losses[False] > 10 * losses[True], losses


def test_discrete_cql_lowers_q_of_actions_the_data_did_not_take():
    torch.manual_seed(0)
    policy = cql_policy(TWO, CARTPOLE_OBS, min_q_weight=5.0)
    assert policy.config.double_q and policy.config.lr == 3e-4  # DQN's loss, CQL's rate
    b = fixed_batch(np.zeros(64, np.int64), obs_dim=4)  # action 0 always, reward 0
    stats = train(policy, b, 150)
    assert stats["cql_gap"] > 0
    with torch.no_grad():
        q = policy.model(torch.as_tensor(b["obs"]))[0]
    assert bool((q[:, 1] < q[:, 0]).all()) and float((q[:, 0] - q[:, 1]).mean()) > 0.5, q[:5]


def squashed_draw(inputs, z):
    """tanh(u), u ~ N(mean, std) given the standard normal draw z, and log pi(tanh(u)):
    the Gaussian's density less log(1 - tanh(u)^2) (actions in [-1, 1])."""
    mean, log_std = inputs.chunk(2, -1)
    std = log_std.clamp(-20.0, 2.0).exp()
    u = mean + std * z
    logp = torch.distributions.Normal(mean, std).log_prob(u) - torch.log(1 - torch.tanh(u) ** 2)
    return torch.tanh(u), logp.sum(-1)


def one_q(q, c, obs, action):
    """Critic c's Q of one state and action, through the critics' batched forward."""
    return float(q(obs[None], action[None])[c][0])


@pytest.mark.parametrize("densities", [True, False], ids=["CQL(H)", "no-densities"])
def test_cqls_losses_are_the_papers_terms_written_out_state_by_state(densities):
    """CQL(H) by its formula, one state and one critic at a time, through the critics'
    batched forward, against the loss rlmesh computes, from the same random draws: the
    seeded generator gives them in the order the loss takes them (a ~ pi(s), a' ~ pi(s'),
    num_actions policy draws at each s then at each s', the uniform actions). Without
    ``importance_sampling`` the logsumexp takes the sampled actions' Q as they are."""
    b, k, t, w, dims = 5, 3, 0.5, 5.0, 2
    box = gym.spaces.Box(-1.0, 1.0, (dims,), np.float32)
    torch.manual_seed(0)
    policy = cql_policy(box, bc_iters=0, num_actions=k, temperature=t, min_q_weight=w,
                        importance_sampling=densities)
    mb = {key: torch.as_tensor(v) for key, v in fixed_batch(
        np.random.default_rng(1).uniform(-1, 1, (b, dims)).astype(np.float32),
        rewards=np.arange(b), n=b).items()}
    mb["discounts"][:] = 0.9
    policy.state["num_grad_steps"] = 1  # as update() counts a step before its loss: past BC
    torch.manual_seed(7)
    _, stats = policy.loss(mb)

    torch.manual_seed(7)
    actor, q, q_target = policy.model["actor"], policy.model["q"], policy.target_model
    with torch.no_grad():
        pi, logp = squashed_draw(actor(mb["obs"]), torch.randn(b, dims))
        next_pi, _ = squashed_draw(actor(mb["next_obs"]), torch.randn(b, dims))
        z = torch.randn(2, b, k, dims)  # at s, at s'
        uniform = torch.rand(b, k, dims) * 2 - 1
        target = mb["rewards"] + 0.9 * torch.minimum(*q_target(mb["next_obs"], next_pi))
        td, gaps = 0.0, []
        for c in range(2):
            data_q = [one_q(q, c, mb["obs"][i], mb["actions"][i]) for i in range(b)]
            td += float(np.mean([(data_q[i] - float(target[i])) ** 2 for i in range(b)]))
            soft_max = []
            for i in range(b):
                s = mb["obs"][i]
                # The uniform density on [-1, 1]^dims is 2^-dims.
                scores = [one_q(q, c, s, uniform[i, j]) + densities * dims * np.log(2.0)
                          for j in range(k)]
                for source, at in enumerate((mb["obs"][i], mb["next_obs"][i])):
                    acts, logps = squashed_draw(actor(at[None]).expand(k, -1), z[source, i])
                    scores += [one_q(q, c, s, acts[j]) - densities * float(logps[j])
                               for j in range(k)]
                soft_max.append(t * np.log(np.sum(np.exp(np.array(scores) / t))))
            gaps.append(np.mean(soft_max) - np.mean(data_q))
        actor_loss = float((1.0 * logp - torch.minimum(*q(mb["obs"], pi))).mean())
    assert float(stats["td_loss"]) == pytest.approx(td, rel=1e-4)
    assert float(stats["cql_gap"]) == pytest.approx(np.mean(gaps), rel=1e-4, abs=1e-5)
    assert float(stats["cql_loss"]) == pytest.approx(w * sum(gaps), rel=1e-4, abs=1e-5)
    assert float(stats["critic_loss"]) == pytest.approx(td + w * sum(gaps), rel=1e-4)
    assert float(stats["actor_loss"]) == pytest.approx(actor_loss, rel=1e-4, abs=1e-5)


# --- IQL ---


def test_the_expectile_loss_is_half_the_squared_error_at_one_half_and_asymmetric_above():
    diff = torch.tensor([-2.0, -1.0, 0.5, 3.0])
    assert torch.allclose(expectile_loss(diff, 0.5).mean(), 0.5 * (diff ** 2).mean())
    upper = expectile_loss(diff, 0.9)
    assert torch.allclose(upper, torch.tensor([0.4, 0.1, 0.225, 8.1]))


def test_iql_value_regresses_to_an_upper_expectile_of_q():
    torch.manual_seed(0)
    policy = iql_policy(expectile=0.9, value_lr=1e-2, critic_lr=1e-2)
    n = 64
    rewards = np.where(np.arange(n) % 2 == 0, 0.0, 1.0)  # half the actions pay 1, half 0
    actions = np.where(rewards[:, None] > 0, 0.5, -0.5).astype(np.float32)
    b = fixed_batch(actions, rewards, n=n)
    b["obs"][:] = 1.0  # one state: V(s) the 0.9-expectile of {0, 1}, i.e. 0.9
    for _ in range(3):
        train(policy, b, 200)
    with torch.no_grad():
        v = float(policy.model["v"](torch.as_tensor(b["obs"][:1])))
    assert 0.75 < v < 0.97, v


@pytest.mark.parametrize("beta, side", [(1e-3, 0), (10.0, 1)])
def test_iql_actor_weights_logged_actions_by_their_advantage(beta, side):
    torch.manual_seed(0)
    policy = iql_policy(beta=beta, expectile=0.7, actor_lr=3e-3, critic_lr=1e-2, value_lr=1e-2)
    n = 64
    rewards = np.where(np.arange(n) % 2 == 0, 0.0, 1.0)
    actions = np.where(rewards[:, None] > 0, 0.5, -0.5).astype(np.float32)
    b = fixed_batch(actions, rewards, n=n)
    b["obs"][:] = 1.0
    for _ in range(3):
        train(policy, b, 200)
    mode = float(policy.compute_actions(b["obs"][:1], explore=False)[0][0, 0])
    if side:
        assert mode > 0.3, mode  # the paying action preferred
    else:
        assert abs(mode) < 0.2, mode  # beta ~ 0: behaviour cloning of both alike


# --- configs ---


def test_cql_config_reads_rllibs_names():
    cfg = get_config_class("CQL").from_dict({
        "input": DATA, "bc_iters": 100, "temperature": 2.0, "num_actions": 4, "lagrangian": True,
        "lagrangian_thresh": 10.0, "min_q_weight": 1.0, "deterministic_backup": False,
        "min_train_timesteps_per_iteration": 1000, "Q_model": {"fcnet_hiddens": [64]},
        "optimization": {"actor_learning_rate": 1e-3}, "critic_lr": 2e-3})
    cfg.validate()
    assert isinstance(cfg, CQLConfig)
    assert (cfg.bc_iters, cfg.temperature, cfg.num_actions, cfg.lagrangian) == (100, 2.0, 4, True)
    assert (cfg.lagrangian_thresh, cfg.min_q_weight, cfg.deterministic_backup) == (10.0, 1.0, False)
    assert cfg.q_model_config["fcnet_hiddens"] == [64]
    assert cfg.optimization_config["actor_learning_rate"] == 1e-3
    assert cfg.optimization_config["critic_learning_rate"] == 2e-3  # the new stack's name
    assert cfg.gradient_steps_per_iteration() == 4  # ceil(1000 / 256)


def test_iql_config_reads_rllibs_names():
    cfg = get_config_class("IQL").from_dict({
        "input": DATA, "beta": 0.5, "expectile": 0.8, "actor_lr": 1e-4, "critic_lr": 2e-4,
        "value_lr": 5e-4, "twin_q": False, "tau": 1.0, "target_network_update_freq": 0})
    cfg.validate()
    assert isinstance(cfg, IQLConfig)
    assert (cfg.beta, cfg.expectile, cfg.actor_lr, cfg.critic_lr, cfg.value_lr) == (
        0.5, 0.8, 1e-4, 2e-4, 5e-4)
    assert not cfg.twin_q and cfg.tau == 1.0


@pytest.mark.parametrize("run, values, says", [
    ("CQL", {}, "learns from a dataset alone"),
    ("IQL", {"input": {"sampler": 0.5, DATA: 0.5}}, "learns from a dataset alone"),
    ("IQL", {"input": DATA, "expectile": 1.0}, "expectile"),
    ("IQL", {"input": DATA, "lr_schedule": [[0, 1e-3], [100, 1e-4]]}, "no single learning rate"),
])
def test_configs_refuse_what_they_cannot_learn_from(run, values, says):
    with pytest.raises(ConfigError, match=says):
        get_config_class(run).from_dict(values).validate()


# --- the dataset as replay ---


def _episodes(tmp_path: Path, actions_scale=1.0, n_episodes=3, length=5):
    rng = np.random.default_rng(0)
    records = []
    for i in range(n_episodes):
        obs = rng.normal(size=(length + 1, 3)).astype(np.float32)
        records.append(episode_record(
            obs[:-1], (actions_scale * rng.uniform(-1, 1, (length, 1))).astype(np.float32),
            np.arange(length, dtype=np.float32), np.r_[np.zeros(length - 1), i == 0],
            np.r_[np.zeros(length - 1), i == 1], obs[1:]))
    write(records, tmp_path / "data")
    return OfflineDataset(str(tmp_path / "data"), shuffle=False)


def test_every_logged_step_becomes_an_n_step_transition(tmp_path):
    dataset = _episodes(tmp_path)
    t = dataset_transitions(dataset, n_step=2, gamma=0.5)
    assert len(t["rewards"]) == dataset.num_steps == 15
    # Within an episode: r_t + 0.5 r_{t+1}, discount 0.25; a terminal's last step: 0.
    first = next(e for e in dataset.episodes if e["terminateds"][-1])
    rows = np.flatnonzero(np.all(t["obs"] == first["obs"][0], axis=1))
    assert t["rewards"][rows[0]] == pytest.approx(0 + 0.5 * 1)
    assert t["discounts"][rows[0]] == pytest.approx(0.25)
    last = np.flatnonzero(np.all(t["obs"] == first["obs"][-1], axis=1))[0]
    assert t["discounts"][last] == 0 and t["terminateds"][last]
    # Truncated or cut short: the last step bootstraps from its new_obs.
    other = next(e for e in dataset.episodes if not e["terminateds"][-1])
    end = np.flatnonzero(np.all(t["obs"] == other["obs"][-1], axis=1))[0]
    assert t["discounts"][end] == pytest.approx(0.5)
    assert np.array_equal(t["next_obs"][end], other["new_obs"][-1])


def test_logged_actions_outside_where_the_actor_acts_are_one_line(tmp_path):
    dataset = _episodes(tmp_path, actions_scale=2.0)  # Pendulum's units, not [-1, 1]
    cfg = CQLConfig().environment("Pendulum-v1")
    with pytest.raises(DatasetError, match=r"range over .* actor acts in \[-1, 1\].*"
                                           "normalize_actions=False") as e:
        check_action_range(dataset, BOX, cfg)
    assert "\n" not in str(e.value)
    cfg.environment(normalize_actions=False)
    check_action_range(dataset, BOX, cfg)  # inside the env's own bounds, [-2, 2]


@pytest.mark.parametrize("source, says", [("d4rl.hopper-medium-v0", "D4RL datasets are not "
                                            "supported"), ("archive.zip", "an archive")])
def test_inputs_rlmesh_cannot_read_are_one_line(tmp_path, source, says):
    if source.endswith(".zip"):
        (tmp_path / source).write_bytes(b"PK")
        source = str(tmp_path / source)
    with pytest.raises(DatasetError, match=says) as e:
        resolve_files(source)
    assert "\n" not in str(e.value)


# --- RLlib's CQL tuned examples (tuned_examples/cql/*.yaml), keys and values as RLlib has them ---

RLLIB_PENDULUM_CQL = """
pendulum-cql:
    env: Pendulum-v1
    run: CQL
    stop: {evaluation/episode_reward_mean: -700, timesteps_total: 200000}
    config:
        framework: tf
        input: ["tests/data/pendulum/enormous.zip"]
        actions_in_input_normalized: true
        clip_actions: true
        twin_q: true
        train_batch_size: 2000
        replay_buffer_config: {type: MultiAgentReplayBuffer, min_size_for_sampling: 0}
        bc_iters: 100
        metrics_smoothing_episodes: 5
        evaluation_interval: 1
        evaluation_num_workers: 2
        evaluation_duration: 10
        evaluation_parallel_to_training: true
        evaluation_config: {input: sampler, explore: False}
"""

RLLIB_HOPPER_CQL = """
hopper_cql:
    env: {grid_search: [ray.rllib.examples.env.d4rl_env.hopper_medium]}
    run: CQL
    config:
        input: d4rl.hopper-medium-v0
        framework: torch
        soft_horizon: False
        horizon: 1000
        q_model_config: {fcnet_activation: relu, fcnet_hiddens: [256, 256, 256]}
        policy_model_config: {fcnet_activation: relu, fcnet_hiddens: [256, 256, 256]}
        tau: 0.005
        target_entropy: auto
        no_done_at_end: false
        n_step: 1
        rollout_fragment_length: 1
        replay_buffer_config: {type: MultiAgentReplayBuffer, min_size_for_sampling: 10}
        train_batch_size: 256
        target_network_update_freq: 0
        min_train_timesteps_per_iteration: 1000
        optimization: {actor_learning_rate: 0.0001, critic_learning_rate: 0.0003,
                       entropy_learning_rate: 0.0001}
        num_workers: 0
        num_gpus: 1
        clip_actions: false
        normalize_actions: true
        evaluation_interval: 1
        metrics_smoothing_episodes: 5
        min_q_weight: 5.0
        bc_iters: 20000
        temperature: 1.0
        num_actions: 10
        lagrangian: False
        evaluation_config: {input: sampler}
"""


@pytest.mark.parametrize("text, says", [
    (RLLIB_PENDULUM_CQL, "input .*enormous.zip.*: no data files there"),
    (RLLIB_HOPPER_CQL, "input 'd4rl.hopper-medium-v0': D4RL datasets are not supported"),
])
def test_rllibs_cql_tuned_examples_load_and_name_the_input_they_cannot_read(tmp_path, text, says):
    from rlmesh.driver.algorithm_registry import get_algorithm_class
    from tests.conformance.files import specs_of, variants

    path = tmp_path / "rllib-cql.yaml"
    path.write_text(text)
    [(spec, exp)] = specs_of(path)  # `rlmesh train -f` reads the file as it is
    env = exp["env"]["grid_search"][0] if isinstance(exp["env"], dict) else exp["env"]
    config = get_config_class(exp["run"]).from_dict({**variants(exp["config"])[0], "env": env})
    config.validate()
    assert isinstance(config, CQLConfig) and config.input_ != "sampler"
    with pytest.raises(DatasetError, match=says) as e:  # before any process or env is made
        get_algorithm_class("CQL")(config)
    assert "\n" not in str(e.value)


def test_iql_learns_on_discrete_actions_too():
    torch.manual_seed(0)
    cfg = IQLConfig().training(model=SMALL).offline_data(input=DATA)
    cfg.validate()
    policy = IQLTorchPolicy(CARTPOLE_OBS, TWO, cfg).for_learning()
    b = fixed_batch(np.arange(64) % 2, rewards=np.arange(64) % 2, obs_dim=4)
    stats = train(policy, b, 5)
    assert np.isfinite(float(stats["actor_loss"])) and float(stats["mean_weight"]) > 0
    actions = policy.compute_actions(b["obs"], explore=False)[0]
    assert actions.dtype.kind == "i" and set(actions.tolist()) <= {0, 1}


@pytest.mark.parametrize("make", [cql_policy, iql_policy], ids=["CQL", "IQL"])
def test_off_policy_estimation_scores_the_actor_on_logged_episodes(tmp_path, make):
    from rlmesh.offline.estimators import estimate

    episodes = _episodes(tmp_path).episodes
    for e in episodes:  # a uniform behaviour policy over [-1, 1]: density 1/2
        e["action_logp"] = np.full(len(e["rewards"]), np.log(0.5), np.float32)
    out = estimate(["is", "wis"], make(), episodes, 0.99)
    assert set(out) == {"is", "wis"}
    assert all(np.isfinite(v["v_target"]) and v["v_behavior"] == out["is"]["v_behavior"]
               for v in out.values())


def test_cql_learns_discrete_actions_with_dqns_loss_and_box_ones_with_sacs():
    from rlmesh.algorithms.cql import CQL

    algo = CQL.__new__(CQL)  # only the choice is asked: no processes, no data
    config = CQLConfig().offline_data(input=DATA)
    for space, expected in ((TWO, DiscreteCQLTorchPolicy), (BOX, CQLTorchPolicy)):
        algo.action_space = space
        assert algo.get_default_policy_class(config) is expected


def test_a_parquet_file_cut_short_is_skipped_and_the_other_files_kept(tmp_path):
    dataset = _episodes(tmp_path)  # 3 episodes of 5 steps as JSON lines in data/
    write(dataset.episodes[:2], tmp_path / "pq", "parquet")
    [parquet] = (tmp_path / "pq").glob("*.parquet")
    cut = tmp_path / "data" / parquet.name
    cut.write_bytes(parquet.read_bytes()[: parquet.stat().st_size // 2])
    read = OfflineDataset(str(tmp_path / "data"), shuffle=False)
    assert read.num_skipped == 1 and read.problems[0].startswith(f"{cut}: unreadable Parquet")
    assert read.num_steps == dataset.num_steps  # the JSON file's episodes all kept
