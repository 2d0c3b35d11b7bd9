"""Seed 003, RLlib's "How To Customize Policies", run as written (ray.rllib -> rlmesh): each
idiom of tests/integration/seed_003_policies.py trained on CartPole with real runner (and,
where said, learner) processes, and what reached learn_on_batch or the loss checked."""

from __future__ import annotations

import pytest

from tests.integration import seed_003_policies as seed

pytestmark = pytest.mark.timeout(120)


def learner(result: dict) -> dict:
    return result["info"]["learner"]["default_policy"]


def train(trainer_class, iterations: int, **config) -> list[dict]:
    algo = trainer_class(config=config, env="CartPole-v1")
    try:
        return [algo.train() for _ in range(iterations)]
    finally:
        algo.stop()


def test_a_policy_from_scratch_with_rllibs_signature_trains_and_keeps_its_weights():
    results = train(seed.ScratchTrainer, 2)
    stats = [learner(r) for r in results]
    assert [s["w"] for s in stats] == [2.0, 3.0]  # get_weights/set_weights of a plain float
    assert all(s["rows"] >= 100 and s["columns"] == 1.0 for s in stats)


def test_recurrent_state_of_plain_ints_arrives_as_state_in_and_state_out():
    stats = learner(train(seed.ScratchTrainer, 1, policy_class=seed.StepCounterPolicy)[0])
    assert stats["state_rows"] >= 100
    assert stats["out_is_in_plus_one"] == 1.0
    assert 1 < stats["max_count"] <= 101  # counts steps, restarted at each episode


def test_string_and_int_extra_outputs_reach_a_learner_in_its_own_process():
    stats = learner(train(seed.ScratchTrainer, 1, policy_class=seed.ExtraOutputsPolicy,
                          num_learners=1)[0])
    assert stats["tag_rows"] == stats["code_rows"] == stats["rows"] >= 100


def test_the_torch_template_with_postprocessed_advantages_learns_cartpole():
    rewards = [r["episode_reward_mean"] for r in train(seed.PGTrainer, 8, seed=0)]
    assert rewards[-1] > 1.5 * rewards[0] and rewards[-1] > 40, rewards


def test_an_a3c_like_template_runs_every_hook():
    stats = learner(train(seed.A3CLikeTrainer, 2)[-1])
    assert stats["vf_preds_seen"] == 1.0  # extra_action_out_fn's column reached the loss
    assert stats["grad_gnorm"] > 0  # extra_grad_process_fn ran, and reported
    assert 0 < stats["policy_entropy"] <= 0.7


def test_with_updates_on_ppos_classes_swaps_the_loss_and_the_plan():
    tiny = {"train_batch_size": 200, "minibatch_size": 100, "num_epochs": 1}
    stats = learner(train(seed.CustomTrainer, 1, **tiny)[0])
    assert stats["custom_loss_calls"] >= 1  # the swapped loss ran on the learner
    assert "vf_explained_var" in stats  # PPO's own batch preparation and statistics kept
    plan = [learner(r) for r in train(seed.PlanPPO, 2, **tiny)]
    assert all(s["from_plan"] == 1.0 and s["num_env_steps_trained"] >= 200 for s in plan)
