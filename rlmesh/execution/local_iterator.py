"""RLlib's ``LocalIterator`` (``ray.util.iter``) as far as execution plans chain it: an
iterator whose ``for_each``/``combine``/``filter`` build the plan's dataflow lazily, one item
pulled at a time by ``train()``."""

from __future__ import annotations

from typing import Any, Callable, Iterable, Iterator


class LocalIterator:
    """An iterator over ``source`` (any iterable) with RLlib's chaining methods. Nothing
    runs until an item is pulled: ``train()`` pulls one result per iteration."""

    def __init__(self, source: Iterable[Any], name: str = "LocalIterator") -> None:
        self._it = iter(source)
        self.name = name

    def __iter__(self) -> Iterator[Any]:
        return self

    def __next__(self) -> Any:
        return next(self._it)

    def __repr__(self) -> str:
        return f"LocalIterator[{self.name}]"

    def for_each(self, fn: Callable[[Any], Any]) -> "LocalIterator":
        """``fn(item)`` for each item: its return value is the next item (a list stays one
        item; ``combine`` flattens)."""
        _check_callable(fn, "for_each")
        return LocalIterator((fn(item) for item in self._it), f"{self.name}.for_each()")

    def combine(self, fn: Callable[[Any], list[Any]]) -> "LocalIterator":
        """``fn(item)`` returns a list of items (maybe empty): each is an item of the result
        (RLlib's ``for_each(fn).flatten()``: ``ConcatBatches`` yields [] until its batch is
        full)."""
        _check_callable(fn, "combine")
        return self.for_each(fn).flatten()

    def flatten(self) -> "LocalIterator":
        """Each item is a list: its elements, one by one."""
        def flat() -> Iterator[Any]:
            for items in self._it:
                if not isinstance(items, (list, tuple)):
                    raise TypeError(f"{self.name}: flatten/combine takes lists of items, got "
                                    f"{type(items).__name__}; use for_each for one item")
                yield from items
        return LocalIterator(flat(), f"{self.name}.flatten()")

    def filter(self, fn: Callable[[Any], bool]) -> "LocalIterator":
        """The items for which ``fn(item)`` is true."""
        _check_callable(fn, "filter")
        return LocalIterator((item for item in self._it if fn(item)), f"{self.name}.filter()")

    def take(self, n: int) -> list[Any]:
        """The next ``n`` items, pulled now."""
        return [next(self._it) for _ in range(n)]


def _check_callable(fn: Any, method: str) -> None:
    if not callable(fn):
        raise TypeError(f"LocalIterator.{method} takes a function of the item, got {fn!r}")


__all__ = ["LocalIterator"]
