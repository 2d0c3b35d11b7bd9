"""Recurrent training's sequences: cut at episode starts, padding and the length cap, the
round trip to time-major columns; and the learner's recurrent forward pass over them gives
exactly what the runner computed step by step from the states it recorded."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from rlmesh.algorithms.a2c import A2CConfig
from rlmesh.algorithms.appo import APPOConfig
from rlmesh.algorithms.impala import ImpalaConfig
from rlmesh.algorithms.ppo import PPOConfig
from rlmesh.algorithms.a2c import A2CTorchPolicy
from rlmesh.algorithms.appo import APPOTorchPolicy
from rlmesh.algorithms.impala import ImpalaTorchPolicy
from rlmesh.algorithms.ppo import PPOTorchPolicy
from rlmesh.policy.recurrent import (SEQ_MASK, sequence_index, sequence_minibatches,
                                     time_major_outputs)
from rlmesh.rl.batch import to_tensors
from rlmesh.rl.columns import merge_fragments
from rlmesh.rl.sequences import chop_into_sequences, from_sequences, sequence_spans, to_sequences
from rlmesh.roles.env_sampler import EnvSampler
from tests.integration.envs_for_tests import RepeatFirstEnv


@pytest.fixture(autouse=True)
def one_torch_thread():
    """Tiny LSTMs: a second OpenMP thread only spins on a loaded 2-core machine (0.3 s a
    backward pass instead of 10 ms)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_sequences_cut_at_episode_ends_invalid_rows_and_the_length_cap():
    mask = np.array([[1, 1], [1, 1], [1, 0], [1, 1], [1, 1]], bool)
    done = np.array([[0, 0], [1, 0], [0, 0], [0, 0], [0, 1]], bool)
    assert sequence_spans(mask, done, 2) == [(0, 0, 2), (0, 2, 2), (0, 4, 1), (1, 0, 2),
                                             (1, 3, 2)]
    assert sequence_spans(mask, done, 10) == [(0, 0, 2), (0, 2, 3), (1, 0, 2), (1, 3, 2)]
    index = chop_into_sequences(mask, done, 10)
    assert index.valid.shape == (4, 3) and list(index.lengths) == [2, 3, 2, 2]
    with pytest.raises(ValueError, match="max_seq_len"):
        sequence_spans(mask, done, 0)


def test_to_and_from_sequences_round_trip_and_pad_with_zeros():
    rng = np.random.default_rng(0)
    mask = rng.random((9, 3)) > 0.2
    done = rng.random((9, 3)) > 0.7
    x = rng.normal(size=(9, 3, 2)).astype(np.float32)
    index = chop_into_sequences(mask, done, 4, pad_to=5)
    seqs = to_sequences(x, index)
    assert seqs.shape[1:] == (5, 2) and np.all(seqs[~index.valid] == 0)
    assert index.lengths.max() <= 4 and index.valid.sum() == mask.sum()
    back = from_sequences(seqs, index, 9, 3)
    np.testing.assert_array_equal(back[mask], x[mask])
    assert np.all(back[~mask] == 0)


def recurrent_config(cls, **model):
    return (cls().environment(RepeatFirstEnv)
            .training(model={"fcnet_hiddens": [16], "use_lstm": True, "lstm_cell_size": 8,
                             "max_seq_len": 3, **model}))


def sample_batch(policy, steps=13, envs=3):
    sampler = EnvSampler(lambda i: RepeatFirstEnv({"length": 5}), envs, policy,
                         seeds=list(range(1, envs + 1)))
    fragment = sampler.sample(steps)
    return to_tensors(merge_fragments([fragment]))


@pytest.mark.parametrize("prev", [False, True])
def test_learner_outputs_over_sequences_equal_the_runner_steps(prev):
    torch.manual_seed(0)
    space = RepeatFirstEnv().observation_space
    config = recurrent_config(PPOConfig, lstm_use_prev_action=prev, lstm_use_prev_reward=prev)
    policy = PPOTorchPolicy(space, gym.spaces.Discrete(4), config)
    batch = sample_batch(policy)
    assert "state_in_0" in batch and ("prev_actions" in batch) == prev
    dist_inputs, values, bootstrap = time_major_outputs(policy.model, batch)
    valid = batch["mask"].flatten()
    torch.testing.assert_close(dist_inputs[valid],
                               batch["action_dist_inputs"].flatten(0, 1)[valid])
    # The state recorded for the first row of a sequence is what the LSTM had there: a
    # sequence cut mid-episode carries on exactly.
    assert sequence_index(batch, 3).num_sequences > 13 * 3 // 3
    # After the last row: the next observation from the state after that row.
    states = [batch[f"state_out_{i}"][-1] for i in range(len(policy.get_initial_state()))]
    _, last_values = policy.model.forward_seq(
        batch["next_obs"][:, None], states,
        batch["actions"][-1][:, None] if prev else None,
        batch["rewards"][-1][:, None] if prev else None)[:2]
    torch.testing.assert_close(bootstrap[-1], last_values[:, 0])


