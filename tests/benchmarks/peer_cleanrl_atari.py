"""The CleanRL peer of the Atari benchmark: PPO on Pong in one file, in the shape of CleanRL's
ppo_atari_envpool.py (written here, importing nothing of rlmesh), with the parity settings
of atari_setup.py. Envs: envpool's Pong-v5 when ``import envpool`` works, else ale-py's C++
vector env. Prints one JSON line: {"peer", "env_steps", "wall_s", "env_steps_per_s",
"warmup_s", "note"}, the rate measured after the first iteration (rollout and update).

    .venv/bin/python tests/benchmarks/peer_cleanrl_atari.py --steps 20000
"""

from __future__ import annotations

import time

T_START = time.perf_counter()  # before the imports: warmup_s counts them

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.benchmarks.atari_setup import ATARI_PPO as S  # noqa: E402


def make_envs(seed: int, backend: str = "auto") -> tuple[object, str]:
    """8 preprocessed Pong envs stepped together in C++; obs (8, 4, 84, 84) uint8. Both
    backends reset an env inside the step that ends its episode (CleanRL's convention)."""
    threads = min(S["num_envs"], os.cpu_count() or 1)  # as rlmesh's vector env takes them
    common = dict(num_threads=threads, repeat_action_probability=S["repeat_action_probability"],
                  full_action_space=S["full_action_space"], noop_max=S["noop_max"],
                  img_height=S["screen_size"], img_width=S["screen_size"],
                  stack_num=S["framestack"])
    try:
        if backend == "ale":
            raise ImportError("--envs ale")
        import envpool
    except ImportError as e:
        if backend == "envpool":
            raise
        print(f"peer_cleanrl_atari: no envpool ({e}); ale-py's vector env instead",
              file=sys.stderr)
    else:
        envs = envpool.make(S["game"].capitalize() + "-v5", env_type="gymnasium",
                            num_envs=S["num_envs"], batch_size=S["num_envs"], seed=seed,
                            frame_skip=S["frame_skip"], gray_scale=S["grayscale"],
                            reward_clip=S["reward_clip"], **common)
        return envs, f"envpool {envpool.__version__}"
    import ale_py
    from ale_py.vector_env import AtariVectorEnv

    envs = AtariVectorEnv(S["game"], S["num_envs"], autoreset_mode="SameStep",
                          frameskip=S["frame_skip"], grayscale=S["grayscale"],
                          reward_clipping=S["reward_clip"], **common)
    envs.reset(seed=seed)  # seeds it; train()'s reset then starts from there
    return envs, f"ale-py {ale_py.__version__} AtariVectorEnv"


def layer(m: nn.Module, std: float = 2 ** 0.5) -> nn.Module:
    nn.init.orthogonal_(m.weight, std)
    nn.init.constant_(m.bias, 0.0)
    return m


class Agent(nn.Module):
    """Nature CNN trunk shared by the policy and value heads."""

    def __init__(self, n_actions: int) -> None:
        super().__init__()
        convs, channels, size = [], S["framestack"], S["screen_size"]
        for out, kernel, stride in S["conv_filters"]:
            convs += [layer(nn.Conv2d(channels, out, kernel, stride)), nn.ReLU()]
            channels, size = out, (size - kernel) // stride + 1
        self.trunk = nn.Sequential(*convs, nn.Flatten(),
                                   layer(nn.Linear(channels * size * size, S["dense"])), nn.ReLU())
        self.actor = layer(nn.Linear(S["dense"], n_actions), 0.01)
        self.critic = layer(nn.Linear(S["dense"], 1), 1.0)

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        return self.critic(self.trunk(obs / 255.0)).squeeze(-1)

    def act(self, obs: torch.Tensor, action: torch.Tensor | None = None):
        hidden = self.trunk(obs / 255.0)
        dist = torch.distributions.Categorical(logits=self.actor(hidden))
        if action is None:
            action = dist.sample()
        return action, dist.log_prob(action), dist.entropy(), self.critic(hidden).squeeze(-1)


