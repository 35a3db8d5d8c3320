"""Domains: the values one config key may hold (a range, an enum, a name, a path ...), and
``setting``, a dataclass field that carries its domain and help beside its default. Every config
section, the core ones and those an extension declares (a reward's parameters, a reader's, a
backend's or a stage kind's section), writes each key once, with its domain: the schema, ``martingale
check`` and the docs read them off the fields (config/schema.py ``domains_of``).
"""
from __future__ import annotations

import dataclasses
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, Optional, Protocol, TypeVar, overload

from .jsonvalue import Json, JsonObject

SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")   # model/family/gpu/wandb names
MODULE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.]{0,127}")     # a LoRA target module
SEED_MAX = 2**32 - 1        # torch.manual_seed(seed * 100_003 + step) must stay within 64 bits
# A variable whose name holds one of these (any case) holds a key: every writer redacts its value
# (store/files.py), and a key a config names must be in such a variable (SecretVar).
SECRET_WORDS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "PASS", "CREDENTIAL", "AUTH")


def _num(x: Optional[float]) -> str:
    """A bound as written: 4294967295, not 4.29497e+09; 0.5 as 0.5."""
    return str(int(x)) if x is not None and float(x).is_integer() else f"{x}"


class Domain:
    """The values one key may hold. ``problem(value)``: what is wrong, in a few words, or None."""

    def problem(self, value: Json) -> Optional[str]:  # pragma: no cover - abstract
        raise NotImplementedError


@dataclass(frozen=True)
class Num(Domain):
    """A finite number in [lo, hi], with an open end where ``lo_open``/``hi_open``; ``integer``:
    an int only (a bool is never a number here)."""
    lo: Optional[float] = None
    hi: Optional[float] = None
    lo_open: bool = False
    hi_open: bool = False
    integer: bool = False

    def describe(self) -> str:
        """The range in words: ``in (0, 1]``, ``≥ 2``, ``> 0``."""
        lo, hi = _num(self.lo), _num(self.hi)
        if self.lo is not None and self.hi is not None:
            return f"in {'(' if self.lo_open else '['}{lo}, {hi}{')' if self.hi_open else ']'}"
        if self.lo is not None:
            return f"{'>' if self.lo_open else '≥'} {lo}"
        return f"{'<' if self.hi_open else '≤'} {hi}" if self.hi is not None else "finite"

    def problem(self, value: Json) -> Optional[str]:
        kind = "an integer" if self.integer else "a number"
        if isinstance(value, bool) or not isinstance(value, int if self.integer else (int, float)):
            return f"expected {kind}, got {value!r}"
        if not math.isfinite(value):
            return f"{value!r} is not finite: must be {self.describe()}"
        low_ok = self.lo is None or (value > self.lo if self.lo_open else value >= self.lo)
        high_ok = self.hi is None or (value < self.hi if self.hi_open else value <= self.hi)
        return None if low_ok and high_ok else f"{value!r} is out of range: must be {self.describe()}"


def Int(lo: Optional[int] = None, hi: Optional[int] = None) -> Num:
    """An integer in [lo, hi]."""
    return Num(lo, hi, integer=True)


def Real(lo: Optional[float] = None, hi: Optional[float] = None, lo_open: bool = False,
         hi_open: bool = False) -> Num:
    """A finite number in [lo, hi] (ends open where asked)."""
    return Num(lo, hi, lo_open, hi_open)


@dataclass(frozen=True)
class Maybe(Domain):
    """null, or a value ``inner`` accepts."""
    inner: Domain

    def problem(self, value: Json) -> Optional[str]:
        return None if value is None else self.inner.problem(value)


@dataclass(frozen=True)
class OneOf(Domain):
    """One of a fixed list of values."""
    values: tuple[Json, ...]

    def problem(self, value: Json) -> Optional[str]:
        if value in self.values and not isinstance(value, bool):
            return None
        return f"{value!r} is not one of: {', '.join('null' if v is None else str(v) for v in self.values)}"


