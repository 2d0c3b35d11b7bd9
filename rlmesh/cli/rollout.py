"""``rlmesh rollout``: restore a policy from a checkpoint and run it in a local env,
printing each episode's return and the mean at the end; ``--render`` shows the episodes in a
window, ``--video DIR`` writes each to an mp4, ``--out FILE`` saves them as offline data."""

from __future__ import annotations

import argparse
import math
import os
import re
import sys
from typing import Any
from pathlib import Path

DEFAULT_EPISODES = 10


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("checkpoint", metavar="CHECKPOINT",
                   help="a checkpoint folder, or a trial folder (its newest checkpoint is used)")
    p.add_argument("--env", metavar="ID", help="env to run in (default: the checkpoint's env)")
    p.add_argument("--run", metavar="ALGO",
                   help="the algorithm the checkpoint was trained with (RLlib's flag; the "
                        "checkpoint names it, so it is only checked against that)")
    length = p.add_mutually_exclusive_group()
    length.add_argument("--steps", type=int, metavar="N", help="run N env steps in all")
    length.add_argument("--episodes", type=int, metavar="N",
                        help=f"run N episodes (default {DEFAULT_EPISODES})")
    p.add_argument("--explore", action="store_true",
                   help="sample actions from the policy's distribution (default: its likeliest)")
    p.add_argument("--seed", type=int, metavar="S", help="seed of the env's first reset")
    show = p.add_mutually_exclusive_group()
    show.add_argument("--render", action="store_true",
                      help="show the episodes in a window (needs a display)")
    show.add_argument("--video", metavar="DIR",
                      help="write each episode to DIR/episode_0001.mp4, ... (pip install "
                           "'rlmesh[video]')")
    p.add_argument("--out", metavar="FILE",
                   help="save the episodes to FILE in the offline format (docs/offline.md): "
                        "JSON lines in RLlib's SampleBatch form, or Parquet when FILE ends in "
                        ".parquet (pip install 'rlmesh[data]'); `input: FILE` reads them back "
                        "(MARWIL, BC). An existing FILE is not overwritten")
    p.add_argument("--trust-code", action="store_true",
                   help="load a checkpoint that names code outside rlmesh (its env, policy, model or "
                        "callbacks, imported and run on loading); trust only checkpoints you made. "
                        "A file path (.py) in a checkpoint is never run")


def resolve_checkpoint(path: str) -> Path:
    """``path`` itself, or the newest ``checkpoint_*`` folder in it (a trial folder). RLlib's
    spellings are taken too: a file inside a checkpoint (``checkpoint_1/checkpoint-1``) means
    its folder, and ``checkpoint_1`` rlmesh's ``checkpoint_000001``."""
    p = Path(os.path.expanduser(path))
    if not p.exists() and re.fullmatch(r"checkpoint-\d+", p.name):
        p = p.parent  # RLlib's state file, which rlmesh's checkpoints do not have
    numbered = re.fullmatch(r"checkpoint_(\d+)", p.name)
    if not p.exists() and numbered:
        p = p.with_name(f"checkpoint_{int(numbered[1]):06d}")
    if not p.exists():
        raise FileNotFoundError(f"no such checkpoint: {path}")
    if p.is_file():
        p = p.parent
    found = sorted(c for c in p.glob("checkpoint_*") if c.is_dir())
    return found[-1] if found else p


def check_run(run: str | None, checkpoint: Path) -> str | None:
    """What is wrong with ``--run`` for ``checkpoint`` (one line), or None: the checkpoint
    names its algorithm, so --run only has to agree with it (a registry name in any case, or
    the import path a checkpoint of a user's algorithm names)."""
    if run is None:
        return None
    from rlmesh.driver.checkpoints import META
    from rlmesh.driver.algorithm_registry import ALGORITHMS, UnknownAlgorithm, get_config_class

    try:
        import msgpack

        saved = msgpack.unpackb((checkpoint / META).read_bytes(), raw=False)["algorithm"]
    except Exception:  # not a checkpoint, or damaged: loading it says so in its own words
        return None
    if ":" not in run:
        try:
            get_config_class(run)
        except UnknownAlgorithm as e:
            return f"--run: {e}"
        run = {n.lower(): n for n in ALGORITHMS}[run.lower()]
    if run == saved:
        return None
    return (f"--run {run}, but {checkpoint} is a {saved} checkpoint; give --run {saved}, or "
            "leave --run out (the checkpoint names its algorithm)")


