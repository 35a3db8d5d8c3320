"""The run tree: ``conf/runs/<run-id>.yaml`` files, each a parent and exactly one knob.

Every rule breaks with one line, ``conf/runs/<file>: <key>: <what is wrong>`` (:class:`RunError`),
and loading never writes anything. A run's config is ``conf/config.yaml`` composed with its
ancestors' knobs, root first (:meth:`RunTree.overrides`).
"""
from __future__ import annotations

import copy
import hashlib
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

import yaml

from ..store.files import read_pickle, write_pickle
from .checks import questions_file_problem
from .compose import ComposeError, Composer
from .digest import code_and_versions, conf_digest, conf_files, env_digest

if TYPE_CHECKING:  # Hydra is imported only when configs are composed (the table never does)
    from .compose import Composer

try:  # the C loader is ~10x faster; 1,000 run files must load well under a second
    from yaml import CSafeLoader as _BaseLoader
except ImportError:  # pragma: no cover
    from yaml import SafeLoader as _BaseLoader  # type: ignore[assignment]

# ---------------------------------------------------------------- the run-id rule (the one place)
# A run-id is a name, never a path: it is a file name in conf/runs, a folder in results/, a
# Snakemake wildcard. RUN_ID_PATTERN is also the Snakefile's wildcard constraint (common.smk), so
# every id `check` accepts is one Snakemake plans: letters, digits, '_', '-', and '.' between two
# of those (no '..', no leading or trailing '.'); at most RUN_ID_MAX characters; and no periodic
# tail (see run_id_problem).
RUN_ID_MAX = 64
RUN_ID_PATTERN = rf"[A-Za-z0-9](?:[A-Za-z0-9_-]|\.(?=[A-Za-z0-9_-])){{0,{RUN_ID_MAX - 1}}}"
_RUN_ID = re.compile(RUN_ID_PATTERN)
# Snakemake's PeriodicityDetector (snakemake/io, min_repeat=20) refuses a wildcard value that ends
# in one substring repeated 20 or more times (PeriodicWildcardError): `snakemake -n` would fail.
SNAKEMAKE_MIN_REPEAT = 20
_PERIODIC_TAIL = re.compile(rf"(.+?)\1{{{SNAKEMAKE_MIN_REPEAT - 1},}}$")
# A root run's only knob: its own base config, a file of conf/setup/ (``# @package _global_``).
ROOT_KNOB = re.compile(r"setup=[A-Za-z0-9_-]+")
RUN_KEYS = ("parent", "knob", "question", "claims", "verdict", "invalid", "owner")
METADATA_KEYS = ("question", "claims", "verdict", "invalid", "owner")
# key=... at the start or after whitespace/comma: two of them in one knob are two overrides
_OVERRIDE_START = re.compile(r"(?:^|[\s,])[~+]{0,2}[A-Za-z_][\w.\-/@]*\s*=")


class RunError(ValueError):
    """A run file that breaks a rule. str() is the one-line message."""

    def __init__(self, file: str, key: str, what: str):
        self.file = file
        self.key = key
        self.what = what
        super().__init__(f"{file}: {key}: {what}")


@dataclass(frozen=True)
class RunSpec:
    """A run file as read: its parent, its one knob and its metadata."""
    run_id: str
    parent: Optional[str]
    knob: Optional[str]
    question: Optional[str] = None
    claims: tuple[str, ...] = ()
    verdict: Optional[str] = None
    invalid: Optional[str] = None
    owner: Optional[str] = None
    path: Path = field(default=Path(), compare=False)

    def metadata(self) -> dict[str, Any]:
        return {k: (list(getattr(self, k)) if k == "claims" else getattr(self, k)) for k in METADATA_KEYS}


def display_path(path: Path) -> str:
    """``conf/runs/<file>`` as the user sees it (the conf folder's own name, then runs/file)."""
    return f"{path.parent.parent.name}/{path.parent.name}/{path.name}"