@dataclass(frozen=True)
class InChoices(Domain):
    """One of ``choices()[key]`` (the fixed enums and the registries): checked there."""

    def problem(self, value: Json) -> Optional[str]:
        return None


@dataclass(frozen=True)
class Name(Domain):
    """A name: letters, digits, '.', '_', '-' (``pattern``); null allowed where ``optional``."""
    optional: bool = False
    pattern: re.Pattern = SAFE_NAME

    def problem(self, value: Json) -> Optional[str]:
        if value is None:
            return None if self.optional else "needs a name, got null"
        if not isinstance(value, str) or not value.strip():
            return f"needs a name, got {value!r}"
        if not self.pattern.fullmatch(value):
            return f"{value!r} is not a name (letters, digits, '.', '_', '-'; at most 128)"
        return None


@dataclass(frozen=True)
class Names(Domain):
    """A non-empty list of distinct names (``pattern``)."""
    pattern: re.Pattern = MODULE_NAME

    def problem(self, value: Json) -> Optional[str]:
        if not isinstance(value, list) or not value:
            return f"needs a non-empty list of names, got {value!r}"
        bad = [v for v in value if not isinstance(v, str) or not self.pattern.fullmatch(v)]
        if bad:
            return f"{bad[0]!r} is not a module name"
        return f"repeated name in {value}" if len(set(value)) != len(value) else None


# Folders a model or question path may never be (the folder itself), and trees it may never be in.
SYSTEM_DIRS = frozenset({"/", "/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib32", "/lib64",
                         "/media", "/mnt", "/opt", "/proc", "/root", "/run", "/sbin", "/srv", "/sys",
                         "/tmp", "/usr", "/var"})
SYSTEM_TREES = ("/proc", "/sys", "/dev", "/etc", "/boot", "/bin", "/sbin", "/run")


def system_path_problem(path: str) -> Optional[str]:
    """Why an absolute path is a system location no config may point at, or None (a relative
    path is judged once resolved, by the stage that opens it)."""
    if not path.startswith("/"):
        return None
    norm = "/" + os.path.normpath(path).lstrip("/")
    if norm in SYSTEM_DIRS or any(norm.startswith(t + "/") for t in SYSTEM_TREES):
        return f"{path!r} is a system folder, not a project's data"
    return None


@dataclass(frozen=True)
class PathValue(Domain):
    """A file-system path (or null where ``optional``): one line, not blank, not a system folder.
    It is opened only by the stage its key belongs to, which checks what is there."""
    optional: bool = True

    def problem(self, value: Json) -> Optional[str]:
        if value is None:
            return None if self.optional else "needs a path, got null"
        if not isinstance(value, str) or not value.strip() or value != value.strip():
            return f"needs a path (null for none), got {value!r}"
        if any(c in value for c in "\0\n\r"):
            return f"{value!r} is not a path (control characters)"
        return system_path_problem(value)


@dataclass(frozen=True)
class Url(Domain):
    """An http(s) URL (a server's base address), or null."""

    def problem(self, value: Json) -> Optional[str]:
        if value is None:
            return None
        if not isinstance(value, str) or not re.fullmatch(r"https?://[A-Za-z0-9.\-\[\]:]+(/[\w./\-]*)?", value):
            return f"{value!r} is not an http(s) URL like http://127.0.0.1:8000"
        return None


@dataclass(frozen=True)
class SecretVar(Domain):
    """The name of an environment variable holding a key: one every writer redacts (SECRET_WORDS
    in its name), so its value can never reach a file."""

    def problem(self, value: Json) -> Optional[str]:
        if not isinstance(value, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,127}", value):
            return f"needs an environment variable name, got {value!r}"
        if not any(w in value.upper() for w in SECRET_WORDS):
            return (f"{value!r}: name the key's variable with one of {', '.join(SECRET_WORDS)} in it "
                    "(so every file the tool writes redacts its value)")
        return None


