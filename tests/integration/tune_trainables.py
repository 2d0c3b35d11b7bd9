"""Function trainables for the sweep tests: cheap, deterministic, each a point of the
machinery (reporting, checkpoints, slowness) rather than of learning."""

import json
import os
import time

from rlmesh import tune


def quadratic(config):
    """score rises each iteration towards -(x - 3)^2: the best x is 3."""
    for i in range(config.get("iterations", 3)):
        tune.report(score=-(config["x"] - 3) ** 2 + i * 0.01)


def trivial(config):
    tune.report(score=config["x"])


def counter(config):
    """Counts iterations with a checkpoint each one, going on from a checkpoint if given;
    score = quality * step; ``sleep`` seconds per iteration."""
    start, score = 0, 0.0
    restored = tune.get_checkpoint()
    if restored:
        with open(os.path.join(restored, "state.json")) as f:
            state = json.load(f)
        start, score = state["step"], state["score"]
    for step in range(start + 1, config.get("iterations", 10) + 1):
        time.sleep(config.get("sleep", 0.0))
        score += config["quality"]
        path = os.path.join(tune.get_trial_dir(), f"checkpoint_{step:06d}")
        os.makedirs(path, exist_ok=True)
        with open(os.path.join(path, "state.json"), "w") as f:
            json.dump({"step": step, "score": score, "quality": config["quality"]}, f)
        tune.report({"score": score, "restored_from": restored or ""}, checkpoint=path)
