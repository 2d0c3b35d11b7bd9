"""Scripts as RLlib's docs write them, with no ``if __name__ == "__main__":`` guard: the env,
policy and trainer classes are defined in the script itself and the run starts at its top
level. The runner and trial processes import the script for those classes and must not start
the run again (each run of the script writes its pid once, after training)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import psutil

SCRIPT = textwrap.dedent('''
    import os, sys
    import gymnasium as gym
    import rlmesh as ray
    from rlmesh import tune
    from rlmesh.agents.trainer_template import build_trainer
    from rlmesh.evaluation.postprocessing import compute_advantages, Postprocessing
    from rlmesh.policy.sample_batch import SampleBatch
    from rlmesh.policy.torch_policy_template import build_torch_policy

    class ShortCartPole(gym.Wrapper):
        def __init__(self, config=None):
            super().__init__(gym.make("CartPole-v1", max_episode_steps=50))

    def returns(policy, sample_batch, other_agent_batches=None, episode=None):
        return compute_advantages(sample_batch, 0.0, policy.config["gamma"], use_gae=False)

    def reinforce(policy, model, dist_class, train_batch):
        logits, _ = model.from_batch(train_batch)
        logp = dist_class(logits).logp(train_batch[SampleBatch.ACTIONS])
        return -(logp * train_batch[Postprocessing.ADVANTAGES]).mean()

    Reinforce = build_torch_policy(name="Reinforce", loss_fn=reinforce, postprocess_fn=returns)
    ReinforceTrainer = build_trainer(name="ReinforceTrainer", default_policy=Reinforce)

    ray.init()
    config = {"num_workers": 1, "train_batch_size": 200, "rollout_fragment_length": 100}
    trainer = ReinforceTrainer(config=config, env=ShortCartPole)
    result = trainer.train()
    trainer.stop()
    analysis = tune.run(ReinforceTrainer, config={**config, "env": ShortCartPole},
                        stop={"training_iteration": 1}, verbose=0, local_dir=sys.argv[2])
    with open(sys.argv[1], "a") as marker:
        marker.write(f"{os.getpid()} {result['timesteps_total']} {len(analysis.trials)}\\n")
''')


def test_a_script_without_a_main_guard_runs_once_with_its_own_classes(tmp_path: Path):
    script, marker = tmp_path / "train_reinforce.py", tmp_path / "runs.txt"
    script.write_text(SCRIPT)
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    done = subprocess.run([sys.executable, str(script), str(marker), str(tmp_path / "results")],
                          capture_output=True, text=True, timeout=240, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = marker.read_text().splitlines()
    assert len(lines) == 1, lines  # the parent's one run; no process repeated it
    pid, steps, trials = lines[0].split()
    assert int(pid) > 0 and int(steps) >= 200 and trials == "1"
    left = {p.pid for p in psutil.Process().children(recursive=True)} - before
    assert not left, f"processes left behind: {left}"
