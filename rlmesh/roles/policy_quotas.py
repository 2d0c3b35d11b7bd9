"""Per-client quotas of a policy server: how many chunks a client may report per second,
and what share of the reported episodes (the window results smooth over) one client may
hold, so that one client flooding the server can neither drown the others' experience
nor make the run's statistics its own."""

from __future__ import annotations

import math
import time
from collections import Counter, deque
from typing import Any

from rlmesh.client.episodes import ClientDataError

MAX_TRACKED_CLIENTS = 4096  # rate buckets kept; the least recently used goes first


class ChunkRate:
    """A token bucket per client: ``per_s`` chunks a second, up to a second's worth at
    once. A call past it is refused whole (nothing of it recorded); None: no limit."""

    def __init__(self, per_s: float | None) -> None:
        self.per_s = per_s
        self.buckets: dict[str, tuple[float, float]] = {}  # client -> (tokens, at)

    def take(self, client: str, n: int) -> None:
        if self.per_s is None or n == 0:
            return
        now = time.monotonic()
        tokens, at = self.buckets.pop(client, (self.per_s, now))
        tokens = min(self.per_s, tokens + (now - at) * self.per_s)
        if n > tokens:
            self.buckets[client] = (tokens, now)
            raise ClientDataError("chunks", f"{n} chunks now is past this client's quota of "
                                            f"{self.per_s:g} a second "
                                            f"(policy_server_max_chunks_per_s); send fewer")
        self.buckets[client] = (tokens - n, now)  # re-inserted: the most recently used last
        while len(self.buckets) > MAX_TRACKED_CLIENTS:
            del self.buckets[next(iter(self.buckets))]


class EpisodeShare:
    """Which ended episodes a policy server reports: of the last ``window`` it reported
    (``metrics_num_episodes_for_smoothing``, what the run's episode_reward_mean averages),
    each client holds at most an equal share among the clients that ended an episode in
    the last ``active_s`` once the window is full (``_fits``). The rest still train; they are only left out of the statistics
    (``over_share``). A client that pipelined fake 64-step episodes at 2,600 chunks a second
    made every reported episode its own (mean = min = max = 64), and the real client's
    vanished; alone, a client has the whole window."""

    def __init__(self, window: int, active_s: float) -> None:
        self.window, self.active_s = window, active_s
        self.recent: deque[str] = deque()  # the client of each reported episode, oldest first
        self.held: Counter[str] = Counter()  # ... counted per client
        self.last_ended: dict[str, float] = {}
        self.reported: Counter[str] = Counter()
        self.over_share: Counter[str] = Counter()

    def admit(self, episodes: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The episodes to report, in order; each carries its ``client``."""
        now = time.monotonic()
        for e in episodes:
            self.last_ended.pop(e.get("client", ""), None)
            self.last_ended[e.get("client", "")] = now  # the most recent last
        while self.last_ended and next(iter(self.last_ended.values())) < now - self.active_s:
            del self.last_ended[next(iter(self.last_ended))]
        share = math.ceil(self.window / max(1, len(self.last_ended)))
        out = []
        for e in episodes:
            client = e.get("client", "")
            if not self._fits(client, share):
                _count(self.over_share, client)
                continue
            out.append(e)
            _count(self.reported, client)
            self.recent.append(client)
            self.held[client] += 1
            if len(self.recent) > self.window:
                gone = self.recent.popleft()
                self.held[gone] -= 1
                if not self.held[gone]:
                    del self.held[gone]
        return out

    def _fits(self, client: str, share: float) -> bool:
        """Whether ``client`` may add one. Shares bind only a full window: while it has
        room, no one's episode gives way (a slow client ending one episode an iteration
        left a fast one at its share of a window never full, its statistics frozen). Once
        full, the oldest drops out: ``client`` may add one when that is its own (its hold
        does not grow), when it then holds at most its share, or when the oldest is of a
        client holding its whole share (else a client gone quiet at the window's front
        would freeze the others' statistics until it counts as inactive). So a client
        holding more than its share gives way first to every other client's new ones."""
        if len(self.recent) < self.window:
            return True
        oldest = self.recent[0]
        if oldest == client or self.held[client] + 1 <= share:
            return True
        return self.held[oldest] >= share

    def counts(self) -> dict[str, dict[str, int]]:
        """Episodes reported and left out per client, so far (the clients named)."""
        return {"episodes_reported": dict(self.reported),
                "episodes_over_share": dict(self.over_share)}


def _count(counts: Counter[str], client: str) -> None:
    """One more for ``client``; past ``MAX_TRACKED_CLIENTS`` names, new ones count as
    "other" (a plaintext server's clients are its connections, without limit)."""
    if client not in counts and len(counts) >= MAX_TRACKED_CLIENTS:
        client = "other"
    counts[client] += 1
