"""An actor's declared remote surface: which of its methods are served, as what (call, tell,
stream, test hook), with the request and reply types its signature annotates, and the
constructor arguments it is spawned with, by name. The server dispatches by this, nothing else.
"""

from __future__ import annotations

import inspect
import os
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

import numpy as np

CALL, TELL, STREAM, TEST_HOOK = "call", "tell", "stream", "test hook"
ENV_TEST_HOOKS = "RLMESH_TEST_HOOKS"  # "1": test hooks are served (the test suite sets it)
_LIFECYCLE = frozenset({"on_start", "on_stop"})


def test_hooks_on() -> bool:
    """Whether this process serves test hooks (``RLMESH_TEST_HOOKS=1``, inherited by children)."""
    return os.environ.get(ENV_TEST_HOOKS) == "1"


class CallError(Exception):
    """A request that does not fit its declaration: ``etype`` is ``UnknownCall`` or
    ``BadRequest``; the text names the call and what is wrong with it."""

    def __init__(self, etype: str, msg: str) -> None:
        super().__init__(msg)
        self.etype = etype


@dataclass(frozen=True)
class Protocol:
    """The calls an actor class serves, declared next to the class (as dask's ``handlers``):

        protocol = Protocol(calls=("sample", "set_weights"), streams=("add_fragment",),
                            tells=("update_priorities",), test_hooks=("pid",))

    Each name is a method of the class; its signature's annotations are the request's
    argument types and its return annotation the reply's. A name may be in several kinds
    (served as a call and as a stream item). Test hooks are calls that only a process with
    ``RLMESH_TEST_HOOKS=1`` serves. The constructor's arguments are ``__init__``'s, by name.
    """

    calls: tuple[str, ...] = ()
    tells: tuple[str, ...] = ()
    streams: tuple[str, ...] = ()
    test_hooks: tuple[str, ...] = ()

    def kinds(self) -> dict[str, tuple[str, ...]]:
        """Declared name -> the kinds of message it is served for."""
        out: dict[str, tuple[str, ...]] = {}
        for kind, names in ((CALL, self.calls), (TELL, self.tells), (STREAM, self.streams),
                            (TEST_HOOK, self.test_hooks)):
            for name in names:
                out[name] = out.get(name, ()) + (kind,)
        return out

    def extend(self, *, calls: Iterable[str] = (), tells: Iterable[str] = (),
               streams: Iterable[str] = (), test_hooks: Iterable[str] = ()) -> "Protocol":
        """This protocol plus more entries (a subclass serving what its base serves)."""
        return Protocol(self.calls + tuple(calls), self.tells + tuple(tells),
                        self.streams + tuple(streams), self.test_hooks + tuple(test_hooks))


def of_public_methods(cls: type, stop: type = object) -> Protocol:
    """The protocol of a class that declares none (a user's actor, as Ray serves any
    public method of an actor): every public method, as a call, a tell or a stream."""
    names = tuple(public_methods(cls, stop))
    return Protocol(calls=names, tells=names, streams=names)


def public_methods(cls: type, stop: type = object) -> dict[str, Callable[..., Any]]:
    """Public methods of ``cls`` (plain, static and class methods; no lifecycle hooks),
    its bases and mixins included, those of ``stop`` and its bases excluded."""
    out: dict[str, Callable[..., Any]] = {}
    for klass in reversed(cls.__mro__):
        if klass in stop.__mro__:
            continue
        for name, value in vars(klass).items():
            if name.startswith("_") or name in _LIFECYCLE:
                continue
            if isinstance(value, (staticmethod, classmethod)):
                value = value.__func__
            if inspect.isfunction(value):
                out[name] = value
            elif name in out:
                del out[name]  # overridden by something that is not a method
    return out


# --- typed arguments ---

class Data:
    """The annotation of an argument that is plain data and nothing more, as the codec
    delivers it: None, bool, numbers, str, bytes, lists, tuples, dicts and numpy arrays
    (no tensors). For arguments passed on to user code (``foreach_env(fn, *args: Data)``),
    which a served call must still declare (tests/unit/test_served_surface.py)."""

    TYPES: tuple[type, ...] = (type(None), bool, int, float, str, bytes, list, tuple, dict,
                               np.ndarray, np.generic)


Check = tuple[type, ...] | None  # the types a value may have; None: anything


