"""Self-play with frozen snapshots in rock-paper-scissors (PettingZoo classic ``rps``):
'main' (PPO) plays player_0; player_1 is played by one of the frozen snapshots of 'main'
('main_v0', 'main_v1', ...), a different one per episode. Every ``snapshot_every``
iterations a new snapshot of 'main' is added while training (``algo.add_policy``), and the
oldest is removed once there are more than ``max_snapshots`` (``algo.remove_policy``).

    python examples/self_play.py
"""

from __future__ import annotations

from rlmesh.algorithms.ppo import PPOConfig


def self_play_mapping(agent_id, episode, worker=None, **kwargs) -> str:
    """player_0: 'main'; player_1: a snapshot, taken in turn by episode id among those the
    runner holds (``worker`` is None when the driver checks the mapping: 'main_v0')."""
    if agent_id == "player_0":
        return "main"
    pool = sorted((p for p in worker.policies if p.startswith("main_v")),
                  key=lambda p: int(p[6:])) if worker is not None else ["main_v0"]
    return pool[episode.episode_id % len(pool)]


def config(seed: int = 0) -> PPOConfig:
    return (PPOConfig()
            .environment("rlmesh.env.pettingzoo:make", env_config={"name": "classic/rps-v2"})
            .env_runners(num_env_runners=1, num_envs_per_env_runner=8,
                         rollout_fragment_length="auto")
            .training(train_batch_size=480, minibatch_size=240, num_epochs=5, lr=1e-3,
                      gamma=0.9, entropy_coeff=0.01, use_kl_loss=False, vf_clip_param=None,
                      model={"fcnet_hiddens": [32]})
            .multi_agent(policies={"main", "main_v0"}, policy_mapping_fn=self_play_mapping,
                         policies_to_train=["main"])
            .debugging(seed=seed))


def train(cfg: PPOConfig, iterations: int = 30, snapshot_every: int = 5,
          max_snapshots: int = 3, log: bool = True) -> tuple[dict, list[list[str]]]:
    """Train ``iterations``; the last result and the snapshot pool after each iteration."""
    algo = cfg.build()
    pools, next_id = [], 1
    try:
        for i in range(1, iterations + 1):
            result = algo.train()
            if i % snapshot_every == 0:
                algo.add_policy(f"main_v{next_id}", policy_state=algo.get_policy("main").get_state())
                next_id += 1
                snapshots = sorted((p for p in algo.policy_specs if p.startswith("main_v")),
                                   key=lambda p: int(p[6:]))
                if len(snapshots) > max_snapshots:
                    algo.remove_policy(snapshots[0])
            pools.append(sorted(p for p in algo.policy_specs if p.startswith("main_v")))
            if log:
                print(f"iter {i:3d} main {result['policy_reward_mean'].get('main', 0):6.2f} "
                      f"snapshots {pools[-1]}")
        return result, pools
    finally:
        algo.stop()


if __name__ == "__main__":
    train(config())