def advantages(rewards, dones, values, next_value, next_done):
    """GAE(lambda) over the rollout; ``dones[t]`` marks obs[t] as an episode's first."""
    adv = torch.zeros_like(rewards)
    last = 0.0
    for t in reversed(range(len(rewards))):
        nonterminal = 1.0 - (next_done if t == len(rewards) - 1 else dones[t + 1])
        next_v = next_value if t == len(rewards) - 1 else values[t + 1]
        delta = rewards[t] + S["gamma"] * next_v * nonterminal - values[t]
        adv[t] = last = delta + S["gamma"] * S["lambda"] * nonterminal * last
    return adv


def update(agent, optimizer, obs, actions, logprobs, adv, returns, values) -> None:
    """``num_epochs`` passes over the batch in shuffled minibatches: the clipped PPO loss."""
    n, mb = len(obs), S["minibatch_size"]
    for _ in range(S["num_epochs"]):
        order = torch.randperm(n)
        for start in range(0, n, mb):
            i = order[start:start + mb]
            _, logp, entropy, v = agent.act(obs[i].float(), actions[i])
            ratio = (logp - logprobs[i]).exp()
            a = adv[i]
            a = (a - a.mean()) / (a.std() + 1e-8)
            pg_loss = torch.max(-a * ratio,
                                -a * ratio.clamp(1 - S["clip_param"], 1 + S["clip_param"])).mean()
            v_clipped = values[i] + (v - values[i]).clamp(-S["clip_param"], S["clip_param"])
            v_loss = 0.5 * torch.max((v - returns[i]) ** 2, (v_clipped - returns[i]) ** 2).mean()
            loss = pg_loss - S["entropy_coeff"] * entropy.mean() + S["vf_loss_coeff"] * v_loss
            optimizer.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(agent.parameters(), S["grad_clip"])
            optimizer.step()


def train(steps: int, seed: int, backend: str) -> dict:
    torch.manual_seed(seed)
    torch.set_num_threads(S["torch_threads"])
    envs, backend = make_envs(seed, backend)
    n_envs, horizon = S["num_envs"], S["rollout_fragment_length"]
    agent = Agent(int(envs.single_action_space.n))
    optimizer = torch.optim.Adam(agent.parameters(), lr=S["lr"], eps=1e-5)
    shape = (horizon, n_envs)
    obs = torch.zeros(shape + envs.single_observation_space.shape, dtype=torch.uint8)
    actions, logprobs, rewards, dones, values = (torch.zeros(shape) for _ in range(5))
    actions = actions.long()
    next_obs = torch.from_numpy(envs.reset()[0])
    next_done = torch.zeros(n_envs)
    iterations = -(-steps // (n_envs * horizon))
    t_first = None
    for it in range(iterations):
        for t in range(horizon):
            obs[t], dones[t] = next_obs, next_done
            with torch.no_grad():
                action, logp, _, value = agent.act(next_obs.float())
            actions[t], logprobs[t], values[t] = action, logp, value
            o, r, term, trunc, _ = envs.step(action.numpy())
            next_obs, rewards[t] = torch.from_numpy(o), torch.from_numpy(np.asarray(r, np.float32))
            next_done = torch.from_numpy(np.logical_or(term, trunc).astype(np.float32))
        with torch.no_grad():
            adv = advantages(rewards, dones, values, agent.value(next_obs.float()), next_done)
        flat = lambda x: x.reshape((-1,) + x.shape[2:])  # noqa: E731
        update(agent, optimizer, flat(obs), flat(actions), flat(logprobs), flat(adv),
               flat(adv + values), flat(values))
        if it == 0:
            t_first = time.perf_counter()
    t_end = time.perf_counter()
    measured = (iterations - 1) * n_envs * horizon
    envs.close()
    return {"peer": "cleanrl", "env_steps": iterations * n_envs * horizon,
            "wall_s": round(t_end - T_START, 2),
            "env_steps_per_s": round(measured / (t_end - t_first), 1) if measured else None,
            "warmup_s": round(t_first - T_START, 2),
            "note": f"{backend}; torch {torch.__version__}, {torch.get_num_threads()} threads"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=20_000, help="env steps (agent steps)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--envs", choices=("auto", "envpool", "ale"), default="auto",
                        help="auto: envpool when it imports, else ale-py's vector env")
    args = parser.parse_args()
    print(json.dumps(train(args.steps, args.seed, args.envs)), flush=True)


if __name__ == "__main__":
    main()
