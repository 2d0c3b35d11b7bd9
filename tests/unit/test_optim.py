"""rlmesh's Adam against torch.optim.Adam: the same parameters after the same steps, a
state_dict each loads from the other, and no torch._dynamo import on the way."""

from __future__ import annotations

import copy
import subprocess
import sys

import pytest
import torch

from rlmesh.rl import optim
from rlmesh.rl.optim import Adam


def net(seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))


def train(model, optimizer, steps, seed=1, lr_at=None):
    gen = torch.Generator().manual_seed(seed)
    for i in range(steps):
        if lr_at is not None:
            optimizer.param_groups[0]["lr"] = lr_at(i)
        x = torch.randn(16, 5, generator=gen)
        loss = model(x).pow(2).sum(-1).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


def assert_same_parameters(a, b):
    for p, q in zip(a.parameters(), b.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("fused", [True, False], ids=["fused kernel", "multi-tensor"])
def test_steps_match_torch_adam_with_a_changing_learning_rate(fused, monkeypatch):
    monkeypatch.setattr(optim, "FUSED", fused)
    ours, theirs = net(), net()
    def lr(i):
        return 0.01 * (1 - i / 60)
    train(ours, Adam(ours.parameters(), lr=0.01, betas=(0.8, 0.99), eps=1e-7), 50, lr_at=lr)
    train(theirs, torch.optim.Adam(theirs.parameters(), lr=0.01, betas=(0.8, 0.99), eps=1e-7), 50, lr_at=lr)
    assert not torch.equal(next(ours.parameters()), next(net().parameters()))  # it did train
    assert_same_parameters(ours, theirs)


@pytest.mark.skipif(not hasattr(torch, "_fused_adam_"), reason="torch < 2.4: no fused CPU Adam")
def test_float_parameters_on_cpu_take_the_fused_kernel():
    model = net()
    model(torch.randn(4, 5)).sum().backward()
    params = list(model.parameters())
    zeros = [torch.zeros_like(p) for p in params]
    assert optim._fused_adam(params, [p.grad for p in params], zeros, [z.clone() for z in zeros],
                             1, 0.01, 0.9, 0.999, 1e-8)
    half = [p.detach().half() for p in params]  # a dtype it is not used for: the caller steps
    assert not optim._fused_adam(half, half, half, half, 1, 0.01, 0.9, 0.999, 1e-8)


@pytest.mark.parametrize("direction", ["ours->torch", "torch->ours"])
def test_state_dict_loads_across_implementations(direction):
    first, second = (Adam, torch.optim.Adam) if direction == "ours->torch" else (torch.optim.Adam, Adam)
    a = net()
    opt_a = first(a.parameters(), lr=0.005)
    train(a, opt_a, 20)
    b = net()
    b.load_state_dict(a.state_dict())
    opt_b = second(b.parameters(), lr=0.5)  # lr, moments and step counts come from the state
    opt_b.load_state_dict(copy.deepcopy(opt_a.state_dict()))  # as through a checkpoint file
    train(a, opt_a, 10, seed=2)
    train(b, opt_b, 10, seed=2)
    assert_same_parameters(a, b)


def test_a_parameter_without_gradient_keeps_its_moments_and_count():
    model = net()
    opt = Adam(model.parameters(), lr=0.01)
    train(model, opt, 3)
    frozen = model[2].bias
    before = frozen.detach().clone()
    frozen.requires_grad_(False)
    train(model, opt, 2)
    assert torch.equal(frozen, before)
    assert opt.steps == [5, 5, 5, 3]


def test_wrong_state_is_a_clear_error():
    opt = Adam(net().parameters())
    other = torch.optim.Adam(torch.nn.Linear(2, 2).parameters())
    with pytest.raises(ValueError, match="this Adam has one group of 4"):
        opt.load_state_dict(other.state_dict())


def test_training_with_it_never_imports_dynamo():
    code = ("import sys, torch; from rlmesh.rl.optim import Adam\n"
            "m = torch.nn.Linear(3, 1); o = Adam(m.parameters())\n"
            "for _ in range(3):\n"
            "    o.zero_grad(); m(torch.randn(4, 3)).sum().backward()\n"
            "    torch.nn.utils.clip_grad_norm_(m.parameters(), 0.5); o.step()\n"
            "print('torch._dynamo' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# --- RMSprop and Optimizers ---

from rlmesh.rl.optim import Optimizers, RMSprop  # noqa: E402


@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_rmsprop_steps_match_torch_rmsprop(momentum):
    ours, theirs = net(), net()
    mine = RMSprop(ours.parameters(), lr=1e-2, alpha=0.9, eps=0.1, momentum=momentum)
    ref = torch.optim.RMSprop(theirs.parameters(), lr=1e-2, alpha=0.9, eps=0.1, momentum=momentum)
    train(ours, mine, 25)
    train(theirs, ref, 25)
    assert_same_parameters(ours, theirs)
    assert not all(torch.equal(p, q) for p, q in zip(ours.parameters(), net().parameters()))


def test_rmsprop_state_dict_round_trips_through_torch():
    ours, theirs = net(), net()
    mine = RMSprop(ours.parameters(), lr=1e-2, momentum=0.5)
    train(ours, mine, 5)
    theirs.load_state_dict(ours.state_dict())
    ref = torch.optim.RMSprop(theirs.parameters(), lr=1e-2, momentum=0.5)
    ref.load_state_dict(copy.deepcopy(mine.state_dict()))  # torch keeps the tensors it is given
    train(ours, mine, 5, seed=3)
    train(theirs, ref, 5, seed=3)
    assert_same_parameters(ours, theirs)
    again = RMSprop(net().parameters(), lr=1.0)
    again.load_state_dict(ref.state_dict())
    assert again.param_groups[0]["lr"] == 1e-2 and again.steps == mine.steps


def test_optimizers_step_each_part_at_its_own_rate():
    model = net()
    first, second = list(model[0].parameters()), list(model[2].parameters())
    both = Optimizers(Adam(first, lr=1e-2), Adam(second, lr=0.0))
    before = [p.detach().clone() for p in second]
    both.param_groups[0]["lr"] = 5e-2  # a schedule drives the first optimizer only
    train(model, both, 3)
    assert all(torch.equal(p, q) for p, q in zip(second, before))
    assert both.optimizers[0].param_groups[0]["lr"] == 5e-2
    state = both.state_dict()
    fresh = Optimizers(Adam(first), Adam(second))
    fresh.load_state_dict(state)
    assert fresh.optimizers[0].steps == both.optimizers[0].steps
    with pytest.raises(ValueError, match="2 optimizers"):
        Optimizers(Adam(first)).load_state_dict(state)


# --- one flat buffer for all parameters ---

def test_parameters_become_views_of_one_buffer_and_steps_still_match_torch():
    ours, theirs = net(), net()
    opt = Adam(ours.parameters(), lr=0.01)
    buffer = opt.flat.buffer
    assert buffer is not None and buffer.numel() == sum(p.numel() for p in ours.parameters())
    for p, q in zip(ours.parameters(), theirs.parameters()):
        assert torch.equal(p, q)  # moving them changed no value
    start = buffer.data_ptr()
    assert sorted(p.data_ptr() - start for p in ours.parameters()) == [0, 160, 192, 256]  # bytes
    train(ours, opt, 20)
    train(theirs, torch.optim.Adam(theirs.parameters(), lr=0.01), 20)
    assert opt.flat.intact()  # the steps went through the buffer
    assert_same_parameters(ours, theirs)


def test_a_parameter_given_new_storage_is_still_stepped_correctly():
    ours, theirs = net(), net()
    opt, ref = Adam(ours.parameters(), lr=0.01), torch.optim.Adam(theirs.parameters(), lr=0.01)
    train(ours, opt, 3)
    train(theirs, ref, 3)
    ours[0].weight.data = ours[0].weight.data.clone()  # as Module.to or a user might
    assert not opt.flat.intact()
    train(ours, opt, 5, seed=4)
    train(theirs, ref, 5, seed=4)
    assert_same_parameters(ours, theirs)


def test_loading_state_keeps_the_moments_in_the_flat_buffer():
    a, b = net(), net()
    opt_a = Adam(a.parameters(), lr=0.01)
    train(a, opt_a, 4)
    opt_b = Adam(b.parameters(), lr=0.01)
    b.load_state_dict(a.state_dict())
    opt_b.load_state_dict(copy.deepcopy(opt_a.state_dict()))
    assert opt_b.exp_avg[0].data_ptr() == opt_b.exp_avg.flat.data_ptr()
    assert torch.equal(opt_b.exp_avg_sq.flat, opt_a.exp_avg_sq.flat)
    saved = opt_b.state_dict()["state"][0]["exp_avg"]
    assert saved.data_ptr() != opt_b.exp_avg.flat.data_ptr()  # a copy: later steps leave it
    train(a, opt_a, 3, seed=5)
    train(b, opt_b, 3, seed=5)
    assert_same_parameters(a, b)


def test_parameters_of_two_dtypes_are_stepped_one_by_one():
    model = net()
    model[2].double()
    opt = Adam(model.parameters(), lr=0.01)
    assert opt.flat.buffer is None
    before = [model[0].weight.detach().clone(), model[2].weight.detach().clone()]
    x = torch.randn(4, 5)
    out = model[2](torch.tanh(model[0](x)).double()).pow(2).sum()
    opt.zero_grad()
    out.backward()
    opt.step()
    assert model[2].weight.dtype == torch.float64
    assert not torch.equal(model[0].weight, before[0])
    assert not torch.equal(model[2].weight, before[1])