@dataclass(frozen=True)
class ProjectPath(Domain):
    """A relative path inside the project (no '..', not absolute): where the tool may write."""

    def problem(self, value: Json) -> Optional[str]:
        if not isinstance(value, str) or not value.strip() or any(c in value for c in "\0\n\r"):
            return f"needs a relative path inside the project, got {value!r}"
        if value.startswith(("/", "~")) or ".." in Path(value).parts:
            return f"{value!r} leaves the project: use a relative path without '..'"
        return None


@dataclass(frozen=True)
class Template(Domain):
    """A prompt template: str.format fields only among ``allowed`` (empty for the embedded set)."""
    allowed: tuple[str, ...]

    def problem(self, value: Json) -> Optional[str]:
        import string
        if not isinstance(value, str):
            return f"needs a template string, got {value!r}"
        try:
            names = {f for _, f, _, _ in string.Formatter().parse(value) if f is not None}
        except ValueError as e:
            return f"not a template ({e})"
        unknown = sorted(n for n in names if n not in self.allowed)
        return f"unknown field {{{unknown[0]}}} (known: {', '.join(self.allowed)})" if unknown else None


@dataclass(frozen=True)
class Args(Domain):
    """A list of command-line arguments, each one line (possibly empty)."""

    def problem(self, value: Json) -> Optional[str]:
        if not isinstance(value, list) or not all(isinstance(v, str) and v and "\n" not in v and "\0" not in v
                                                  for v in value):
            return f"needs a list of one-line arguments, got {value!r}"
        return None


@dataclass(frozen=True)
class Flag(Domain):
    """true or false."""

    def problem(self, value: Json) -> Optional[str]:
        return None if isinstance(value, bool) else f"expected true or false, got {value!r}"


@dataclass(frozen=True)
class Seeds(Domain):
    """A non-empty list of distinct integer seeds in [0, SEED_MAX]."""

    def problem(self, value: Json) -> Optional[str]:
        if not isinstance(value, list) or not value:
            return "needs at least one seed"
        bad = [s for s in value if SEED.problem(s)]
        if bad:
            return f"seed {bad[0]!r} is not an integer in [0, {SEED_MAX}]"
        return f"repeated seed in {value}" if len(set(value)) != len(value) else None


POSITIVE = Real(0, lo_open=True)
NONNEG = Real(0)
FRACTION = Real(0, 1)
OPEN_UNIT = Real(0, 1, lo_open=True, hi_open=True)
LR = Real(0, 1, lo_open=True)
COUNT = Int(1)
SEED = Int(0, SEED_MAX)



T = TypeVar("T")


class KindFacts(Protocol):
    """What an id rule reads of a stage kind (stages.StageKind)."""

    @property
    def place(self) -> str: ...
    @property
    def serves(self) -> bool: ...
    @property
    def questions(self) -> bool: ...


IdRule = Callable[[Json, Mapping[str, Json], Optional[KindFacts]], Json]   # (value, its section, the stage kind or None) → value or OMIT


@overload
def setting(default: T, domain: Domain, help: str = "", factory: None = None, in_id: IdRule | None = None) -> T: ...
@overload
def setting(default: None, domain: Domain, help: str = "", *, factory: Callable[[], T],
            in_id: IdRule | None = None) -> T: ...
