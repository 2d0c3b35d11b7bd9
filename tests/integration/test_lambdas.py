"""Lambdas and closures where RLlib users write them (register_env, policy_mapping_fn,
policies_to_train, callbacks and custom models defined in a function, tune's sample_from),
in scripts run as a user runs them: this machine's env runners and learners are handed
them through the pipe they are started with (rlmesh/runtime/handed.py); a launched cluster
refuses them in one line before anything starts; checkpoints stay free of them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from rlmesh.algorithms.ppo import PPOConfig
from rlmesh.runtime import handed

MULTI_AGENT = """
import json, sys
import gymnasium as gym
from rlmesh import register_env
from rlmesh.algorithms.ppo import PPOConfig
from rlmesh.env import make_multi_agent

register_env("cartpoles",
             lambda cfg: make_multi_agent(lambda c: gym.make("CartPole-v1"))(cfg))
frozen = "p2"

cfg = (PPOConfig()
       .environment("cartpoles", env_config={"num_agents": 3})
       .env_runners(num_env_runners=2, num_envs_per_env_runner=2, rollout_fragment_length=25)
       .training(train_batch_size=100, minibatch_size=50, num_epochs=1,
                 model={"fcnet_hiddens": [8]})
       .multi_agent(policies={"p0", "p1", "p2"},
                    policy_mapping_fn=lambda agent_id, episode, **kw: f"p{agent_id}",
                    policies_to_train=lambda pid, batch=None: pid != frozen)
       .debugging(seed=0))
with cfg.build() as algo:
    for _ in range(2):
        result = algo.train()
    path = algo.save(sys.argv[1])
learner = result["info"]["learner"]
print("RESULT " + json.dumps({
    "trained": sorted(p for p, stats in learner.items() if stats),
    "acted": sorted(result["policy_reward_mean"]), "checkpoint": str(path)}))
"""

INSIDE_A_FUNCTION = """
import json
import torch
from torch import nn
from rlmesh.algorithms.ppo import PPOConfig
from rlmesh.callbacks import Callbacks


def main():
    class Counting(Callbacks):
        def on_episode_end(self, *, episode, **kwargs):
            episode.custom_metrics["made_in_main"] = 7.0

    class Tiny(nn.Module):
        def __init__(self, obs_space, action_space, num_outputs, model_config):
            super().__init__()
            self.body = nn.Linear(obs_space.shape[0], 8)
            self.pi = nn.Linear(8, num_outputs)
            self.vf = nn.Linear(8, 1)

        def forward(self, obs):
            x = torch.tanh(self.body(obs.float()))
            return self.pi(x), self.vf(x).squeeze(-1)

    cfg = (PPOConfig()
           .environment("CartPole-v1")
           .env_runners(num_env_runners=1, num_envs_per_env_runner=2, rollout_fragment_length=50)
           .training(train_batch_size=100, minibatch_size=50, num_epochs=1,
                     model={"custom_model": Tiny})
           .callbacks(Counting)
           .debugging(seed=0))
    with cfg.build() as algo:
        result = algo.train()
        params = sorted(algo.get_weights()["default_policy"])
    print("RESULT " + json.dumps({"metric": result["custom_metrics"].get("made_in_main_mean"),
                                  "params": params}))


if __name__ == "__main__":
    main()