def run_id_problem(run_id: Any) -> Optional[str]:
    """What makes ``run_id`` not a run-id, in a few words, or None: the one rule for `check`,
    `new`, `show`, `diff` and the Snakefile's wildcard (RUN_ID_PATTERN)."""
    if not isinstance(run_id, str) or not run_id:
        return f"{run_id!r} is not a run-id (a non-empty name)"
    if len(run_id) > RUN_ID_MAX:
        return f"{run_id[:20]!r}… is {len(run_id)} characters long; a run-id has at most {RUN_ID_MAX}"
    if not _RUN_ID.fullmatch(run_id):
        return (f"{run_id!r} is not a safe name (letters, digits, '_', '-', and '.' between them; "
                f"no '/', '..', spaces, or leading/trailing '.')")
    tail = _PERIODIC_TAIL.search(run_id)
    if tail:
        return (f"{run_id!r} ends in {tail.group(1)!r} repeated {len(tail.group(0)) // len(tail.group(1))} "
                f"times: Snakemake refuses a wildcard with a periodic tail ({SNAKEMAKE_MIN_REPEAT}+ repeats)")
    return None


class DuplicateKeyError(yaml.YAMLError):
    """A mapping that names one key twice (YAML loaders silently keep the last)."""

    def __init__(self, key: str, first_line: int, line: int):
        self.key, self.first_line, self.line = key, first_line, line
        super().__init__(f"duplicate key {key!r} (lines {first_line} and {line})")


class _StrictLoader(_BaseLoader):  # type: ignore[misc, valid-type]
    """The safe (C when available) loader, but a key given twice in one mapping is an error."""

    def construct_mapping(self, node, deep=False):  # type: ignore[override]
        seen: dict[tuple[str, str], int] = {}
        for key_node, _ in node.value:
            if isinstance(key_node, yaml.ScalarNode) and key_node.tag != "tag:yaml.org,2002:merge":
                ident = (key_node.tag, key_node.value)
                line = key_node.start_mark.line + 1
                if ident in seen:
                    raise DuplicateKeyError(key_node.value, seen[ident], line)
                seen[ident] = line
        return super().construct_mapping(node, deep=deep)


def load_yaml_text(text: str) -> Any:
    """YAML text → data with the strict safe loader (no tags beyond YAML's, no duplicate keys)."""
    return yaml.load(text, Loader=_StrictLoader)


def _check_knob(knob: Any, err) -> Optional[str]:
    """The knob as one override string (a one-item list is accepted), or None; refuses two
    overrides and any interpolation: a knob value is a literal, never ${oc.env:...} or ${key}."""
    if knob is None:
        return None
    if isinstance(knob, list):
        if len(knob) != 1:
            raise err("knob", f"more than one override ({len(knob)} in a list): a knob is exactly one")
        knob = knob[0]
    if not isinstance(knob, str):
        raise err("knob", f"wrong type: expected one override 'key=value', got {type(knob).__name__}")
    knob = knob.strip()
    if not knob:
        raise err("knob", "empty override")
    if "${" in knob:
        raise err("knob", "interpolation '${…}' is not allowed: a knob value is a literal "
                          "(no ${oc.env:…}, no ${key})")
    if len(_OVERRIDE_START.findall(knob)) > 1:
        raise err("knob", f"more than one override in {knob!r}: a knob is exactly one")
    return knob


def _read_mapping(path: Path, text: str | None, err) -> dict:
    """The run file's YAML mapping; every way it can fail to be one is one line (key ``yaml``,
    or the duplicated key)."""
    try:
        if text is None:
            text = path.read_bytes().decode("utf-8")
        data = load_yaml_text(text)
    except UnicodeDecodeError as e:
        raise err("yaml", f"not UTF-8 text (byte 0x{e.object[e.start]:02x} at offset {e.start})") from None
    except OSError as e:
        raise err("yaml", f"cannot be read: {e.strerror or e}") from None
    except DuplicateKeyError as e:
        raise err(e.key, f"given twice (lines {e.first_line} and {e.line}); a run file names each key once") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise err("yaml", f"does not parse{where}: {problem}") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise err("yaml", f"expected a mapping of {', '.join(RUN_KEYS)}; got {type(data).__name__}")
    for key in data:
        if key not in RUN_KEYS:
            raise err(str(key), f"unknown key (allowed: {', '.join(RUN_KEYS)})")
    return data


def _check_parent(data: dict, err) -> Optional[str]:
    """The parent's run-id, or None for a root run (``parent: null``, which must be written)."""
    if "parent" not in data:
        raise err("parent", "missing (use `parent: null` for a root run)")
    parent = data.get("parent")
    if parent is not None and not isinstance(parent, str):
        raise err("parent", f"wrong type: expected a run-id, got {type(parent).__name__}")
    problem = run_id_problem(parent) if parent is not None else None
    if problem:
        raise err("parent", problem)
    return parent


