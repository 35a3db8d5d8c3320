"""The one shape of every extension point (stage kinds, rewards, belief readers, model backends,
instructor modes): a name → extension table filled by a decorator, each name registered once, and
the modules of a package imported once so that a new file's decorators run."""
from __future__ import annotations

import importlib
import pkgutil
from typing import Any, Iterable, TypeVar

T = TypeVar("T")


def register_once(table: dict[str, Any], what: str, name: str, value: T) -> T:
    """table[name] = value; a second extension under a registered name is an error naming both."""
    if name in table:
        old = getattr(table[name], "fn", table[name])
        raise ValueError(f"{what} {name}: already registered ({getattr(old, '__qualname__', old)!s})")
    table[name] = value
    return value


def import_modules(package: str, path: Iterable[str], helpers: Iterable[str] = ()) -> None:
    """Import every module of ``package`` (found on ``path``) but its ``helpers``: each extension
    file registers itself on import."""
    skip = set(helpers)
    for module in pkgutil.iter_modules(list(path)):
        if module.name not in skip:
            importlib.import_module(f"{package}.{module.name}")
