"""A composed config's values checked against the schema: choices(), every key's domain, then the
rules across keys (checks.py). Each problem is a ComposeError naming the key."""
from __future__ import annotations

import fnmatch
from pathlib import Path

from ..core.jsonvalue import Json, JsonObject
from ..core.registry import epoch
from .checks import relation_problem
from .overrides import ComposeError
from .schema import ROLE_MODELS, choices, domain_key, domains


def flatten(d: Json, prefix: str = "") -> JsonObject:
    """A nested mapping as dotted key → leaf value."""
    out: JsonObject = {}
    if isinstance(d, dict):
        for k, v in d.items():
            key = f"{prefix}.{k}" if prefix else str(k)
            if isinstance(v, dict):
                out.update(flatten(v, key))
            else:
                out[key] = v
    return out


_MATCHES: dict[tuple[str, tuple[str, ...]], tuple[str, ...]] = {}


def _patterns_of(key: str, patterns: tuple[str, ...]) -> tuple[str, ...]:
    """The choices() patterns that name ``key`` (``*`` matches one level); cached per key."""
    found = _MATCHES.get((key, patterns))
    if found is None:
        found = tuple(p for p in patterns if key == p or (
            "*" in p and fnmatch.fnmatchcase(key, p) and key.count(".") == p.count(".")))
        _MATCHES[(key, patterns)] = found
    return found


def check_choices(resolved: dict, allowed: dict[str, tuple[Json, ...]] | None = None,
                  flat: JsonObject | None = None) -> None:
    """Every key named in ``choices()`` (``*`` matches one level) must hold an allowed value.
    ``allowed``/``flat``: choices() and flatten(resolved), when the caller already has them."""
    allowed = choices() if allowed is None else allowed
    flat = flatten(resolved) if flat is None else flat
    patterns = tuple(allowed)
    for key, value in flat.items():
        for pattern in _patterns_of(key, patterns):
            if value not in allowed[pattern]:
                shown = ", ".join("null" if a is None else str(a) for a in allowed[pattern])
                raise ComposeError(key, f"{value!r} is not one of: {shown}")


_IN_DOMAIN: set[tuple[int, str, str, Json]] = set()   # (registries, key, type, value) already found in its domain


def check_domains(resolved: dict, flat: JsonObject | None = None) -> None:
    """Every leaf key holds a value of its domain (schema.domains(): ranges, enums, names, paths);
    a leaf without a domain is an error too, so a key added to the schema cannot skip this.
    A (key, value) found good once is not checked again: planning 1,000 runs stays cheap."""
    known = domains()
    for key, value in (flatten(resolved) if flat is None else flat).items():
        memo: tuple[int, str, str, Json] | None = (epoch(), key, type(value).__name__,
                                                  tuple(value) if isinstance(value, list) else value)
        try:
            if memo in _IN_DOMAIN:
                continue
        except TypeError:   # an unhashable value (a list of lists): check it every time
            memo = None
        domain = known.get(domain_key(key))
        if domain is None:
            role = next((r for r in ROLE_MODELS if key.startswith(r + ".")), None)
            raise ComposeError(key, f"not a model key ({role} changes model.* keys)" if role
                               else "no domain for this key (a field without a settings.setting)")
        problem = domain.problem(value)
        if problem:
            raise ComposeError(key, problem)
        if memo is not None:
            _IN_DOMAIN.add(memo)


def check_values(resolved: dict, allowed: dict[str, tuple[Json, ...]] | None = None,
                 root: Path | None = None) -> None:
    """The composed config's values: choices() first (``allowed``: its result, if at hand), then
    every key's domain, then the rules across keys (config/checks.py; ``root``: the
    project a relative file path is read from)."""
    flat = flatten(resolved)
    check_choices(resolved, allowed, flat)
    check_domains(resolved, flat)
    broken = relation_problem(resolved, root)
    if broken:
        raise ComposeError(*broken)