@pytest.mark.parametrize("cls,policy_cls", [(PPOConfig, PPOTorchPolicy),
                                            (A2CConfig, A2CTorchPolicy),
                                            (ImpalaConfig, ImpalaTorchPolicy),
                                            (APPOConfig, APPOTorchPolicy)])
def test_every_actor_critic_trains_on_whole_padded_sequences(cls, policy_cls):
    torch.manual_seed(0)
    config = recurrent_config(cls).training(minibatch_size=6, num_epochs=2)
    policy = policy_cls(RepeatFirstEnv().observation_space, gym.spaces.Discrete(4), config)
    batch = sample_batch(policy)
    train = policy.prepare_batch(batch)
    assert SEQ_MASK in train and train[SEQ_MASK].shape[1] == 3
    assert int(train[SEQ_MASK].sum()) == int(batch["mask"].sum())
    before = {k: v.clone() for k, v in policy.model.state_dict().items()}
    stats = policy.update({k: v.numpy() for k, v in batch.items()}, timesteps=0)
    assert stats["num_env_steps_trained"] == 13 * 3
    assert all(np.isfinite(v) for v in stats.values())
    assert any(not torch.equal(before[k], v) for k, v in policy.model.state_dict().items())


def test_diagnostics_after_the_update_cut_sequences_into_chunks_without_changing_them():
    torch.manual_seed(0)
    policy = PPOTorchPolicy(RepeatFirstEnv().observation_space, gym.spaces.Discrete(4),
                            recurrent_config(PPOConfig))
    train = policy.prepare_batch(sample_batch(policy))
    whole = policy.outputs_after_update(train, len(train[SEQ_MASK]))
    for chunk in (1, 2, 5):
        parts = policy.outputs_after_update(train, chunk)
        torch.testing.assert_close(parts[0], whole[0])
        torch.testing.assert_close(parts[1], whole[1])
    rows = whole[2]
    assert len(whole[0]) == len(rows["actions"]) == int(train[SEQ_MASK].sum())


def test_minibatches_of_sequences_count_real_steps_not_padded_rows():
    """minibatch_size counts env steps as it does without an LSTM: a batch of 256 steps in
    sequences of 1-32 steps is one minibatch at minibatch_size 256 (padded rows counted, it
    was three, the last of a few steps), and four of about 64 steps at 64."""
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 33, size=64)
    total = int(lengths.sum())
    for size, parts in ((total, 1), (10 * total, 1), (total // 4, 4), (total // 8, 8)):
        batches = sequence_minibatches(lengths, size, np.random.default_rng(1))
        assert len(batches) == parts
        assert sorted(np.concatenate(batches).tolist()) == list(range(len(lengths)))
        steps = [int(lengths[b].sum()) for b in batches]
        assert max(abs(s - total / parts) for s in steps) <= lengths.max(), steps
    assert len(sequence_minibatches(lengths, 64, None, num_minibatches=3)) == 3
    assert [b.tolist() for b in sequence_minibatches(lengths, total, None)] == [
        list(range(len(lengths)))]  # no rng: the batch's order


def test_a_recurrent_update_takes_one_step_per_minibatch_of_real_steps():
    torch.manual_seed(0)
    config = recurrent_config(PPOConfig).training(num_epochs=3)
    policy = PPOTorchPolicy(RepeatFirstEnv().observation_space, gym.spaces.Discrete(4), config)
    batch = {k: v.numpy() for k, v in sample_batch(policy, steps=12, envs=4).items()}
    for minibatch_size, steps_per_epoch in ((48, 1), (24, 2), (12, 4)):
        stats = policy.update(batch, timesteps=0, minibatch_size=minibatch_size)
        assert stats["num_grad_updates"] == 3 * steps_per_epoch, (minibatch_size, stats)


def test_weights_of_the_shared_lstm_load_into_a_model_with_the_critics_own():
    """A checkpoint from before the critic had its own LSTM: its trunk and LSTM are copied
    into the critic's, so the values and actions are the same, and the policy knows the
    saved optimizer moments no longer fit."""
    from rlmesh.rl import build_model

    space, actions = RepeatFirstEnv().observation_space, gym.spaces.Discrete(4)
    config = {"fcnet_hiddens": [16], "use_lstm": True, "lstm_cell_size": 8}
    torch.manual_seed(0)
    shared = build_model(space, actions, {**config, "vf_share_layers": True})
    with torch.no_grad():
        for p in shared.parameters():
            p.add_(0.3 * torch.randn_like(p))
    own = build_model(space, actions, config)
    own.load_state_dict(shared.state_dict())
    assert own.optimizer_state_obsolete and not shared.optimizer_state_obsolete
    obs = torch.as_tensor(np.stack([space.sample() for _ in range(6)])).reshape(2, 3, -1)
    zeros = torch.zeros(2, 8)
    d_shared, v_shared, _ = shared.forward_seq(obs, [zeros] * 2)
    d_own, v_own, state = own.forward_seq(obs, [zeros] * 4)
    torch.testing.assert_close(d_own, d_shared)
    torch.testing.assert_close(v_own, v_shared)
    assert len(state) == 4
    fresh = build_model(space, actions, config)
    fresh.load_state_dict(own.state_dict())  # today's layout: loaded as saved
    assert not fresh.optimizer_state_obsolete