def _check_metadata(data: dict, err) -> tuple[str, ...]:
    """question/verdict/invalid/owner are strings, an invalid run names its bug; the claims."""
    for key in ("question", "verdict", "invalid", "owner"):
        value = data.get(key)
        if value is not None and not isinstance(value, str):
            raise err(key, f"wrong type: expected a string, got {type(value).__name__}")
    if "invalid" in data and not (data["invalid"] or "").strip():
        raise err("invalid", "name the bug: `invalid: \"<what was wrong>\"`")
    claims = data.get("claims") or []
    if isinstance(claims, str):
        claims = [claims]
    if not isinstance(claims, list) or not all(isinstance(c, str) for c in claims):
        raise err("claims", "wrong type: expected a list of claim names")
    return tuple(claims)


RESOLVED_CACHE = Path(".cache") / "runs"   # validated run configs by content (RunTree.check_configs)
RESOLVED_KEPT = 4                           # the newest kept: a conf/ edit and back composes nothing


def parse_run_file(path: Path, text: str | None = None) -> RunSpec:
    """Read and check one run file on its own (not its parent or its config).

    ``text``: the file's content when it is not (yet) on disk at ``path``.
    """
    shown = display_path(path)

    def err(key: str, what: str) -> RunError:
        return RunError(shown, key, what)

    run_id = path.stem
    problem = run_id_problem(run_id)
    if problem:
        raise err("run-id", problem)
    data = _read_mapping(path, text, err)
    parent = _check_parent(data, err)
    knob = _check_knob(data.get("knob"), err)
    if parent is None and knob is not None and not ROOT_KNOB.fullmatch(knob):
        raise err("knob", "a root run (parent: null) has no knob, or picks its own base config: "
                          "setup=<name> (conf/setup/<name>.yaml)")
    if parent is not None and knob is None:
        raise err("knob", "missing: a child run changes exactly one knob of its parent")
    claims = _check_metadata(data, err)
    return RunSpec(run_id=run_id, parent=parent, knob=knob, question=data.get("question"),
                   claims=claims, verdict=data.get("verdict"), invalid=data.get("invalid"),
                   owner=data.get("owner"), path=path)


def run_files(runs_dir: Path) -> list[Path]:
    """The run files of conf/runs, by name. A YAML file in a sub-folder is refused, not skipped:
    run-ids are names, not paths, and `check` must not pass over a run someone meant to add."""
    if not runs_dir.is_dir():
        return []
    files, folders = [], []
    with os.scandir(runs_dir) as entries:
        for entry in entries:
            if entry.is_dir():
                folders.append(Path(entry.path))
            elif Path(entry.name).suffix in (".yaml", ".yml") and entry.is_file():
                files.append(Path(entry.path))
    for folder in sorted(folders):
        nested = sorted(p for p in folder.rglob("*") if p.suffix in (".yaml", ".yml") and p.is_file())
        if nested:
            rel = nested[0].relative_to(runs_dir).as_posix()
            raise RunError(f"{runs_dir.parent.name}/runs/{rel}", "run-id",
                           "a run file in a sub-folder is not a run: run-ids are names, not paths "
                           "(a run is conf/runs/<run-id>.yaml)")
    return sorted(files)


