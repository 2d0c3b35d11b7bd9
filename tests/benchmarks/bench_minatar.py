"""PPO with the default conv net on MinAtar Breakout (10x10x4 grids): rlmesh's env steps/s
against a CleanRL-style single-process PPO written here (same net, same batch and
epochs), taking turns in the same run. Not in CI; needs minatar (``rlmesh[envs]``).

``python -m tests.benchmarks.bench_minatar [--steps N] [--rounds R]``: per round, each side
trains N env steps (sampling and learning; the rate is steps over wall time after its first
iteration) and samples N steps with learning off; medians are printed with their ratio,
and each side's mean return over its last iteration (a learning curve in short).
"""

from __future__ import annotations

import argparse
import statistics
import time

import gymnasium as gym
import numpy as np

NUM_RUNNERS, NUM_ENVS = 2, 8
BATCH, MINIBATCH, EPOCHS, LR = 2048, 256, 4, 5e-4
MODEL = {"fcnet_hiddens": [128]}  # conv: the default for a 10x10 grid, [[16, 3, 1], [32, 3, 1]]


def make_breakout(env_config=None) -> gym.Env:
    try:
        from minatar.gym import BaseEnv
    except ImportError:
        raise ImportError("MinAtar needs the minatar package: pip install 'rlmesh[envs]'") from None
    return gym.wrappers.TimeLimit(BaseEnv("breakout"), 2000)


# --- rlmesh ---

def rlmesh_rates(steps: int, learner_threads: int | str = "auto") -> tuple[float, float, float]:
    """(train env steps/s, sample env steps/s, last mean return)."""
    from rlmesh.algorithms import PPOConfig

    config = (PPOConfig().environment("tests.benchmarks.bench_minatar:make_breakout")
              .env_runners(num_env_runners=NUM_RUNNERS, num_envs_per_env_runner=NUM_ENVS)
              .learners(num_cpus_per_learner=learner_threads)
              .training(lr=LR, train_batch_size=BATCH, minibatch_size=MINIBATCH,
                        num_epochs=EPOCHS, entropy_coeff=0.01, model=MODEL)
              .debugging(seed=0))
    with config.build() as algo:
        result = algo.train()  # warm-up: processes, torch, first weights
        t0, start = time.perf_counter(), result["timesteps_total"]
        while result["timesteps_total"] - start < steps:
            result = algo.train()
        train_rate = (result["timesteps_total"] - start) / (time.perf_counter() - t0)
        t0 = time.perf_counter()
        sampled = algo.mesh.sample(steps)
        n = sum(int(f["env_steps"]) for f in sampled)
        sample_rate = n / (time.perf_counter() - t0)
        return train_rate, sample_rate, float(result["episode_reward_mean"])


# --- CleanRL-style single process ---

