"""The algorithms built while a scope is open on this thread, so that whoever opened it (a
tune trial running the user's function, which may never stop the trainer it built) stops
what that code left running, as the end of RLlib's trial process would."""

from __future__ import annotations

import threading
import weakref
from contextlib import contextmanager
from typing import Any, Iterator

_local = threading.local()


def built(algo: Any) -> None:
    """Called by every Algorithm as it starts its processes."""
    for scope in getattr(_local, "scopes", ()):
        scope.append(weakref.ref(algo))


@contextmanager
def stopped_at_exit() -> Iterator[None]:
    """Stop, when the block ends however it ends, every algorithm built in it on this
    thread and not stopped by then."""
    scope: list[weakref.ref] = []
    _local.scopes = [*getattr(_local, "scopes", ()), scope]
    try:
        yield
    finally:
        _local.scopes = [s for s in _local.scopes if s is not scope]
        for ref in scope:
            algo = ref()
            if algo is not None:
                algo.stop()  # a no-op for one stopped already
