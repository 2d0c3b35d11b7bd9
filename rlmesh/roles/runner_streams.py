"""An env runner's streams (IMPALA, APPO, APEX): it samples on and on and ships each fragment
to its sinks (aggregators, learners or replay shards) on their stream credit, keeping what
ended (episodes, env steps) for the driver's ``pop_sampled``."""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
from typing import Any

from rlmesh.runtime import ActorUnavailable, RemoteError

log = logging.getLogger(__name__)


class FragmentStreams:
    """Streaming for ``EnvRunner`` (its ``_sample_now``, ``_refresh_weights``,
    ``_take_pushed``, ``sampler``, ``worker_index``, ``job`` and ``_stats``)."""

    _stats: dict[str, Any]
    worker_index: int
    job: Any

    def init_streams(self) -> None:
        # What was sampled since the driver last asked.
        self._stream_task: asyncio.Task[None] | None = None
        self._senders: list[Any] | None = None
        self._sampled: dict[str, Any] = {"episodes": [], "env_steps": 0,
                                         "num_nonfinite_steps_skipped": 0}
        self._stream_error: str | None = None

    async def start_streaming(self, sinks: list[str], window: int) -> None:
        """Sample on and on: fragments go round robin to the actors named ``sinks`` (their
        ``add_fragment``), at most ``window`` in flight to each. Weights the param server
        pushed are taken once a fragment is shipped: sampling never waits for them."""
        self._sinks, self._window = list(sinks), window
        if self._stream_task is None:
            self._stream_task = asyncio.ensure_future(self._stream_loop())

    def reset_streams(self, reason: str) -> None:
        """A sink restarted: its in-flight fragments are lost, so start new streams."""
        for sender in self._senders or ():
            sender.abort(reason)

    async def _stream_loop(self) -> None:
        try:
            await self._refresh_weights()  # subscribes: the first fragment has the current weights
            for i in itertools.count():
                if self._senders is None:
                    handles = [await self.job.get_actor(n, timeout=60) for n in self._sinks]
                    self._senders = [h.stream("add_fragment", self._window) for h in handles]
                fragment = await self._sample_now()
                self._sampled["episodes"].extend(fragment.pop("episodes"))
                unlisted = fragment.pop("num_episodes_unlisted", 0)
                if unlisted:  # a vector env's: counted, not listed
                    self._sampled["num_episodes_unlisted"] = (
                        self._sampled.get("num_episodes_unlisted", 0) + unlisted)
                del fragment["num_env_errors"]  # pop_sampled reports the runner's count
                logged = fragment.pop("runner_metrics", None)
                if logged:  # the callbacks' metrics_logger values, replayed in order
                    self._sampled.setdefault("runner_metrics", {"items": []})["items"].extend(
                        logged["items"])
                if "env_error" in fragment:  # the first one, for the driver to show
                    self._sampled["env_error"] = fragment.pop("env_error")
                self._sampled["env_steps"] += fragment["env_steps"]
                if "agent_steps" in fragment:  # multi-agent
                    self._sampled["agent_steps"] = self._sampled.get("agent_steps", 0) + fragment["agent_steps"]
                self._sampled["num_nonfinite_steps_skipped"] += fragment["num_nonfinite_steps_skipped"]
                await self._ship(self._senders[i % len(self._senders)], fragment)
                self._take_pushed()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception("env runner %d stopped sampling", self.worker_index)
            self._stream_error = f"{type(exc).__name__}: {exc}"
            if self.job.role != "driver":  # a runner process of its own: the supervisor restarts it
                os._exit(70)

    async def _ship(self, sender: Any, fragment: dict[str, Any]) -> None:
        try:
            await sender.send(fragment)
        except ActorUnavailable as exc:  # the sink restarted (or is gone): new streams
            self._stats["num_fragments_lost"] += sender.in_flight + 1
            log.warning("env runner %d: %s", self.worker_index, str(exc).splitlines()[0])
            for s in self._senders or ():
                s.close()
            self._senders = None
        except RemoteError as exc:  # the sink refused an earlier fragment; credit came back
            self._stats["num_fragments_lost"] += 1
            log.warning("env runner %d: a fragment was refused: %s", self.worker_index,
                        str(exc).splitlines()[0])

    def pop_sampled(self) -> dict[str, Any]:
        """Episodes that ended and env steps sampled since the last call (streaming)."""
        if self._stream_error is not None:
            raise RuntimeError(f"env runner {self.worker_index} stopped sampling: "
                               f"{self._stream_error}")
        out, self._sampled = self._sampled, {"episodes": [], "env_steps": 0,
                                             "num_nonfinite_steps_skipped": 0}
        out["num_fragments_lost"] = self._stats["num_fragments_lost"]
        out["num_env_errors"] = self.sampler.counters["env_errors"]
        return out