def accepted_types(annotation: Any) -> Check:
    """What ``isinstance`` accepts for an annotation, as the wire delivers values: a float
    may come as an int, a list as a tuple. None where the annotation does not constrain."""
    if annotation is inspect.Parameter.empty or annotation is Any or annotation is object:
        return None
    if annotation is Data:
        return Data.TYPES
    if annotation is None or annotation is type(None):
        return (type(None),)
    origin = typing.get_origin(annotation)
    if origin is typing.Union or origin is types.UnionType:
        parts = [accepted_types(a) for a in typing.get_args(annotation)]
        if any(p is None for p in parts):
            return None
        return tuple(dict.fromkeys(t for p in parts for t in p))  # type: ignore[union-attr]
    if origin is typing.Literal:
        return tuple(dict.fromkeys(type(v) for v in typing.get_args(annotation)))
    base = origin or annotation
    if not isinstance(base, type):
        return None
    if base is float:
        return (float, int)
    if base in (list, tuple):
        return (list, tuple)
    if base is dict or base.__module__ == "collections.abc" and base.__name__ == "Mapping":
        return (dict,)
    return (base,)


def resolve_annotation(annotation: Any, fn: Callable[..., Any]) -> Any:
    """An annotation written as text (``from __future__ import annotations``) evaluated in
    the function's module; ``Any`` where it names what the module imports only for typing."""
    if not isinstance(annotation, str):
        return annotation
    try:
        return eval(annotation, getattr(fn, "__globals__", {}), {})  # noqa: S307 -- our own source
    except Exception:
        return Any


def annotation_text(annotation: Any) -> str:
    """An annotation as its source writes it (``dict[str, Any]``); ``Any`` where there is none."""
    if annotation is inspect.Parameter.empty:
        return "Any"
    if isinstance(annotation, str):
        return annotation
    if annotation is None:
        return "None"
    return getattr(annotation, "__name__", None) if isinstance(annotation, type) else \
        str(annotation).replace("typing.", "")


def type_text(check: Check) -> str:
    if check is None:
        return "Any"
    return " | ".join("None" if t is type(None) else t.__name__ for t in check)


@dataclass
class Entry:
    """One served call: its name, kinds, and the parameters its requests bind to."""

    name: str
    kinds: tuple[str, ...]
    fn: Callable[..., Any]
    is_async: bool
    signature: inspect.Signature
    positional: list[tuple[str, Check]] = field(default_factory=list)
    keyword: dict[str, Check] = field(default_factory=dict)
    reply: str = "Any"
    var_positional: Check = None  # what ``*args`` must be (None: no check, or none taken)
    var_keyword: Check = None  # ... and ``**kwargs``

    @classmethod
    def of(cls, name: str, kinds: tuple[str, ...], fn: Callable[..., Any],
           skip_self: bool = True) -> "Entry":
        fn = inspect.unwrap(fn)
        sig = inspect.signature(fn)
        params = list(sig.parameters.values())
        if skip_self and params and params[0].name in ("self", "cls"):
            params = params[1:]
        sig = sig.replace(parameters=params)
        entry = cls(name, kinds, fn, inspect.iscoroutinefunction(fn), sig)
        for p in params:
            check = accepted_types(resolve_annotation(p.annotation, fn))
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
                entry.positional.append((p.name, check))
            if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY):
                entry.keyword[p.name] = check
            if p.kind == p.VAR_POSITIONAL:
                entry.var_positional = check
            if p.kind == p.VAR_KEYWORD:
                entry.var_keyword = check
        entry.reply = annotation_text(sig.return_annotation)
        return entry

    def request_text(self) -> str:
        """The request as the docs show it: ``name: type, name: type = default``."""
        parts = []
        for p in self.signature.parameters.values():
            star = "*" if p.kind == p.VAR_POSITIONAL else "**" if p.kind == p.VAR_KEYWORD else ""
            text = f"{star}{p.name}: {annotation_text(p.annotation)}"
            if p.default is not p.empty:
                text += f" = {p.default!r}"
            parts.append(text)
        return ", ".join(parts)

    def bad_types(self, args: list[Any], kwargs: dict[str, Any]) -> str | None:
        """Why an argument does not fit its declared type, naming it; None when all fit.
        Arity (missing, unknown or extra arguments) is the signature's to refuse."""
        positional = self.positional
        for (name, check), value in zip(positional, args):
            if check is not None and not isinstance(value, check):
                return self._wrong(name, check, value)
        extra = self.var_positional
        if extra is not None and len(args) > len(positional):
            for i, value in enumerate(args[len(positional):]):
                if not isinstance(value, extra):
                    return self._wrong(f"*args[{i}]", extra, value)
        keyword = self.keyword
        for name, value in kwargs.items():
            check = keyword[name] if name in keyword else self.var_keyword
            if check is not None and not isinstance(value, check):
                return self._wrong(name, check, value)
        return None

    def bad_arity(self, args: list[Any], kwargs: dict[str, Any]) -> str | None:
        """Why the arguments do not bind to the call's parameters, or None."""
        if not all(isinstance(k, str) for k in kwargs):
            return f"{self.name}: keyword names must be strings"
        try:
            self.signature.bind(*args, **kwargs)
        except TypeError as exc:
            return f"{self.name}{self.signature}: {exc}"
        return None

    def _wrong(self, name: str, check: tuple[type, ...], value: Any) -> str:
        return (f"{self.name}: argument {name!r} must be {type_text(check)}, "
                f"got {type(value).__name__}")


