"""An algorithm reads top to bottom (issues 33 and 49): every frame from where an iteration
starts to the algorithm's loss is a step of its own, named, and none is a needless hop.
Measured on real one-iteration runs: the loss records the stack it runs under
(``frame_policies.py``); the test reads each frame's function in its source, from ``train``
(the learner in the driver, ``num_learners=0``) or, for IMPALA, whose learner always has a
process of its own, from the learner actor's update thread (``LearnerActor._run``).

Issue 33 capped the path at five frames. Issue 49 retired that cap: meeting it had made
``train()`` inline ``training_iteration()``'s loop (the ``min_time_s_per_iteration`` loop
written twice) and PPO copy the driver's training step and the policy's update, so that a
frame was saved by each copy. What the cap guarded against was hops that add nothing: this
test fails on those instead. A frame is needless when its function is a pure pass-through (its
body, the docstring aside, one call that forwards its own parameters unchanged), when it is an
anonymous function (a lambda, a comprehension), or when one step appears twice."""

from __future__ import annotations

import ast
import json
import textwrap
from pathlib import Path

import pytest

from rlmesh.algorithms.dqn import DQNConfig
from rlmesh.algorithms.impala import ImpalaConfig
from rlmesh.algorithms.ppo import PPOConfig

from .frame_policies import STACK_FILE

HERE = "tests.integration.frame_policies"


def frames_to_loss(stack: list[list], top: str, top_file: str) -> list[list]:
    """The frames from the loss (first) up to and including the outermost one that counts
    (``top`` in ``top_file``); fails if that frame is not on the stack."""
    assert stack[0][0] == "loss", stack
    for i, (function, filename, *_) in enumerate(stack):
        if function == top and filename == top_file:
            return stack[:i + 1]
    raise AssertionError(f"{top} ({top_file}) is not on the loss's stack: {stack}")