"""


def _run(script: str, tmp_path: Path, *args: str, timeout: float = 300) -> dict:
    file = tmp_path / "user_script.py"
    file.write_text(textwrap.dedent(script))
    proc = subprocess.run([sys.executable, str(file), *args], capture_output=True, text=True,
                          timeout=timeout, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    line = next(l for l in proc.stdout.splitlines() if l.startswith("RESULT "))
    return json.loads(line[len("RESULT "):])


def test_a_script_with_lambda_env_and_mapping_trains_both_policies(tmp_path, no_children_left):
    out = _run(MULTI_AGENT, tmp_path, str(tmp_path / "ckpt"))
    # agent i -> p<i> in both runner processes; p2 acts, and the closure keeps it frozen
    assert out["acted"] == ["p0", "p1", "p2"]
    assert out["trained"] == ["p0", "p1"]
    # The checkpoint holds no pickle: the env and the functions are written as their tokens.
    ckpt = tmp_path / "ckpt"
    blob = b"".join(p.read_bytes() for p in ckpt.rglob("*") if p.is_file())
    assert b"cloudpickle" not in blob and b"\x80\x04\x95" not in blob  # a pickle's header
    assert b"<local " in blob


def test_callbacks_and_custom_model_defined_in_a_function(tmp_path, no_children_left):
    out = _run(INSIDE_A_FUNCTION, tmp_path)
    assert out["metric"] == 7.0  # the callbacks ran in the runner process
    assert any(name.startswith("body.") for name in out["params"])  # the custom model


def test_a_checkpoint_of_a_lambda_env_restored_elsewhere_says_to_register_it_again(tmp_path):
    _run(MULTI_AGENT, tmp_path, str(tmp_path / "ckpt"))
    restore = tmp_path / "restore.py"

    def restore_fails(register: bool) -> str:
        restore.write_text(textwrap.dedent(f"""
            import gymnasium as gym
            from rlmesh import register_env
            from rlmesh.algorithms import Algorithm
            if {register}:
                register_env("cartpoles", lambda cfg: gym.make("CartPole-v1"))
            Algorithm.from_checkpoint({str(tmp_path / 'ckpt')!r})
        """))
        proc = subprocess.run([sys.executable, str(restore)], capture_output=True, text=True,
                              timeout=120, cwd=tmp_path)
        assert proc.returncode != 0
        return proc.stderr.strip().splitlines()[-1]

    last = restore_fails(register=False)
    assert "register_env('cartpoles', ...)" in last and "<lambda>" in last, last
    last = restore_fails(register=True)  # the mapping function cannot be registered
    assert "policy_mapping_fn was <local" in last and "algo.restore(path)" in last, last


def test_tune_sample_from_a_lambda_over_a_lambda_env(tmp_path, no_children_left):
    # sample_from runs in the sweep; each trial's process is handed the env's lambda
    script = """
    import json
    import gymnasium as gym
    from rlmesh import register_env, tune
    from rlmesh.algorithms.ppo import PPOConfig

    register_env("lambda_cartpole", lambda cfg: gym.make("CartPole-v1"))
    cfg = (PPOConfig().environment("lambda_cartpole")
           .env_runners(num_env_runners=1, rollout_fragment_length=50)
           .training(train_batch_size=50, minibatch_size=50, num_epochs=1,
                     lr=tune.grid_search([0.001, 0.002]),
                     gamma=tune.sample_from(lambda spec: 0.9 if spec.config["lr"] < 0.0015 else 0.8)))
    analysis = tune.run("PPO", config=cfg, stop={"training_iteration": 1},
                        storage_path=%r, verbose=0)
    print("RESULT " + json.dumps(sorted((t.config["lr"], t.config["gamma"]) for t in analysis.trials)))
    """ % str(tmp_path / "sweep")
    out = _run(script, tmp_path)
    assert out == [[0.001, 0.9], [0.002, 0.8]]


def test_a_lambda_on_a_launched_cluster_is_one_line_before_anything_starts(monkeypatch):
    from rlmesh.driver.algorithm import Algorithm
    from rlmesh.config.settings import ConfigError
    from rlmesh.runtime import job

    started = []

    async def factory(request):
        started.append(request)
        raise AssertionError("a job was asked for")

    monkeypatch.setattr(job, "_job_factory", factory)
    cfg = (PPOConfig().environment("CartPole-v1")
           .env_runners(num_env_runners=1)
           .multi_agent(policies={"a"}, policy_mapping_fn=lambda agent_id, episode, **kw: "a"))
    with pytest.raises(ConfigError) as err:
        cfg.build()
    message = str(err.value)
    assert "policy_mapping_fn" in message and "module level" in message
    assert "\n" not in message.strip()
    assert not started


def test_tokens_are_plain_data_and_resolve_here():
    fn = lambda agent_id, episode, **kw: "p0"  # noqa: E731
    cfg = PPOConfig().multi_agent(policies={"p0"}, policy_mapping_fn=fn)
    data = cfg.to_dict()
    token = data["policy_mapping_fn"]
    assert handed.is_token(token) and "<lambda>" in token and __file__ in token
    json.dumps(data)  # params.json is still written
    assert handed.resolve(token) is fn
    assert PPOConfig().multi_agent(policy_mapping_fn=fn).policy_mapping_fn == token  # one token
    with pytest.raises(handed.NotHanded, match="register or pass it again"):
        handed.resolve("<local 999 <lambda> at nowhere.py line 1>", "env creator")


def test_a_lambda_that_cannot_be_handed_is_one_line_before_anything_starts():
    import threading

    lock = threading.Lock()
    fn = lambda agent_id, episode, **kw: "a" if lock else "b"  # noqa: E731  (holds a lock)
    cfg = (PPOConfig().environment("CartPole-v1").env_runners(num_env_runners=1)
           .multi_agent(policies={"a"}, policy_mapping_fn=fn))
    token = cfg.policy_mapping_fn
    try:
        with pytest.raises(handed.NotHandable) as err:
            cfg.build()
        assert token in str(err.value) and "module level" in str(err.value)
        assert "\n" not in str(err.value)
    finally:  # this process's other runs must not carry it
        del handed._objects[token], handed._tokens[id(fn)]