class Table:
    """What one actor class serves: entries by name (test hooks only where they are on),
    and the constructor it is spawned with."""

    def __init__(self, cls: type, protocol: Protocol, hooks: bool | None = None,
                 stop: type = object) -> None:
        self.cls = cls
        self.protocol = protocol
        self.cls_path = f"{cls.__module__}:{cls.__qualname__}"
        hooks = test_hooks_on() if hooks is None else hooks
        self.entries: dict[str, Entry] = {}
        for name, kinds in protocol.kinds().items():
            fn = inspect.getattr_static(cls, name, None)
            if isinstance(fn, (staticmethod, classmethod)):
                fn = fn.__func__
            if name.startswith("_") or name in _LIFECYCLE or not inspect.isfunction(
                    inspect.unwrap(fn) if fn is not None else None):
                raise TypeError(f"{self.cls_path} declares {name!r}, which is not a public "
                                "method of the class")
            if TEST_HOOK in kinds:
                if not hooks:
                    continue
                kinds = tuple(k for k in kinds if k != TEST_HOOK) + (CALL,)
            self.entries[name] = Entry.of(name, kinds, fn,
                                          skip_self=not isinstance(
                                              inspect.getattr_static(cls, name), staticmethod))
        self.constructor: Entry | None = None
        if cls.__init__ is not object.__init__:
            self.constructor = Entry.of("__init__", (), cls.__init__)
        elif cls.__new__ is not object.__new__:  # a class that picks what it becomes
            self.constructor = Entry.of("__new__", (), cls.__new__)

    def resolve(self, kind: str, name: str) -> Entry:
        """The entry a request names, or CallError (unknown, or sent as the wrong kind)."""
        entry = self.entries.get(name) if isinstance(name, str) else None
        if entry is None:
            served = ", ".join(sorted(self.entries)) or "none"
            raise CallError("UnknownCall", f"{self.cls_path} serves no call {name!r} "
                                              f"(it serves: {served})")
        if kind not in entry.kinds:
            raise CallError("BadRequest", f"{self.cls_path}: {name!r} is served as a "
                                             f"{' or '.join(entry.kinds)}, not as a {kind}")
        return entry

    def check_constructor(self, kwargs: dict[str, Any]) -> None:
        """TypeError naming what does not fit the constructor's declared arguments."""
        if self.constructor is None:
            if kwargs:
                raise TypeError(f"{self.cls_path} takes no constructor arguments, got "
                                f"{', '.join(sorted(kwargs))}")
            return
        params = self.constructor.signature.parameters
        takes_any = any(p.kind == p.VAR_KEYWORD for p in params.values())
        names = [n for n, p in params.items() if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
        unknown = [k for k in kwargs if k not in names]
        if unknown and not takes_any:
            raise TypeError(f"{self.cls_path} has no constructor argument "
                            f"{', '.join(map(repr, unknown))}; it takes: {', '.join(names) or 'none'}")
        why = self.constructor.bad_arity([], kwargs) or self.constructor.bad_types([], kwargs)
        if why is not None:
            raise TypeError(f"{self.cls_path} constructor: {why.partition(': ')[2] or why}")
