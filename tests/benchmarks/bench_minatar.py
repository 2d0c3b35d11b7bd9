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
from typing import Callable

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


def make_minatar(env_config: dict) -> gym.Env:
    """``gym.make(env_config["id"])`` for a MinAtar id (``MinAtar/Breakout-v1``): minatar
    1.0.15 registers its ids only when ``minatar.gym.register_envs()`` is called, which no
    import does, and each env runner is a fresh interpreter."""
    try:
        import minatar.gym
    except ImportError:
        raise ImportError("MinAtar needs the minatar package: pip install 'rlmesh[envs]'") from None
    if env_config["id"] not in gym.envs.registry:
        minatar.gym.register_envs()
    return gym.make(env_config["id"])


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
        sampled = algo.mesh.runners.sample(steps)
        n = sum(int(f["env_steps"]) for f in sampled)
        sample_rate = n / (time.perf_counter() - t0)
        return train_rate, sample_rate, float(result["episode_reward_mean"])


# --- CleanRL-style single process ---

class SingleProcessPPO:
    """CleanRL's ppo.py in one process: a SyncVectorEnv of num_env_runners x
    num_envs_per_env_runner envs, rlmesh's default model class built from the same model
    config (so the nets match), GAE, the clipped loss with advantages standardized per
    minibatch. Its hyperparameters are read from a PPOConfig (lr, lr_schedule, gamma, lambda,
    clip_param, entropy_coeff, vf_loss_coeff, grad_clip, batch, minibatch, epochs), so a
    tuned example's dict sets both sides at once."""

    def __init__(self, make_env: Callable[[], gym.Env], config: dict, seed: int = 0) -> None:
        import torch

        from rlmesh.algorithms import PPOConfig
        from rlmesh.rl.default_model import build_model

        torch.set_num_threads(1)
        torch.manual_seed(seed)
        self.cfg = PPOConfig.from_dict(config)
        self.n_envs = self.cfg.num_env_runners * self.cfg.num_envs_per_env_runner
        self.t_len = self.cfg.train_batch_size // self.n_envs
        self.envs = gym.vector.SyncVectorEnv([make_env] * self.n_envs,
                                             autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
        self.model = build_model(self.envs.single_observation_space,
                                 self.envs.single_action_space, self.cfg.model)
        self.opt = torch.optim.Adam(self.model.parameters(), lr=self.cfg.lr, eps=1e-5)
        self.obs, _ = self.envs.reset(seed=seed)
        self.env_steps = 0
        self.returns: list[float] = []  # of every finished episode, in order
        self._ep_ret = np.zeros(self.n_envs)

    def rollout(self, learn: bool) -> dict[str, list]:
        """t_len steps of every env; the columns the update needs when ``learn``."""
        import torch

        from rlmesh.rl.distributions import Categorical

        buf: dict[str, list] = {k: [] for k in ("obs", "act", "logp", "val", "rew", "done")}
        for _ in range(self.t_len):
            with torch.no_grad():
                x = torch.as_tensor(self.obs)
                logits, value = self.model(x)
                dist = Categorical(logits)
                action = dist.sample()
            self.obs, rew, term, trunc, _ = self.envs.step(action.numpy())
            self._ep_ret += rew
            for i in np.flatnonzero(term | trunc):
                self.returns.append(float(self._ep_ret[i]))
                self._ep_ret[i] = 0
            if learn:
                for k, v in (("obs", x), ("act", action), ("logp", dist.logp(action)),
                             ("val", value), ("rew", torch.as_tensor(rew, dtype=torch.float32)),
                             ("done", torch.as_tensor(term | trunc, dtype=torch.float32))):
                    buf[k].append(v)
        self.env_steps += self.t_len * self.n_envs
        return buf

    def update(self, buf: dict[str, list]) -> None:
        """GAE over the rollout, then num_epochs passes of shuffled minibatches."""
        import torch

        from rlmesh.rl.distributions import Categorical

        cfg, t_len = self.cfg, self.t_len
        with torch.no_grad():
            next_value = self.model(torch.as_tensor(self.obs))[1]
        rew, done, val = (torch.stack(buf[k]) for k in ("rew", "done", "val"))
        adv, last = torch.zeros_like(rew), torch.zeros(self.n_envs)
        for t in reversed(range(t_len)):
            nv = next_value if t == t_len - 1 else val[t + 1]
            delta = rew[t] + cfg.gamma * nv * (1 - done[t]) - val[t]
            last = delta + cfg.gamma * cfg.gae_lambda() * (1 - done[t]) * last
            adv[t] = last
        flat = {k: torch.stack(buf[k]).flatten(0, 1) for k in ("obs", "act", "logp")}
        flat["adv"], flat["ret"] = adv.flatten(), (adv + val).flatten()
        for group in self.opt.param_groups:  # rlmesh steps its schedule by env steps sampled
            group["lr"] = cfg.lr_at(self.env_steps)
        n = len(flat["adv"])
        for _ in range(cfg.num_epochs):
            for idx in torch.randperm(n).split(cfg.minibatch_size):
                logits, value = self.model(flat["obs"][idx])
                dist = Categorical(logits)
                a = flat["adv"][idx]
                a = (a - a.mean()) / (a.std() + 1e-8)
                ratio = (dist.logp(flat["act"][idx]) - flat["logp"][idx]).exp()
                clipped = ratio.clamp(1 - cfg.clip_param, 1 + cfg.clip_param)
                loss = (-torch.min(a * ratio, a * clipped).mean()
                        + cfg.vf_loss_coeff * (value - flat["ret"][idx]).pow(2).mean()
                        - cfg.entropy_coeff * dist.entropy().mean())
                self.opt.zero_grad()
                loss.backward()
                if cfg.grad_clip is not None:
                    torch.nn.utils.clip_grad_norm_(self.model.parameters(), cfg.grad_clip)
                self.opt.step()

    def close(self) -> None:
        self.envs.close()


def cleanrl_rates(steps: int) -> tuple[float, float, float]:
    """(train env steps/s, sample env steps/s, last mean return) of SingleProcessPPO with
    this benchmark's settings (those rlmesh_rates gives PPOConfig)."""
    ppo = SingleProcessPPO(make_breakout, {
        "num_env_runners": NUM_RUNNERS, "num_envs_per_env_runner": NUM_ENVS,
        "train_batch_size": BATCH, "minibatch_size": MINIBATCH, "num_epochs": EPOCHS,
        "lr": LR, "entropy_coeff": 0.01, "model": MODEL})
    ppo.update(ppo.rollout(True))  # warm-up, as rlmesh's first iteration
    t0, done_steps = time.perf_counter(), 0
    while done_steps < steps:
        ppo.update(ppo.rollout(True))
        done_steps += BATCH
    train_rate = done_steps / (time.perf_counter() - t0)
    t0, sampled = time.perf_counter(), 0
    while sampled < steps:
        ppo.rollout(False)
        sampled += BATCH
    sample_rate = sampled / (time.perf_counter() - t0)
    ppo.close()
    returns = ppo.returns
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
