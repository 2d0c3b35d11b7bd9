"""Episodes to video: ``FrameRecorder`` (a gymnasium wrapper keeping the ``rgb_array`` frames
of an episode it is asked to record), ``write_mp4`` through imageio-ffmpeg (the optional
``video`` extra, which carries its own ffmpeg), and ``StepCap``, the per-episode step limit
of evaluation (an episode that never ends cannot hang it)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

DEFAULT_FPS = 30
STEP_CAP_KEY = "rlmesh_step_cap"  # in a step's info: the episode was cut by StepCap


def ffmpeg(what: str = "recording video") -> Any:
    """The imageio_ffmpeg module, or MissingExtra in one line naming the extra."""
    from rlmesh.extras import require

    return require("imageio_ffmpeg", "video", what)


def write_mp4(path: str | os.PathLike, frames: list[np.ndarray], fps: float = DEFAULT_FPS) -> str:
    """``frames`` (``[H, W, 3]`` uint8, all of one size) as an H.264 mp4 at ``path``; every
    frame is one video frame. Odd sizes are padded by a black row/column (H.264's 4:2:0
    needs even ones)."""
    if not frames:
        raise ValueError("no frames to write")
    iio = ffmpeg()
    first = np.asarray(frames[0])
    h, w = first.shape[:2]
    ph, pw = h + h % 2, w + w % 2
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}.mp4")
    writer = iio.write_frames(str(tmp), (pw, ph), fps=fps, macro_block_size=1,
                              quality=7, ffmpeg_log_level="error")
    writer.send(None)
    try:
        for frame in frames:
            frame = np.asarray(frame, dtype=np.uint8)[..., :3]
            if frame.shape[:2] != (ph, pw):
                frame = np.pad(frame, ((0, ph - frame.shape[0]), (0, pw - frame.shape[1]), (0, 0)))
            writer.send(np.ascontiguousarray(frame))
    finally:
        writer.close()
    tmp.replace(path)  # a reader never sees half a file
    return str(path)


def read_frames(path: str | os.PathLike, every: int = 1) -> list[np.ndarray]:
    """The frames of a video (every ``every``-th), ``[H, W, 3]`` uint8."""
    iio = ffmpeg("reading video")
    reader = iio.read_frames(str(path))
    meta = next(reader)
    w, h = meta["size"]
    out = []
    for i, raw in enumerate(reader):
        if i % every == 0:
            out.append(np.frombuffer(raw, np.uint8).reshape(h, w, 3))
    return out


def count_frames(path: str | os.PathLike) -> int:
    """Frames in a video, decoded (not the container's claim)."""
    return ffmpeg("reading video").count_frames_and_secs(str(path))[0]


class StepCap(gym.Wrapper):
    """Truncate an episode at ``max_steps`` steps, marking the step's info so that the
    episode is reported as partial (cut by evaluation, not ended by the env)."""

    def __init__(self, env: gym.Env, max_steps: int) -> None:
        super().__init__(env)
        self.max_steps = max_steps
        self.steps = 0
        self.num_cut = 0

    def reset(self, **kwargs: Any):
        self.steps = 0
        return self.env.reset(**kwargs)

    def step(self, action: Any):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.steps += 1
        if self.steps >= self.max_steps and not (terminated or truncated):
            truncated = True
            info = {**info, STEP_CAP_KEY: True}
            self.num_cut += 1
        return obs, reward, terminated, truncated, info


class FrameRecorder(gym.Wrapper):
    """Keeps the frames of the next whole episode once ``arm(path_stem)`` is called: the
    frame after reset and one after each step (an episode of n steps: n + 1 frames), written
    to ``<stem>.mp4`` when it ends (``<stem>-partial.mp4`` when cut or ``flush``ed early).
    With ``every_episode`` (a path prefix) every episode is recorded, to
    ``<prefix>0001.mp4``, ``<prefix>0002.mp4``, ... (``rlmesh rollout --video``).
    The env must be made with ``render_mode="rgb_array"``."""

    def __init__(self, env: gym.Env, every_episode: str | None = None) -> None:
        super().__init__(env)
        if getattr(env, "render_mode", None) != "rgb_array":
            raise ValueError(f"recording video needs the env made with render_mode='rgb_array', "
                             f"it has {getattr(env, 'render_mode', None)!r}; a factory env gets "
                             "render_mode in its env_config")
        self.fps = float(env.metadata.get("render_fps") or DEFAULT_FPS)
        self._stem: str | None = None
        self._frames: list[np.ndarray] | None = None
        self.written: list[str] = []
        self._prefix, self._count = every_episode, 0

    def arm(self, stem: str) -> None:
        """Record the next episode that starts, into ``<stem>.mp4``."""
        self._stem, self._frames = stem, None

    def reset(self, **kwargs: Any):
        out = self.env.reset(**kwargs)
        if self._frames is not None:  # reset mid-recording: what was kept is partial
            self.flush()
        if self._prefix is not None:
            self._count += 1
            self._stem = f"{self._prefix}{self._count:04d}"
        if self._stem is not None:
            self._frames = [self._frame()]
        return out

    def step(self, action: Any):
        obs, reward, terminated, truncated, info = self.env.step(action)
        if self._frames is not None:
            self._frames.append(self._frame())
            if terminated or truncated:
                self.flush(partial=bool(info.get(STEP_CAP_KEY)))
        return obs, reward, terminated, truncated, info

    def flush(self, partial: bool = True) -> None:
        """Write what is recorded (partial unless the episode ended) and stop recording."""
        frames, stem = self._frames, self._stem
        self._frames = self._stem = None
        if frames and len(frames) > 1 and stem is not None:  # more than a reset frame
            self.written.append(write_mp4(f"{stem}{'-partial' if partial else ''}.mp4",
                                          frames, self.fps))

    def close(self) -> None:
        self.flush()
        super().close()

    def _frame(self) -> np.ndarray:
        frame = self.env.render()
        if not isinstance(frame, np.ndarray):
            raise ValueError(f"render() gave {type(frame).__name__}, not an rgb_array frame")
        return frame