class RunTree:
    """All runs of a conf/ folder, checked together; configs composed once and cached."""

    def __init__(self, conf_dir: Path, specs: dict[str, RunSpec]):
        self.conf_dir = Path(conf_dir)
        self.specs = specs
        self._composer: Composer | None = None
        self._resolved: dict[str, dict] = {}

    # ---------------------------------------------------------------- loading
    @classmethod
    def load(cls, conf_dir: Path | str, compose: bool = True,
             extra: dict[Path, str] | None = None) -> "RunTree":
        """Load and check every run file; ``compose=False`` skips the config checks (fast).

        ``extra``: {path in conf/runs: text} of run files not written yet (``martingale new``).
        """
        conf_dir = Path(conf_dir)
        texts: dict[Path, str | None] = {p: None for p in run_files(conf_dir / "runs")}
        texts.update(extra or {})
        specs: dict[str, RunSpec] = {}
        for path, text in texts.items():
            spec = parse_run_file(path, text)
            if spec.run_id in specs:
                other = specs[spec.run_id].path
                raise RunError(display_path(path), "run-id",
                               f"{spec.run_id!r} is also defined by {display_path(other)}")
            specs[spec.run_id] = spec
        tree = cls(conf_dir, specs)
        tree._check_parents()
        if compose:
            tree.check_configs()
        return tree

    def _err(self, run_id: str, key: str, what: str) -> RunError:
        return RunError(display_path(self.specs[run_id].path), key, what)

    def _check_parents(self) -> None:
        for run_id in sorted(self.specs):
            spec = self.specs[run_id]
            if spec.parent is not None and spec.parent not in self.specs:
                raise self._err(run_id, "parent", f"unknown parent {spec.parent!r} (no conf/runs/{spec.parent}.yaml)")
        for run_id in sorted(self.specs):
            seen = [run_id]
            cur = self.specs[run_id].parent
            while cur is not None:
                if cur in seen:
                    cycle = " -> ".join(seen[seen.index(cur):] + [cur])
                    raise self._err(run_id, "parent", f"cycle: {cycle}")
                seen.append(cur)
                cur = self.specs[cur].parent

    @property
    def composer(self) -> Composer:
        if self._composer is None:
            self._composer = Composer(self.conf_dir)
        return self._composer

    def check_configs(self) -> None:
        """Compose every run (root first); a bad or no-op knob fails naming the file and key.

        The validated configs are cached on disk (``.cache/runs/``) by all they follow from: conf/'s
        files, the environment variables they read (``${oc.env:...}``), each run's parent and knob,
        the code (every module of the package: the schema, the checks, the registries) and Hydra's
        and OmegaConf's versions. A fresh process with nothing changed composes none, imports no
        Hydra, and re-checks only what lies outside that key (check_questions). Configs whose key
        changed while they were composed (conf/ edited meanwhile) are cached under neither key."""
        path = self._cache_path()
        cached = read_pickle(path)
        if isinstance(cached, dict) and cached.keys() == self.specs.keys():
            self._resolved = cached
            self.check_questions()
            return
        for run_id in sorted(self.specs):
            self.resolve(run_id)
        if self._cache_path() == path:
            write_pickle(path, self._resolved, RESOLVED_KEPT)

    def check_questions(self) -> None:
        """What no cache key covers, checked on every load of cached configs: each run's questions
        file (world.questions_file) is still there and still fits its world."""
        root = self.conf_dir.resolve().parent
        for run_id in sorted(self.specs):
            why = questions_file_problem(self._resolved[run_id], root)
            if why:
                raise self._err(run_id, "world.questions_file", why)

    def _cache_path(self) -> Path:
        import json

        files = conf_files(self.conf_dir)
        key = json.dumps([conf_digest(files), env_digest(files), *code_and_versions(),
                          sorted((r, s.parent, s.knob) for r, s in self.specs.items())])
        return self.conf_dir.parent / RESOLVED_CACHE / f"{hashlib.sha256(key.encode()).hexdigest()[:32]}.pkl"

    # ---------------------------------------------------------------- queries
    def __contains__(self, run_id: str) -> bool:
        return run_id in self.specs

    def __len__(self) -> int:
        return len(self.specs)

    def ids(self) -> list[str]:
        return sorted(self.specs)

    def lineage(self, run_id: str) -> list[RunSpec]:
        """RunSpecs from the root to run_id."""
        chain = []
        cur: Optional[str] = run_id
        while cur is not None:
            chain.append(self.specs[cur])
            cur = self.specs[cur].parent
        return chain[::-1]

    def overrides(self, run_id: str) -> list[str]:
        """The knobs from the root down: the run's config = config.yaml + these, in order."""
        return [s.knob for s in self.lineage(run_id) if s.knob is not None]

    def resolve(self, run_id: str) -> dict:
        """The run's validated config, composed once and cached: shared, so never modified
        (``resolved_config`` gives a copy)."""
        resolved = self._resolved.get(run_id)
        if resolved is not None:
            return resolved
        spec = self.specs[run_id]
        parent_cfg = self.resolve(spec.parent) if spec.parent is not None else None
        overrides = self.overrides(run_id)

        try:
            if spec.knob is not None:
                self.composer.parse(spec.knob)  # knob-level errors (parse, group option) first
            resolved = self.composer.compose(overrides)
        except ComposeError as e:
            raise self._err(run_id, e.key, e.reason) from None
        if parent_cfg is not None and resolved == parent_cfg:
            key = self.composer.parse(spec.knob).key_or_group
            raise self._err(run_id, key, f"no-op knob: {spec.knob!r} leaves the config of parent "
                                         f"{spec.parent!r} unchanged")
        self._resolved[run_id] = resolved
        return resolved

    def resolved_config(self, run_id: str) -> dict:
        """The run's full config as a plain dict (a copy: safe to modify)."""
        return copy.deepcopy(self.resolve(run_id))

