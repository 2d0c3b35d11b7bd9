"""RLlib's policy page on multi-agent runs: a hand-written policy (RLlib's compute_actions
signature, state_batches without a default) acts beside a learned one in the same env; the
runners call it as its author wrote it, and only the learned policy trains."""

from __future__ import annotations

from rlmesh.algorithms import PPOConfig
from rlmesh.policy.policy_spec import PolicySpec

from tests.integration.seed_003_policies import LeanHeuristic


def test_a_heuristic_policy_plays_beside_a_learned_one():
    config = (PPOConfig()
              .environment("examples.multi_agent_cartpole:make_env", env_config={"num_agents": 2})
              .env_runners(num_env_runners=1, rollout_fragment_length=100)
              .training(train_batch_size=200, minibatch_size=100, num_epochs=1)
              .multi_agent(policies={"p0": None, "p1": PolicySpec(policy_class=LeanHeuristic)},
                           policy_mapping_fn="tests.integration.multi_agent_envs:cartpole_two",
                           policies_to_train=["p0"])
              .debugging(seed=0))
    with config.build() as algo:
        result = algo.train()
    rewards = result["policy_reward_mean"]
    assert set(rewards) == {"p0", "p1"}
    assert set(result["info"]["learner"]["p0"]) and not result["info"]["learner"].get("p1")
    # the heuristic balances the pole for far longer than an untrained policy (~20 steps)
    assert rewards["p1"] > 30, rewards