def cleanrl_rates(steps: int) -> tuple[float, float, float]:
    """The same PPO in one process: a SyncVectorEnv of NUM_RUNNERS x NUM_ENVS envs, the
    same conv net (rlmesh's default model class, so the nets match), GAE, clipped loss."""
    import torch

    from rlmesh.rl.distributions import Categorical
    from rlmesh.rl.models import build_model

    torch.set_num_threads(1)
    torch.manual_seed(0)
    n_envs = NUM_RUNNERS * NUM_ENVS
    envs = gym.vector.SyncVectorEnv([make_breakout for _ in range(n_envs)],
                                    autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
    model = build_model(envs.single_observation_space, envs.single_action_space, MODEL)
    opt = torch.optim.Adam(model.parameters(), lr=LR, eps=1e-5)
    obs, _ = envs.reset(seed=0)
    t_len = BATCH // n_envs
    returns, ep_ret = [], np.zeros(n_envs)

    def rollout(learn: bool):
        nonlocal obs, ep_ret
        buf = {k: [] for k in ("obs", "act", "logp", "val", "rew", "done")}
        for _ in range(t_len):
            with torch.no_grad():
                x = torch.as_tensor(obs)
                logits, value = model(x)
                dist = Categorical(logits)
                action = dist.sample()
            next_obs, rew, term, trunc, _ = envs.step(action.numpy())
            ep_ret += rew
            for i in np.flatnonzero(term | trunc):
                returns.append(ep_ret[i])
                ep_ret[i] = 0
            if learn:
                for k, v in (("obs", x), ("act", action), ("logp", dist.logp(action)),
                             ("val", value), ("rew", torch.as_tensor(rew, dtype=torch.float32)),
                             ("done", torch.as_tensor(term | trunc, dtype=torch.float32))):
                    buf[k].append(v)
            obs = next_obs
        return buf

    def update(buf):
        with torch.no_grad():
            next_value = model(torch.as_tensor(obs))[1]
        rew, done, val = (torch.stack(buf[k]) for k in ("rew", "done", "val"))
        adv, last = torch.zeros_like(rew), torch.zeros(n_envs)
        for t in reversed(range(t_len)):
            nv = next_value if t == t_len - 1 else val[t + 1]
            delta = rew[t] + 0.99 * nv * (1 - done[t]) - val[t]
            last = delta + 0.99 * 0.95 * (1 - done[t]) * last
            adv[t] = last
        flat = {k: torch.stack(buf[k]).flatten(0, 1) for k in ("obs", "act", "logp")}
        flat["adv"], flat["ret"] = adv.flatten(), (adv + val).flatten()
        for _ in range(EPOCHS):
            for idx in torch.randperm(BATCH).split(MINIBATCH):
                logits, value = model(flat["obs"][idx])
                dist = Categorical(logits)
                a = flat["adv"][idx]
                a = (a - a.mean()) / (a.std() + 1e-8)
                ratio = (dist.logp(flat["act"][idx]) - flat["logp"][idx]).exp()
                pg = -torch.min(a * ratio, a * ratio.clamp(0.8, 1.2)).mean()
                loss = pg + 0.5 * (value - flat["ret"][idx]).pow(2).mean() - 0.01 * dist.entropy().mean()
                opt.zero_grad()
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
                opt.step()

    update(rollout(True))  # warm-up, as rlmesh's first iteration
    t0, done_steps = time.perf_counter(), 0
    while done_steps < steps:
        update(rollout(True))
        done_steps += BATCH
    train_rate = done_steps / (time.perf_counter() - t0)
    t0, sampled = time.perf_counter(), 0
    while sampled < steps:
        rollout(False)
        sampled += BATCH
    sample_rate = sampled / (time.perf_counter() - t0)
    envs.close()
    return train_rate, sample_rate, float(np.mean(returns[-20:])) if returns else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--learner-threads", default="auto",
                        help="rlmesh's num_cpus_per_learner (torch threads of the learner)")
    args = parser.parse_args()
    rates = {"rlmesh": [], "cleanrl": []}
    for _ in range(args.rounds):  # take turns: both see the same load
        for side, fn in (("cleanrl", cleanrl_rates), ("rlmesh", rlmesh_rates)):
            threads = args.learner_threads
            extra = ({"learner_threads": threads if threads == "auto" else int(threads)}
                     if side == "rlmesh" else {})
            rates[side].append(fn(args.steps, **extra))
            print(side, "train %.0f  sample %.0f env steps/s, return %.2f" % rates[side][-1], flush=True)
    med = {side: [statistics.median(r[i] for r in rs) for i in range(3)] for side, rs in rates.items()}
    print(f"MinAtar Breakout, PPO, default conv net, {NUM_RUNNERS}x{NUM_ENVS} envs, "
          f"{args.steps} steps x {args.rounds} rounds (medians)")
    print("| | rlmesh | CleanRL-style 1 process | ratio |\n| --- | --- | --- | --- |")
    for i, what in enumerate(("training, env steps/s", "sampling only, env steps/s")):
        print(f"| {what} | {med['rlmesh'][i]:,.0f} | {med['cleanrl'][i]:,.0f} | "
              f"{med['rlmesh'][i] / med['cleanrl'][i]:.2f}x |")
    print(f"| mean return at the end | {med['rlmesh'][2]:.2f} | {med['cleanrl'][2]:.2f} | |")


if __name__ == "__main__":
    main()
