"""The Sample Factory peer of the Atari benchmark: SF 2.1.1's own Atari example
(sf_examples.atari, env atari_pong) trained with the parity settings of atari_setup.py mapped
to its flags (sf_flags below). Runs in .venv-sf (``make bench-peers``), imports nothing of
rlmesh, and prints one JSON line: {"peer", "env_steps", "wall_s", "env_steps_per_s",
"warmup_s", "note"}. Env steps are agent steps: SF counts frames (env_frameskip 4 times as
many, its summaries_use_frameskip), so its budget is steps x 4 and its FPS is divided by 4.

    .venv-sf/bin/python tests/benchmarks/peer_sf_atari.py --steps 20000
"""

from __future__ import annotations

import time

T_START = time.perf_counter()  # before the imports: warmup_s counts them

import json  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402

# SF starts its workers with multiprocessing's "spawn", which imports this file again in each
# of them (as __mp_main__): the import here puts ale-py's ids (PongNoFrameskip-v4) in every
# worker's gymnasium registry, which ale-py 0.9 fills only when imported.
import ale_py  # noqa: E402, F401

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.benchmarks.atari_setup import ATARI_PPO as S, peer_main  # noqa: E402


def sf_flags(steps: int, train_dir: str, seed: int) -> list[str]:
    """The parity settings as SF's flags. Left at the Atari example's defaults: the Nature CNN
    (encoder_conv_architecture convnet_atari, then a 512 dense layer), obs_scale 255, the
    wrappers (noop 30, max-and-skip, fire reset, clipped rewards, 84x84 gray, PongNoFrameskip-v4:
    no sticky actions), ppo_clip_value 1.0. Changed from them for parity: 2 epochs (4),
    constant lr (linear_decay), no input or return normalisation (both on)."""
    conv = [[32, 8, 4], [64, 4, 2], [64, 3, 1]]
    if S["conv_filters"] != conv or not S["grayscale"] or S["screen_size"] != 84:
        raise SystemExit("peer_sf_atari: atari_setup's network or frames are not SF's "
                         "convnet_atari on 84x84 gray frames; update sf_flags")
    flags = {
        "algo": "APPO", "env": S["sf_env"], "experiment": "peer_sf_atari",
        "train_dir": train_dir, "restart_behavior": "overwrite", "seed": seed,
        "device": S["device"],
        "num_workers": S["num_env_runners"],
        "num_envs_per_worker": S["num_envs_per_env_runner"],
        "worker_num_splits": 1,  # no double-buffered sampling: 8 envs step as one batch
        "rollout": S["rollout_fragment_length"],
        "batch_size": S["minibatch_size"],  # SF's batch is the minibatch
        "num_batches_per_epoch": S["train_batch_size"] // S["minibatch_size"],
        "num_epochs": S["num_epochs"],
        "async_rl": False,  # sampling waits for each update, as synchronous PPO does
        "learning_rate": S["lr"], "lr_schedule": "constant",
        "gamma": S["gamma"], "gae_lambda": S["lambda"],
        "ppo_clip_ratio": S["clip_param"],
        "value_loss_coeff": S["vf_loss_coeff"],
        "exploration_loss_coeff": S["entropy_coeff"],
        "max_grad_norm": S["grad_clip"],
        "env_frameskip": S["frame_skip"], "env_framestack": S["framestack"],
        "encoder_conv_mlp_layers": S["dense"],
        "normalize_input": False, "normalize_returns": False,
        "train_for_env_steps": steps * S["frame_skip"],  # SF's env steps are frames
        "save_every_sec": 10 ** 6, "save_best_every_sec": 10 ** 6,
    }
    return [f"--{k}={v}" for k, v in flags.items()]


def make_meter():
    """An SF observer noting when each training iteration ends (one train batch each)."""
    from sample_factory.algo.runners.runner import AlgoObserver

    class Meter(AlgoObserver):
        def __init__(self) -> None:
            self.first: float | None = None
            self.last: tuple[int, float] = (0, 0.0)

        def on_training_step(self, runner, training_iteration_since_resume: int) -> None:
            now = time.perf_counter()
            if self.first is None:
                self.first = now
            self.last = (training_iteration_since_resume, now)

    return Meter()


def train(steps: int, seed: int) -> dict:
    from sample_factory.algo.utils.misc import ExperimentStatus
    from sample_factory.train import make_runner
    from sf_examples.atari.train_atari import parse_atari_args, register_atari_components

    with tempfile.TemporaryDirectory(prefix="peer_sf_atari-") as train_dir:
        register_atari_components()
        cfg = parse_atari_args(sf_flags(steps, train_dir, seed))
        cfg, runner = make_runner(cfg)
        meter = make_meter()
        runner.register_observer(meter)
        status = runner.init()
        if status == ExperimentStatus.SUCCESS:
            status = runner.run()
        t_end = time.perf_counter()
        frames = sum(runner.env_steps.values())
        sf_fps = runner.total_env_steps_since_resume / runner.timing.main_loop
    iterations, t_last = meter.last
    if status != ExperimentStatus.SUCCESS or meter.first is None:
        return {"peer": "sample_factory", "error": f"SF ended with status {status} after "
                f"{iterations} training iterations"}
    batch = S["train_batch_size"]
    from importlib.metadata import version

    return {"peer": "sample_factory", "env_steps": iterations * batch,
            "wall_s": round(t_end - T_START, 2),
            "env_steps_per_s": round((iterations - 1) * batch / (t_last - meter.first), 1)
            if iterations > 1 else None,
            "warmup_s": round(meter.first - T_START, 2),
            "note": f"sample-factory {version('sample-factory')} APPO, async_rl off, "
                    f"{S['num_env_runners']} workers x {S['num_envs_per_env_runner']} envs, "
                    f"ale-py {version('ale-py')}, torch {version('torch')}; {iterations} "
                    f"train batches of {batch}; SF counted "
                    f"{frames} frames = {frames // S['frame_skip']} env steps, its own FPS "
                    f"over the main loop (start-up in) "
                    f"{sf_fps / S['frame_skip']:.1f} env steps/s"}


def main() -> None:
    args, out = peer_main(__doc__)  # SF and its workers log to stdout: stderr here
    print(json.dumps(train(args.steps, args.seed)), file=out, flush=True)


if __name__ == "__main__":
    main()
