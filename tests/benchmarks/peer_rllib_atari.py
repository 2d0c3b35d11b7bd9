"""The RLlib peer of the Atari benchmark: RLlib's PPO (new API stack) on ALE/Pong-v5 with the
parity settings of atari_setup.py and RLlib's own Atari pipeline as its tuned example
(atari_ppo.py) builds it: wrap_atari_for_new_api_stack (84x84 gray, max-and-skip 4, noop 30,
fire reset; frames in [-1, 1]), frames stacked by the FrameStacking connectors, rewards
clipped by ``clip_rewards``. Runs in .venv-rllib (``make bench-peers``), imports nothing of
rlmesh, and prints one JSON line: {"peer", "env_steps", "wall_s", "env_steps_per_s",
"warmup_s", "note"}, the rate measured after the first ``train()``.

    .venv-rllib/bin/python tests/benchmarks/peer_rllib_atari.py --steps 20000
"""

from __future__ import annotations

import time

T_START = time.perf_counter()  # before the imports: warmup_s counts them

import json  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.benchmarks.atari_setup import ATARI_PPO as S, peer_main  # noqa: E402
from tests.benchmarks.peer_rllib import run_with_session  # noqa: E402

ENV_NAME = "peer_rllib_atari_pong"


def make_env(env_config: dict) -> Any:
    """ALE's Pong without its own frameskip or sticky actions, in RLlib's Atari wrappers
    (stacking is left to the connectors, as RLlib's tuned example does)."""
    import ale_py
    import gymnasium as gym
    from ray.rllib.env.wrappers.atari_wrappers import wrap_atari_for_new_api_stack

    gym.register_envs(ale_py)
    env = gym.make(S["env_id"], frameskip=1, **env_config)
    return wrap_atari_for_new_api_stack(env, dim=S["screen_size"], frameskip=S["frame_skip"],
                                        framestack=None, grayscale=S["grayscale"])


def stack_for_module(env: Any = None, spaces: Any = None, device: Any = None) -> Any:
    from ray.rllib.connectors.env_to_module.frame_stacking import FrameStackingEnvToModule

    return FrameStackingEnvToModule(num_frames=S["framestack"])


def stack_for_learner(input_observation_space: Any = None,
                      input_action_space: Any = None) -> Any:
    from ray.rllib.connectors.learner.frame_stacking import FrameStackingLearner

    return FrameStackingLearner(num_frames=S["framestack"])


def model_config() -> Any:
    """The Nature CNN in RLlib's default CNN encoder: its dense layer of 512 written as a
    7x7 "valid" convolution over the last 7x7x64 maps (the same weights and work; the encoder
    has no dense layer of its own), then linear policy and value heads on the shared 512."""
    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig

    size, convs = S["screen_size"], []
    for channels, kernel, stride in S["conv_filters"]:
        convs.append([channels, kernel, stride, "valid"])
        size = (size - kernel) // stride + 1
    convs.append([S["dense"], size, 1, "valid"])
    return DefaultModelConfig(conv_filters=convs, conv_activation="relu",
                              head_fcnet_hiddens=[], vf_share_layers=True)


def make_config(seed: int) -> Any:
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.tune.registry import register_env

    register_env(ENV_NAME, make_env)
    env_config = {"repeat_action_probability": S["repeat_action_probability"],
                  "full_action_space": S["full_action_space"]}
    return (PPOConfig()
            .environment(ENV_NAME, env_config=env_config, clip_rewards=S["reward_clip"])
            .env_runners(num_env_runners=S["num_env_runners"],
                         num_envs_per_env_runner=S["num_envs_per_env_runner"],
                         rollout_fragment_length=S["rollout_fragment_length"],
                         env_to_module_connector=stack_for_module)
            .learners(num_learners=0,  # the learner in this process, on the CPU
                      learner_connector=stack_for_learner)
            .training(train_batch_size_per_learner=S["train_batch_size"],
                      minibatch_size=S["minibatch_size"], num_epochs=S["num_epochs"],
                      lr=S["lr"], gamma=S["gamma"], lambda_=S["lambda"],
                      clip_param=S["clip_param"], vf_loss_coeff=S["vf_loss_coeff"],
                      entropy_coeff=S["entropy_coeff"], grad_clip=S["grad_clip"],
                      grad_clip_by="global_norm", use_kl_loss=False)
            .rl_module(model_config=model_config())
            .debugging(seed=seed))


def train(steps: int, seed: int, out: dict) -> Any:
    """Builds PPO, calls ``train()`` until ``steps`` env steps, notes the times in ``out``;
    returns the algorithm for run_with_session to stop."""
    import torch
    from ray.rllib.utils.metrics import ENV_RUNNER_RESULTS, NUM_ENV_STEPS_SAMPLED_LIFETIME

    torch.set_num_threads(S["torch_threads"])  # the learner's threads (it runs here)
    config = make_config(seed)

    def body(session: Any) -> Any:
        algo = config.build_algo()
        session.note()
        done, first = 0, None
        while done < steps:
            result = algo.train()
            if ENV_RUNNER_RESULTS not in result:  # RLlib took its runners out of service
                raise RuntimeError("train() sampled nothing: the env runners failed (their "
                                   "error is in ray's output above)")
            done = int(result[ENV_RUNNER_RESULTS][NUM_ENV_STEPS_SAMPLED_LIFETIME])
            if first is None:
                first = (done, time.perf_counter())
        out.update(env_steps=done, first=first, end=time.perf_counter())
        return algo

    run_with_session(body)


def main() -> None:
    args, real_out = peer_main(__doc__)  # Ray prints its workers' output to stdout: stderr
    out: dict = {}
    try:
        train(args.steps, args.seed, out)
    except Exception as e:  # one line for the benchmark's table; the traceback on stderr
        import traceback

        traceback.print_exc()
        error = f"{type(e).__name__}: {e}".splitlines()[0]
        print(json.dumps({"peer": "rllib", "error": error}), file=real_out, flush=True)
        sys.exit(1)
    from importlib.metadata import version

    (steps_1, t_1), t_end = out["first"], out["end"]
    measured = out["env_steps"] - steps_1
    row = {"peer": "rllib", "env_steps": out["env_steps"],
           "wall_s": round(time.perf_counter() - T_START, 2),
           "env_steps_per_s": round(measured / (t_end - t_1), 1) if measured else None,
           "warmup_s": round(t_1 - T_START, 2),
           "note": f"ray {version('ray')} PPO, new API stack, local learner, "
                   f"{S['num_env_runners']} runners x {S['num_envs_per_env_runner']} envs; "
                   f"ale-py {version('ale-py')}, torch {version('torch')}; training ended "
                   f"{t_end - T_START:.1f} s in"}
    print(json.dumps(row), file=real_out, flush=True)


if __name__ == "__main__":
    main()
