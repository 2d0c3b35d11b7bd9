"""MultiAgentSampler without sockets: one forward pass per policy, agents joining and
leaving, per-agent trajectories right-aligned into per-policy fragments, turn-based rewards,
and the one-line error for a policy id the mapping function makes up."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from rlmesh.env import ALL, MultiAgentEnv, make_multi_agent
from rlmesh.policy.policy import Policy
from rlmesh.roles.multi_agent_sampler import MultiAgentSampler, UnknownPolicyError

BOX = gym.spaces.Box(-10, 10, (1,), np.float32)


class JoinLeave(MultiAgentEnv):
    """'a' acts at steps 0-2 and terminates at its third; 'b' joins after step 1 and is
    truncated at step 4, which ends the episode. Reward of an agent: 1 per step, 'b' 10."""

    possible_agents = ["a", "b"]
    observation_spaces = {"a": BOX, "b": BOX}
    action_spaces = {"a": gym.spaces.Discrete(2), "b": gym.spaces.Discrete(2)}

    def reset(self, *, seed=None, options=None):
        self.t = 0
        return {"a": np.array([0.0], np.float32)}, {"a": {}}

    def step(self, actions):
        self.t += 1
        t = self.t
        obs, rew, term, trunc = {}, {}, {ALL: False}, {ALL: False}
        for aid in actions:
            rew[aid] = 1.0 if aid == "a" else 10.0
        if "a" in actions:
            obs["a"] = np.array([t], np.float32)
            term["a"] = t == 3
        if t >= 2:
            obs["b"] = np.array([100 + t], np.float32)
        if t == 4:
            trunc["b"] = trunc[ALL] = True
        return obs, rew, term, trunc, {}


class Counting(Policy):
    calls = 0

    def compute_actions(self, obs_batch, state_batches=None, *args, **kwargs):
        type(self).calls += 1
        n = len(obs_batch)
        return np.zeros(n, np.int64), [], {"seen": np.asarray(obs_batch)[:, 0].copy()}

    def learn_on_batch(self, samples):
        return {}


def by_name(agent_id, episode):
    return "pa" if agent_id == "a" else "pb"


def _sampler(num_envs=2, mapping=by_name, env_cls=JoinLeave, policies=("pa", "pb")):
    pols = {p: Counting(BOX, gym.spaces.Discrete(2), None) for p in policies}
    return MultiAgentSampler(lambda i: env_cls(), num_envs, pols, mapping)


def test_one_forward_per_policy_per_step_over_all_envs():
    Counting.calls = 0
    s = _sampler(num_envs=3)
    out = s.sample(2)
    # step 0: only 'a' in each env (1 call); step 1: still only 'a' (b joins after it)
    assert Counting.calls == 2
    Counting.calls = 0
    s.sample(1)  # step 2: 'a' and 'b' in 3 envs: one call per policy, not per agent
    assert Counting.calls == 2
    assert out["env_steps"] == 6 and out["agent_steps"] == 6


def test_agents_join_and_leave_with_their_own_trajectories():
    s = _sampler(num_envs=1)
    out = s.sample(4)  # exactly one episode
    a, b = out["policy_batches"]["pa"], out["policy_batches"]["pb"]
    # 'a': 3 steps, terminated at its last; obs 0, 1, 2 acted on; rewards 1 each
    assert a["obs"].shape[:2] == (3, 1)
    np.testing.assert_array_equal(a["seen"][:, 0], [0, 1, 2])
    np.testing.assert_array_equal(a["rewards"][:, 0], [1, 1, 1])
    np.testing.assert_array_equal(a["terminateds"][:, 0], [False, False, True])
    # 'b': joined with obs 102, acted at steps 2 and 3, truncated at the episode's end;
    # its final observation is next_obs (bootstrapped from, as the episode was cut)
    assert b["mask"][:, 0].sum() == 2
    np.testing.assert_array_equal(b["seen"][-2:, 0], [102, 103])
    np.testing.assert_array_equal(b["truncateds"][-2:, 0], [False, True])
    assert b["next_obs"][0, 0] == 104
    [ep] = out["episodes"]
    assert ep["length"] == 4 and ep["return"] == 3 + 20
    assert sorted(ep["agent_returns"]) == [["a", "pa", 3.0], ["b", "pb", 20.0]]


def test_cut_trajectories_are_right_aligned_and_bootstrap_from_next_obs():
    s = _sampler(num_envs=1)
    out = s.sample(3)  # 'a' done at step 3 (index 2); 'b' acted once (step 2), still alive
    b = out["policy_batches"]["pb"]
    assert b["obs"].shape[:2] == (1, 1)
    assert b["mask"][-1, 0] and not b["terminateds"][-1, 0] and not b["truncateds"][-1, 0]
    assert b["next_obs"][0, 0] == 103  # what it acts on next
    out2 = s.sample(1)  # the rest of b's episode
    b2 = out2["policy_batches"]["pb"]
    np.testing.assert_array_equal(b2["seen"][:, 0], [103])
    assert b2["truncateds"][0, 0]


class TurnBased(MultiAgentEnv):
    """'x' and 'y' take turns; each move's reward (1 for x, 2 for y) is paid to the mover
    one turn later, when the other has moved. Ends after 4 moves."""

    possible_agents = ["x", "y"]
    observation_spaces = {"x": BOX, "y": BOX}
    action_spaces = {"x": gym.spaces.Discrete(2), "y": gym.spaces.Discrete(2)}

    def reset(self, *, seed=None, options=None):
        self.moves = 0
        return {"x": np.array([0.0], np.float32)}, {}

    def step(self, actions):
        (mover,) = actions
        self.moves += 1
        nxt = "y" if mover == "x" else "x"
        rew = {nxt: (1.0 if nxt == "x" else 2.0)} if self.moves > 1 else {}
        done = self.moves == 4
        obs = {nxt: np.array([self.moves], np.float32)}
        if done:
            obs[mover] = np.array([self.moves], np.float32)
            rew[mover] = 1.0 if mover == "x" else 2.0
        return obs, rew, {ALL: done}, {ALL: False}, {}


def test_turn_based_rewards_reach_the_move_that_earned_them():
    s = _sampler(num_envs=1, env_cls=TurnBased, mapping=lambda a, e: "p" + a,
                 policies=("px", "py"))
    out = s.sample(3)  # x, y, x moved; x's last move waits for its reward: kept back
    x = out["policy_batches"]["px"]
    np.testing.assert_array_equal(x["seen"][:, 0], [0])
    np.testing.assert_array_equal(x["rewards"][:, 0], [1])
    assert x["next_obs"][0, 0] == 2  # the observation of the move kept back
    y = out["policy_batches"]["py"]  # y moved once and acts next: shipped, reward paid
    np.testing.assert_array_equal(y["rewards"][:, 0], [2])
    assert y["next_obs"][0, 0] == 3
    out = s.sample(1)  # y's second move ends the episode
    x, y = out["policy_batches"]["px"], out["policy_batches"]["py"]
    np.testing.assert_array_equal(x["rewards"][:, 0], [1])
    assert x["terminateds"][0, 0]
    np.testing.assert_array_equal(y["rewards"][:, 0], [2])
    assert y["terminateds"][0, 0]
    assert out["episodes"][0]["return"] == 6


def test_unknown_policy_id_is_one_line_naming_agent_and_known_ids():
    s = _sampler(num_envs=1, mapping=lambda agent_id, episode: "nobody")
    with pytest.raises(UnknownPolicyError) as info:
        s.sample(1)
    msg = str(info.value)
    assert "\n" not in msg and "'a'" in msg and "'nobody'" in msg and "['pa', 'pb']" in msg


def test_make_multi_agent_copies_leave_independently():
    env = make_multi_agent("CartPole-v1")({"num_agents": 3})
    obs, _ = env.reset(seed=0)
    assert sorted(obs) == [0, 1, 2]
    alive, steps = set(obs), 0
    while True:
        obs, rew, term, trunc, _ = env.step({a: 0 for a in alive})
        steps += 1
        alive -= {a for a in list(alive) if term.get(a) or trunc.get(a)}
        assert set(obs) >= alive
        if term[ALL]:
            break
    assert not alive and steps < 100


def test_a_runner_asks_only_for_the_policies_its_agents_use():
    from rlmesh.roles.policy_changes import MultiAgentPolicies

    class Runner(MultiAgentPolicies):
        pass

    runner = Runner()
    runner.sampler = _sampler(num_envs=1, mapping=lambda a, e: "pa", policies=("pa", "pb", "pc"))
    runner.versions = {"pa": -1, "pb": -1, "pc": -1}
    assert runner._wanted_versions() == {"pa": -1, "pb": -1, "pc": -1}  # nothing loaded yet
    runner.sampler.sample(1)
    runner.versions = {"pa": 3, "pb": 3, "pc": -1}
    assert runner._wanted_versions() == {"pa": 3, "pc": -1}  # pb unused; pc never loaded


def test_episode_callbacks_fire_in_order():
    from rlmesh.callbacks import Callbacks

    seen = []

    class Recording(Callbacks):
        def on_episode_created(self, *, episode, **kw):
            seen.append(("created", episode.last_observation))

        def on_episode_start(self, *, episode, **kw):
            seen.append(("start", episode.length))

        def on_episode_step(self, *, episode, **kw):
            seen.append(("step", episode.length))

        def on_episode_end(self, *, episode, **kw):
            seen.append(("end", episode.length))

    pols = {p: Counting(BOX, gym.spaces.Discrete(2), None) for p in ("pa", "pb")}
    MultiAgentSampler(lambda i: JoinLeave(), 1, pols, by_name,
                      callbacks=Recording()).sample(4)  # exactly one episode
    # created before the env's reset (no observation yet), as in the single-agent sampler
    assert seen[0] == ("created", None) and seen[1] == ("start", 0)
    assert [k for k, _ in seen[2:6]] == ["step"] * 4 and seen[6] == ("end", 4)