def setting(default: object, domain: Domain, help: str = "", factory: Callable[[], object] | None = None,
            in_id: IdRule | None = None) -> object:
    """A config key: its default (or ``factory`` for a list or mapping), its domain, what it does, and
    what of it enters a stage's id and a run's identity (``in_id``: all of it, unless it says)."""
    meta = {"domain": domain, "help": help, "in_id": in_id}
    if factory is not None:
        return dataclasses.field(default_factory=factory, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def section(cls: Callable[[], T], help: str = "", in_id: IdRule | None = None) -> T:
    """A config key that is a section (a dataclass of settings), made fresh for every config."""
    return dataclasses.field(default_factory=cls, metadata={"section": True, "help": help, "in_id": in_id})


# --------------------------------------------------------------------------- what enters an id
# One rule, read by the plan for every stage's id and every run's identity (``identity``): a setting
# is hashed as it is unless its declaration says otherwise, with an IdRule of (value, its section,
# the stage kind; None for the run's identity) returning the value to hash or OMIT. Each rule is a
# line at the setting it concerns: a key added later stays out of the ids made before it existed
# where it holds the value that changes nothing; where a stage runs is never what it computes.
OMIT = type("Omit", (), {"__repr__": lambda self: "OMIT"})()


def omitted_at(*values: Json, stage_only: bool = False) -> IdRule:
    """Out of the id while the setting holds one of ``values`` (a stage's only, with ``stage_only``)."""
    def rule(value: Json, sec: Mapping[str, Json], kind: Optional[KindFacts]) -> Json:
        at = any(value is v if v is None or isinstance(v, bool) else value == v for v in values)
        return OMIT if at and (kind is not None or not stage_only) else value
    return rule


def omitted_unless(key: str, *values: Json) -> IdRule:
    """Out of the id unless sibling ``key`` holds one of ``values`` (a setting only that case reads)."""
    return lambda value, sec, kind: value if sec.get(key) in values else OMIT


def placement(value: Json, sec: Mapping[str, Json], kind: Optional[KindFacts]) -> Json:
    """Where a stage runs, not what it computes: out of every stage's id."""
    return OMIT if kind is not None else value


def serving(value: Json, sec: Mapping[str, Json], kind: Optional[KindFacts]) -> Json:
    """How a model is served, not what it is: out of the id of a stage that does not generate with it."""
    return OMIT if kind is not None and not kind.serves else value


def through_inputs(value: Json, sec: Mapping[str, Json], kind: Optional[KindFacts]) -> Json:
    """What a stage reads through an input (the judge model is its judge_model input's id): out of
    the stage's own slice, in the run's identity."""
    return OMIT if kind is not None else value


def set_where(used: Callable[[KindFacts], bool]) -> IdRule:
    """In a stage's id only where set (not 0 or null) and the kind ``used`` it; in a run's identity as is."""
    return lambda value, sec, kind: OMIT if kind is not None and (not value or not used(kind)) else value


def asked(replacement: Json) -> IdRule:
    """Where the questions come from and how many: a kind that asks none (pretrain, distill: the clue
    table writes their traces) hashes ``replacement`` instead (OMIT: nothing), so a run on other
    questions shares their stages."""
    return lambda value, sec, kind: replacement if kind is not None and not kind.questions else value


def identity(cls: type, values: Mapping[str, Json], kind: Optional[KindFacts] = None) -> JsonObject:
    """``values`` (a section of dataclass ``cls``) as a stage of ``kind`` (None: the run) hashes it:
    each setting through its declared IdRule; a key ``cls`` does not declare as it is."""
    rules = {f.name: f.metadata.get("in_id") for f in dataclasses.fields(cls)} if dataclasses.is_dataclass(cls) else {}
    out = {}
    for key, value in values.items():
        rule = rules.get(key)
        kept = rule(value, values, kind) if rule is not None else value
        if kept is not OMIT:
            out[key] = kept
    return out


@dataclass(frozen=True)
class Section:
    """A config section an extension owns, declared where the extension is defined: its key (a
    stage kind's or reader's at the top level, ``judge``; a backend's under ``model``,
    ``model.vllm``) and its dataclass of settings. It is in a stage's slice and a run's identity
    only where the run uses the extension (a kind in its chain, the reader it reads with, the
    backend it serves through), so a new extension's keys change no other run. ``in_every_run``:
    the section was in every run's identity (a backend's, in every generating stage's id) before
    extensions declared their sections; it stays there, so no id or config hash changed."""
    key: str
    schema: type
    in_every_run: bool = False


SERVED_NAME = Name(optional=True, pattern=re.compile(r"[A-Za-z0-9][A-Za-z0-9._/:-]{0,127}"))   # deepseek-chat, org/model
