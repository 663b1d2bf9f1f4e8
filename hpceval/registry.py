"""One mechanism for everything hpceval finds by name: engines, runtimes, interceptors, result
parsers and execution backends.

A ``Registry`` knows its entries from three sources, loaded only when first asked:
- ``register``: a class decorator (or a call) in hpceval's own modules;
- ``package``: every module of one package (but ``_private`` ones and those named in
  ``support``, such as ``base``) is imported, so a built-in engine is one new module that
  registers itself;
- ``lazy``: a name mapped to ``"module:attribute"``, imported only when that name is asked for
  (a compute node reading lm-eval output never imports the eval-factory parser);
- ``importlib.metadata`` entry points in the registry's group (``hpceval.engines``, ...): another
  installed distribution adds an engine without a line changed here. An entry point's name is
  the name it registers; its object is a class or value (``make`` turns it into an entry).

Entry points are scanned only when a name is not found among the built-ins, or when every name
is asked for: scanning all installed distributions costs tens of milliseconds, and most
commands only look up names they already carry.
"""

from __future__ import annotations

import difflib
import functools
import importlib
import pkgutil
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Generic, TypeVar

from hpceval.errors import HpcevalError

T = TypeVar("T")
C = TypeVar("C")  # what is registered: a class, or a factory

__all__ = ["Registry", "UnknownName"]


class UnknownName(HpcevalError, ValueError):
    """A name no registry entry has: says what is known and the closest match (a ValueError
    too, for the checks that turn it into a config issue at a key path)."""

    def __init__(self, kind: str, name: str, known: tuple[str, ...]) -> None:
        close = difflib.get_close_matches(name, known, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        super().__init__(f"unknown {kind} {name!r} (known: {', '.join(known) or 'none'}){hint}")
        self.kind, self.name, self.known = kind, name, known


def _identity(value: Any) -> Any:
    return value


class Registry(Generic[T]):
    """Entries of one kind, by name.

    ``kind`` names them in errors ("serving engine"); ``group`` is the entry-point group;
    ``make`` turns what is registered (a class) into the entry (an instance, or the class
    itself); ``order`` sorts ``names()`` (the schema's choices keep their declared order).
    """

    def __init__(self, kind: str, group: str, *, package: str | None = None,
                 lazy: Mapping[str, str] | None = None,
                 make: Callable[[Any], T] = _identity,
                 order: Callable[[T], Any] | None = None,
                 support: tuple[str, ...] = ("base",)) -> None:
        self.kind, self.group = kind, group
        self._package, self._lazy = package, dict(lazy or {})
        self._rank = {name: i for i, name in enumerate(self._lazy)}  # the declared order
        self._make, self._order, self._support = make, order, support
        self._entries: dict[str, T] = {}
        self._builtins_loaded = self._plugins_loaded = False

    # -- declaring ---------------------------------------------------------------------------
    def register(self, cls: C, name: str | None = None) -> C:
        """Make ``cls`` known by ``name`` (default: its ``name`` attribute); usable as a class
        decorator. Two entries of one name are refused: the second would silently win."""
        key = name if name is not None else str(getattr(cls, "name"))  # noqa: B009 (C: any)
        if key in self._entries:
            raise ValueError(f"two {self.kind}s are named {key!r}")
        self._entries[key] = self._make(cls)
        return cls

    # -- finding -----------------------------------------------------------------------------
    def get(self, name: str) -> T:
        """The entry of ``name``; an ``UnknownName`` (a ValueError) lists the known names."""
        entry = self._find(name)
        if entry is None:
            raise UnknownName(self.kind, name, self.names())
        return entry

    def __contains__(self, name: object) -> bool:
        """Whether ``name`` is known, without importing a lazy entry's module."""
        if not isinstance(name, str):
            return False
        self._load_builtins()
        if name in self._entries or name in self._lazy:
            return True
        self._load_plugins()
        return name in self._entries

    def unknown(self, name: str) -> str:
        """The message of an unknown ``name``: what is known and the closest match."""
        return str(UnknownName(self.kind, name, self.names()))

    def names(self) -> tuple[str, ...]:
        """Every name, installed plugins included, in ``order`` (else registration order)."""
        self._load_builtins()
        for name in list(self._lazy):
            self._load_lazy(name)
        self._load_plugins()
        if self._order is None:  # lazy ones as declared (not as first asked for), then the rest
            return tuple(sorted(self._entries, key=lambda n: self._rank.get(n, len(self._rank))))
        order = self._order
        return tuple(sorted(self._entries, key=lambda n: order(self._entries[n])))

    def values(self) -> Iterator[T]:
        return (self._entries[name] for name in self.names())

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    # -- loading -----------------------------------------------------------------------------
    def _find(self, name: str) -> T | None:
        self._load_builtins()
        if name not in self._entries and name in self._lazy:
            self._load_lazy(name)
        if name not in self._entries:
            self._load_plugins()
        return self._entries.get(name)

    def _load_builtins(self) -> None:
        if self._builtins_loaded or self._package is None:
            return
        self._builtins_loaded = True
        package = importlib.import_module(self._package)
        for info in pkgutil.iter_modules(package.__path__):
            if info.name not in self._support and not info.name.startswith("_"):
                importlib.import_module(f"{self._package}.{info.name}")

    def _load_lazy(self, name: str) -> None:
        target = self._lazy.pop(name)
        module, _, attribute = target.partition(":")
        loaded: Any = importlib.import_module(module)
        if name not in self._entries:  # the module may have registered itself on import
            for part in attribute.split("."):  # "module:Class.factory", as entry points write
                loaded = getattr(loaded, part)
            self.register(loaded, name)

    def _load_plugins(self) -> None:
        if self._plugins_loaded:
            return
        self._plugins_loaded = True
        for point in _installed().select(group=self.group):
            if point.name in self._entries or point.name in self._lazy:
                continue  # a built-in name: an outside package cannot replace it
            try:  # a module that registers itself, or the class to register
                loaded = point.load()
            except Exception as exc:  # any import error of another package: name the package
                raise ValueError(f"the {self.kind} {point.name!r} of the installed package "
                                 f"{_distribution(point)} does not load ({exc}); fix or "
                                 "uninstall that package") from exc
            if point.name in self._entries:
                continue
            declared = getattr(loaded, "name", point.name)
            if declared != point.name:
                raise ValueError(f"the installed package {_distribution(point)} registers "
                                 f"{self.kind} {point.name!r} for a class named {declared!r}")
            self.register(loaded, point.name)


@functools.cache
def _installed() -> Any:
    """Every installed distribution's entry points, read once per process (a scan of every
    dist-info folder on sys.path) and shared by the registries: each selects its group."""
    from importlib.metadata import entry_points

    return entry_points()


def _distribution(point: Any) -> str:
    dist = getattr(point, "dist", None)
    return repr(dist.name) if dist is not None else repr(point.value)