def make_env(env, env_config: dict, **kwargs):
    """A local env: a gymnasium id, a name registered with rlmesh.env.registry.register_env, or a
    'pkg.mod:make_env' path, exactly as the env runners make theirs (``kwargs``: the
    model and preprocessor_pref of rlmesh.env.registry.make_env)."""
    from rlmesh.env.registry import make_env as _make

    return _make(env, env_config, **kwargs)


def check_shown(render: bool, video: str | None) -> None:
    """RuntimeError for --render without a display, MissingExtra for --video without
    imageio-ffmpeg."""
    if render:
        from rlmesh.driver.evaluation_group import has_display

        if not has_display():
            raise RuntimeError("--render needs a display ($DISPLAY or $WAYLAND_DISPLAY is not "
                               "set); --video DIR writes the episodes to mp4 instead")
    if video:
        from rlmesh.video import ffmpeg

        ffmpeg("--video")


def check_out(path: str | None) -> None:
    """FileExistsError for an --out FILE that exists, MissingExtra for a .parquet one
    without pyarrow: said before the policy is loaded."""
    if not path:
        return
    if os.path.exists(os.path.expanduser(path)):
        raise FileExistsError(f"--out {path} exists; rollout never overwrites data: give "
                              "another FILE or remove it")
    if path.endswith(".parquet"):
        from rlmesh.offline.parquet_io import _pa

        _pa()


def make_shown_env(env_id, env_config: dict, render: bool, video: str | None, **make_kwargs):
    """The env, in a window (``render``: gymnasium's render_mode "human") or recording every
    episode under ``video`` (render_mode "rgb_array"); ``make_kwargs``: make_env's (the
    model and preprocessor_pref, which shape an Atari env's frames)."""
    check_shown(render, video)
    if render:
        env_config = {**env_config, "render_mode": "human"}
    if video:
        env_config = {**env_config, "render_mode": "rgb_array"}
    env = make_env(env_id, env_config, **make_kwargs)
    if video:
        from rlmesh.video import FrameRecorder

        os.makedirs(video, exist_ok=True)
        env = FrameRecorder(env, every_episode=os.path.join(video, "episode_"))
    return env


def _config_value(algo, key, default=None):
    config = getattr(algo, "config", None)
    if config is None:
        return default
    if isinstance(config, dict):
        return config.get(key, default)
    return getattr(config, key, default)


def run_episodes(algo, env, steps: int | None, episodes: int | None, explore: bool,
                 seed: int | None, returns: list[float], out=print,
                 writer=None) -> list[float]:
    """Step ``env`` with the policy, appending each completed episode's return to
    ``returns`` as it ends (so a Ctrl-C keeps those already run); every step also to
    ``writer`` (an offline EpisodeWriter, ``--out``) when given."""
    obs, _ = env.reset(seed=seed)
    ret, length, taken = 0.0, 0, 0
    # A recurrent policy carries its state (and previous action and reward) per episode.
    get_policy = getattr(algo, "get_policy", None)
    initial = list(get_policy().get_initial_state()) if get_policy is not None else []
    state, prev = initial, {}
    while (steps is None or taken < steps) and (episodes is None or len(returns) < episodes):
        if writer is not None:  # the step's columns as a runner records them
            obs_column, action_column, action, state_out, extra = algo.compute_step(
                obs, state, explore, **prev)
            state = state_out if initial else state
        elif initial:
            action, state, _ = algo.compute_single_action(obs, state=state, explore=explore, **prev)
        else:
            action = algo.compute_single_action(obs, explore=explore)
        obs, reward, terminated, truncated, _ = env.step(action)
        if writer is not None:
            writer.add_step(obs_column, action_column, float(reward), terminated, truncated,
                            algo.obs_column(obs), extra)
        prev = {"prev_action": action, "prev_reward": float(reward)}
        ret, length, taken = ret + float(reward), length + 1, taken + 1
        if terminated or truncated:
            returns.append(ret)
            out(f"episode {len(returns)}: return {ret:.2f}, length {length}")
            ret, length = 0.0, 0
            state, prev = initial, {}
            obs, _ = env.reset()
    if length:
        out(f"(episode {len(returns) + 1} cut at {length} steps, return so far {ret:.2f}; "
            "not counted)")
    return returns