def _function_at(source: str, name: str, first_line: int) -> ast.FunctionDef | ast.AsyncFunctionDef:
    """The definition of ``name`` whose code starts at ``first_line`` (its first decorator's
    line, where it has decorators)."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
            if min([node.lineno] + [d.lineno for d in node.decorator_list]) == first_line:
                return node
    raise AssertionError(f"no function {name} at line {first_line}")


def pass_through(source: str, name: str, first_line: int) -> bool:
    """Whether function ``name`` only forwards its own parameters, unchanged, to one call:
    ``def f(self, a, b): return self.g(a, b)`` (a frame that adds nothing)."""
    fn = _function_at(source, name, first_line)
    body = fn.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]  # the docstring
    if len(body) != 1 or not isinstance(body[0], (ast.Return, ast.Expr)):
        return False
    call = body[0].value
    if not isinstance(call, ast.Call):
        return False
    args = fn.args
    params = [a.arg for a in args.posonlyargs + args.args + args.kwonlyargs]
    params = params[1:] if params[:1] in (["self"], ["cls"]) else params
    params += [a.arg for a in (args.vararg, args.kwarg) if a is not None]
    passed = [getattr(a.value if isinstance(a, ast.Starred) else a, "id", None) for a in call.args]
    passed += [getattr(k.value, "id", None) for k in call.keywords]
    return sorted(passed, key=str) == sorted(params)


def needless_hops(frames: list[list]) -> list[str]:
    """The frames between the top and the loss (both excluded) that add nothing, each with
    why; ``frames`` as ``frames_to_loss`` returns them."""
    out, seen = [], set()
    for function, filename, path, first_line in frames[1:-1]:
        where = f"{function} ({filename}:{first_line})"
        if function.startswith("<"):
            out.append(f"{where}: anonymous")
        elif (function, path) in seen:
            out.append(f"{where}: twice on the path")
        elif pass_through(Path(path).read_text(), function, first_line):
            out.append(f"{where}: a pass-through (forwards its own arguments unchanged)")
        seen.add((function, path))
    return out


def recorded(tmp_path, monkeypatch, config) -> list[list]:
    path = tmp_path / "stack.json"
    monkeypatch.setenv(STACK_FILE, str(path))
    with config.build() as algo:
        algo.train()
    assert path.exists(), "the loss never ran"
    return json.loads(path.read_text())


def chain(frames: list[list]) -> str:
    return " <- ".join(f"{f[0]} ({f[1]})" for f in frames)


def test_a_pass_through_is_told_from_a_step():
    """The check itself: a frame that only forwards its arguments is needless; one that
    binds an argument, or does anything more, is a step."""
    source = textwrap.dedent('''
        class A:
            def forwards(self, batch, *, timesteps=0):
                """Docstring."""
                return self.update(batch, timesteps=timesteps)

            def forwards_nothing(self):
                self.update()

            def binds(self):
                return self.run(self.step)

            def drops(self, batch, timesteps):
                return self.update(batch)

            def works(self, batch):
                batch = dict(batch)
                return self.update(batch)
        ''')
    lines = {name: i + 1 for i, line in enumerate(source.splitlines())
             for name in ["forwards", "forwards_nothing", "binds", "drops", "works"]
             if line.strip().startswith(f"def {name}(")}
    verdicts = {name: pass_through(source, name, line) for name, line in lines.items()}
    assert verdicts == {"forwards": True, "forwards_nothing": True, "binds": False,
                        "drops": False, "works": False}, verdicts


def test_ppo_path_from_train_to_the_loss_has_no_needless_hop(tmp_path, monkeypatch):
    config = (PPOConfig().environment("CartPole-v1")
              .env_runners(num_env_runners=1, num_envs_per_env_runner=2)
              .training(train_batch_size=200, minibatch_size=64, num_epochs=2)
              .learners(num_learners=0)
              .rl_module(policy_class=f"{HERE}:StackPPOPolicy"))
    frames = frames_to_loss(recorded(tmp_path, monkeypatch, config), "train", "algorithm.py")
    assert not needless_hops(frames), (needless_hops(frames), chain(frames))
    names = [f[0] for f in frames]
    # The policy's update calls the loss, and the learner calls the policy's update.
    assert names[1:3] == ["update", "update_from_batch"], chain(frames)
    # It reads as ppo.py does: its training step, then the learners' update.
    assert ["training_step", "ppo.py"] in [f[:2] for f in frames], chain(frames)


def test_dqn_path_from_train_to_the_loss_has_no_needless_hop(tmp_path, monkeypatch):
    config = (DQNConfig().environment("CartPole-v1")
              .env_runners(num_env_runners=1, rollout_fragment_length=4)
              .training(train_batch_size=32, num_steps_sampled_before_learning_starts=64)
              .reporting(min_sample_timesteps_per_iteration=200)
              .learners(num_learners=0)
              .rl_module(policy_class=f"{HERE}:StackDQNPolicy"))
    frames = frames_to_loss(recorded(tmp_path, monkeypatch, config), "train", "algorithm.py")
    assert not needless_hops(frames), (needless_hops(frames), chain(frames))
    assert ["training_step", "off_policy.py"] in [f[:2] for f in frames], chain(frames)


@pytest.mark.parametrize("minibatch_size", [None, 100])
def test_impala_path_from_the_learner_loop_to_the_loss_has_no_needless_hop(
        tmp_path, monkeypatch, minibatch_size):
    config = (ImpalaConfig().environment("CartPole-v1")
              .env_runners(num_env_runners=1, num_envs_per_env_runner=2,
                           rollout_fragment_length=50)
              .training(train_batch_size=200, minibatch_size=minibatch_size)
              .learners(num_learners=0)
              .rl_module(policy_class=f"{HERE}:StackImpalaPolicy"))
    frames = frames_to_loss(recorded(tmp_path, monkeypatch, config), "_run", "learner_actor.py")
    assert not needless_hops(frames), (needless_hops(frames), chain(frames))


def test_train_repeats_training_step_for_min_time_s_per_iteration():
    """The iteration loop (``run_iteration``, which train() reaches through
    ``training_iteration``) keeps RLlib's behaviour: training_step repeats until
    min_time_s_per_iteration has passed, and every step's trained samples count."""
    config = (PPOConfig().environment("CartPole-v1")
              .env_runners(num_env_runners=1, num_envs_per_env_runner=2)
              .training(train_batch_size=100, minibatch_size=100, num_epochs=1)
              .reporting(min_time_s_per_iteration=1.0)
              .learners(num_learners=0))
    with config.build() as algo:
        steps = []
        step = algo.training_step
        algo.training_step = lambda: steps.append(1) or step()
        result = algo.train()
    assert len(steps) >= 2 and result["time_this_iter_s"] >= 1.0, (len(steps), result["time_this_iter_s"])
    assert result["num_env_steps_trained"] == result["timesteps_total"] >= 100 * len(steps)
