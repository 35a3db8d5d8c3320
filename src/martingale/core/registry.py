"""The one shape of every extension point (stage kinds, rewards, belief readers, model backends,
instructor modes): a ``Registry``, a name → extension table filled by a decorator, each name
registered once, that can import the modules of its package once (``discover``) so that a new
file's decorators run, and take an extension for the length of a test (``temporarily``)."""
from __future__ import annotations

import contextlib
import importlib
import pkgutil
from typing import Iterable, Iterator, Mapping, TypeVar

V = TypeVar("V")
_EPOCH = [0]   # bumped by every change to any registry: what is computed from them (the schema) is redone


def epoch() -> int:
    """A number that changes whenever any registry changes (a cache key for what reads them)."""
    return _EPOCH[0]


class Registry(dict[str, V]):
    """name → extension (``what``: how an error names one, e.g. "reward")."""

    def __init__(self, what: str, initial: Mapping[str, V] | None = None) -> None:
        super().__init__(initial or {})
        self.what = what
        self._discovered = False

    def add(self, name: str, value: V) -> V:
        """self[name] = value; a second extension under a registered name is an error naming both."""
        if name in self:
            old = getattr(self[name], "fn", self[name])
            raise ValueError(f"{self.what} {name}: already registered ({getattr(old, '__qualname__', old)!s})")
        self[name] = value
        _EPOCH[0] += 1
        return value

    def discover(self, package: str, path: Iterable[str], helpers: Iterable[str] = ()) -> "Registry[V]":
        """Import every module of ``package`` (found on ``path``) but its ``helpers``, once: each
        extension file registers itself on import."""
        if not self._discovered:
            self._discovered = True
            skip = set(helpers)
            for module in pkgutil.iter_modules(list(path)):
                if module.name not in skip:
                    importlib.import_module(f"{package}.{module.name}")
        return self

    @contextlib.contextmanager
    def temporarily(self) -> Iterator["Registry[V]"]:
        """What is registered inside the block is gone after it (a test's extension)."""
        before = dict(self)
        try:
            yield self
        finally:
            self.clear()
            self.update(before)
            _EPOCH[0] += 1