def run_multi_agent_episodes(algo, env, steps: int | None, episodes: int | None,
                             explore: bool, seed: int | None, returns: list[float],
                             out=print, writer=None) -> list[float]:
    """``run_episodes`` for a MultiAgentEnv: each agent acts with the policy the
    checkpoint's policy_mapping_fn gives it (once per episode); returns summed over agents,
    with each policy's share printed; every agent's steps also to ``writer`` (``--out``)."""
    from rlmesh.roles.multi_agent_sampler import MultiAgentEpisode, map_agent

    obs, _ = env.reset(seed=seed)
    episode, taken = MultiAgentEpisode(0, 0), 0
    # Each agent of a recurrent policy carries its own state (and previous action and
    # reward) through the episode, as the runners do.
    states: dict[Any, list] = {}
    prevs: dict[Any, dict[str, Any]] = {}
    while (steps is None or taken < steps) and (episodes is None or len(returns) < episodes):
        for aid in obs:
            if aid not in episode.policy_for:
                episode.policy_for[aid] = map_agent(algo.mapping_fn, aid, episode, algo.policies)
                states[aid] = list(algo.get_policy(episode.policy_for[aid]).get_initial_state())
        steps_of = {aid: algo.policies[episode.policy_for[aid]].compute_step(
            o, states[aid] or None, explore, **(prevs.get(aid, {}) if states[aid] else {}))
            for aid, o in obs.items()}
        actions = {aid: step[2] for aid, step in steps_of.items()}
        for aid, step in steps_of.items():
            states[aid] = step[3] if states[aid] else states[aid]
        obs, rewards, terms, truncs, _ = env.step(actions)
        prevs.update({aid: {"prev_action": steps_of[aid][1], "prev_reward": float(rewards.get(aid, 0.0))}
                      for aid in steps_of})
        for aid, r in rewards.items():
            episode.agent_rewards[aid] = episode.agent_rewards.get(aid, 0.0) + float(r)
        episode.length, taken = episode.length + 1, taken + 1
        if writer is not None:
            _write_agent_steps(writer, algo, episode, steps_of, obs, rewards, terms, truncs)
        done = {a for a in obs if terms.get(a) or truncs.get(a)}
        obs = {a: o for a, o in obs.items() if a not in done}
        if terms.get("__all__") or truncs.get("__all__"):
            returns.append(sum(episode.agent_rewards.values()))
            shares = {}
            for aid, r in episode.agent_rewards.items():
                pid = episode.policy_for.get(aid, "?")
                shares[pid] = shares.get(pid, 0.0) + r
            out(f"episode {len(returns)}: return {returns[-1]:.2f}, length {episode.length}, "
                f"by policy {', '.join(f'{p} {r:.2f}' for p, r in sorted(shares.items()))}")
            if writer is not None:
                writer.end_episode(episode.length)
            episode = MultiAgentEpisode(0, len(returns))
            states, prevs = {}, {}
            obs, _ = env.reset()
    if writer is not None:  # an episode cut by --steps: as cut short
        writer.end_episode(episode.length)
    return returns


def _write_agent_steps(writer, algo, episode, steps_of, obs, rewards, terms, truncs) -> None:
    """The agents that acted, each its step; rewards of agents waiting for their turn onto
    their last step."""
    for aid, (obs_column, action_column, _, _, extra) in steps_of.items():
        pid = episode.policy_for[aid]
        new_obs = algo.policies[pid].obs_column(obs[aid]) if aid in obs else obs_column
        writer.add_step(obs_column, action_column, float(rewards.get(aid, 0.0)),
                        bool(terms.get(aid) or terms.get("__all__")),
                        bool(truncs.get(aid) or truncs.get("__all__")) and not (
                            terms.get(aid) or terms.get("__all__")),
                        new_obs, extra, agent=aid, policy_id=pid)
    for aid, r in rewards.items():
        if aid not in steps_of:
            writer.add_reward(aid, float(r))


