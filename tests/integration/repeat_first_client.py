"""A simulator for the recurrent client tests: ``--interleave`` RepeatFirstEnv episodes at
once through one PolicyClient, their steps taken in turn, so one client's episodes are
always interleaved. ``python -m tests.integration.repeat_first_client --address ADDR``."""

from __future__ import annotations

import argparse

from rlmesh.client import PolicyClient
from tests.integration.envs_for_tests import RepeatFirstEnv


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--address", required=True)
    parser.add_argument("--inference-mode", choices=["remote", "local"], default="remote")
    parser.add_argument("--interleave", type=int, default=8)
    parser.add_argument("--num-symbols", type=int, default=4)
    parser.add_argument("--update-interval", type=float, default=0.2)
    args = parser.parse_args(argv)
    envs = [RepeatFirstEnv({"num_symbols": args.num_symbols}) for _ in range(args.interleave)]
    with PolicyClient(args.address, inference_mode=args.inference_mode,
                      update_interval=args.update_interval) as client:
        episode = 0
        ids, obs = [], []
        for env in envs:
            ids.append(client.start_episode())
            obs.append(env.reset(seed=episode)[0])
            episode += 1
        while True:  # until the test terminates this process
            for i, env in enumerate(envs):
                action = client.get_action(ids[i], obs[i])
                obs[i], reward, done, _, _ = env.step(action)
                if reward:  # a step's reward is 0 unless logged: one round trip fewer
                    client.log_returns(ids[i], reward)
                if done:
                    client.end_episode(ids[i], obs[i])
                    ids[i] = client.start_episode()
                    obs[i] = env.reset(seed=episode)[0]
                    episode += 1


if __name__ == "__main__":
    raise SystemExit(main())
