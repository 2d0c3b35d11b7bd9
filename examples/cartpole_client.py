"""A simulator with its own main loop that learns through rlmesh's PolicyClient.

It owns a CartPole env and steps it itself; rlmesh only sees what the client reports.
Start the server first (it trains PPO on what clients report), then one or more of these:

    rlmesh train -f examples/cartpole_server.yaml
    python examples/cartpole_client.py --inference-mode remote     # or local

Only pyzmq, msgpack and numpy are needed here for remote inference (gymnasium for this
simulator's env); local inference also uses gymnasium for the spaces, never torch.
"""

from __future__ import annotations

import argparse
import time

import gymnasium as gym

from rlmesh.client import PolicyClient, curve_client_options


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--address", default="tcp://127.0.0.1:9900")
    parser.add_argument("--inference-mode", choices=["remote", "local"], default="remote")
    parser.add_argument("--update-interval", type=float, default=1.0,
                        help="local inference: seconds between checks for new weights")
    parser.add_argument("--episodes", type=int, default=0, help="stop after this many (0: never)")
    parser.add_argument("--seconds", type=float, default=0, help="stop after this long (0: never)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--curve-keys", metavar="DIR",
                        help="the server's keys (rlmesh.client.make_curve_keys); default: "
                             "~/.rlmesh/policy_server_keys, where a server given none made them")
    parser.add_argument("--client-name", default="client", help="this client's key pair in DIR")
    parser.add_argument("--insecure-plaintext", action="store_true",
                        help="no CURVE (a server started with policy_server_insecure_plaintext)")
    args = parser.parse_args(argv)
    keys = curve_client_options(args.curve_keys, args.client_name) if args.curve_keys else {}

    env = gym.make("CartPole-v1")
    start, episode = time.monotonic(), 0
    with PolicyClient(args.address, inference_mode=args.inference_mode,
                      update_interval=args.update_interval,
                      insecure_plaintext=args.insecure_plaintext, **keys) as client:
        while not (args.episodes and episode >= args.episodes
                   or args.seconds and time.monotonic() - start > args.seconds):
            episode_id = client.start_episode()
            obs, _ = env.reset(seed=args.seed * 100_000 + episode)
            total, done = 0.0, False
            while not done:
                action = client.get_action(episode_id, obs)
                obs, reward, terminated, truncated, _ = env.step(action)
                client.log_returns(episode_id, reward)
                total += reward
                done = terminated or truncated
            # A time limit cut the episode short: rlmesh bootstraps its value.
            client.end_episode(episode_id, obs, truncated=truncated and not terminated)
            episode += 1
            if episode % 50 == 0:
                print(f"episode {episode}: return {total:.0f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