def summary(returns: list[float]) -> str:
    if not returns:
        return "no episode completed (give more --steps)"
    mean = sum(returns) / len(returns)
    std = math.sqrt(sum((r - mean) ** 2 for r in returns) / len(returns))
    return (f"mean return over {len(returns)} episode{'s' * (len(returns) != 1)}: {mean:.2f} "
            f"(std {std:.2f}, min {min(returns):.2f}, max {max(returns):.2f})")


def main(args: argparse.Namespace) -> int:
    for flag in ("steps", "episodes"):
        if getattr(args, flag) is not None and getattr(args, flag) < 1:
            print(f"rlmesh rollout: error: --{flag} must be >= 1", file=sys.stderr)
            return 2
    try:
        checkpoint = resolve_checkpoint(args.checkpoint)
    except FileNotFoundError as e:
        print(f"rlmesh rollout: error: {e}", file=sys.stderr)
        return 2
    wrong_run = check_run(getattr(args, "run", None), checkpoint)
    if wrong_run:
        print(f"rlmesh rollout: error: {wrong_run}", file=sys.stderr)
        return 2
    try:  # before the policy is loaded: a missing display or package says so at once
        check_shown(args.render, args.video)
        check_out(args.out)
    except (RuntimeError, ImportError, FileExistsError) as e:
        print(f"rlmesh rollout: error: {e}", file=sys.stderr)
        return 2
    from rlmesh.driver.checkpoints import CheckpointError
    from rlmesh.driver.inference import InferencePolicy

    # Acting needs only the policy: no env runners or learner are started.
    try:
        algo = InferencePolicy.from_checkpoint(checkpoint, trust_code=args.trust_code)
    except CheckpointError as e:  # damaged, not a checkpoint at all, or naming untrusted code
        print(f"rlmesh rollout: error: {e}", file=sys.stderr)
        return 2
    returns: list[float] = []
    code = 0
    try:
        env_id = args.env or _config_value(algo, "env")
        if not env_id:
            print("rlmesh rollout: error: the checkpoint names no env; give --env ID",
                  file=sys.stderr)
            return 2
        env_config = {} if args.env else dict(_config_value(algo, "env_config") or {})
        try:
            env = make_shown_env(env_id, env_config, args.render, args.video,
                                 model=dict(_config_value(algo, "model") or {}),
                                 preprocessor_pref=_config_value(algo, "preprocessor_pref",
                                                                 "deepmind"))
        except (RuntimeError, ImportError, ValueError, TypeError) as e:  # no display, no
            # imageio-ffmpeg; an env that made no gymnasium.Env (an edited, trusted checkpoint)
            print(f"rlmesh rollout: error: {e}", file=sys.stderr)
            return 2
        from rlmesh.preprocessing import wrap_for_model

        env = wrap_for_model(env, dict(_config_value(algo, "model") or {}))  # framestack
        episodes = args.episodes if args.steps is None and args.episodes else None
        if args.steps is None and episodes is None:
            episodes = DEFAULT_EPISODES
        print(f"rlmesh rollout: {checkpoint} in {env_id}")
        from rlmesh.env.multi_agent_env import is_multi_agent
        from rlmesh.offline.writer import EpisodeWriter
        from rlmesh.rl.nested_spaces import ObservationError

        writer = EpisodeWriter(args.out) if args.out else None
        try:
            if is_multi_agent(env):
                run_multi_agent_episodes(algo, env, args.steps, episodes, args.explore,
                                         args.seed, returns, writer=writer)
            else:
                run_episodes(algo, env, args.steps, episodes, args.explore, args.seed,
                             returns, writer=writer)
        except KeyboardInterrupt:
            code = 130
        except ObservationError as e:  # another env than the policy's (--env, an edited config)
            print(f"rlmesh rollout: error: {env_id} gives observations the checkpoint's policy "
                  f"does not take ({e}); roll it out in an env with the observations it was "
                  f"trained on (the checkpoint's config names {_config_value(algo, 'env')})", file=sys.stderr)
            return 2
        env.close()
        if args.video:
            print(f"videos: {os.path.abspath(args.video)}")
        if writer is not None:  # the episode a Ctrl-C or --steps cut is written as cut
            writer.close()
            print(f"episodes: {writer.num_episodes} ({writer.num_steps} steps) in {writer.path}")
    finally:
        algo.stop()
    print(summary(returns))
    return code
