"""One run file, ``conf/runs/<run-id>.yaml``, read and checked on its own: its id, a parent and
exactly one knob, its metadata. Every rule breaks with one line, ``conf/runs/<file>: <key>: <what
is wrong>`` (:class:`RunError`); the tree they make is runs.py's."""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import yaml

from ..core.jsonvalue import Json, JsonObject

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

    def metadata(self) -> JsonObject:
        return {k: (list(getattr(self, k)) if k == "claims" else getattr(self, k)) for k in METADATA_KEYS}


def display_path(path: Path) -> str:
    """``conf/runs/<file>`` as the user sees it (the conf folder's own name, then runs/file)."""
    return f"{path.parent.parent.name}/{path.parent.name}/{path.name}"


def run_id_problem(run_id: object) -> Optional[str]:
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


class _StrictLoader(_BaseLoader):
    """The safe (C when available) loader, but a key given twice in one mapping is an error."""

    def construct_mapping(self, node, deep=False):
        seen: dict[tuple[str, str], int] = {}
        for key_node, _ in node.value:
            if isinstance(key_node, yaml.ScalarNode) and key_node.tag != "tag:yaml.org,2002:merge":
                ident = (key_node.tag, key_node.value)
                line = key_node.start_mark.line + 1
                if ident in seen:
                    raise DuplicateKeyError(key_node.value, seen[ident], line)
                seen[ident] = line
        return super().construct_mapping(node, deep=deep)


def load_yaml_text(text: str) -> Json:
    """YAML text → data with the strict safe loader (no tags beyond YAML's, no duplicate keys)."""
    return yaml.load(text, Loader=_StrictLoader)


def _check_knob(knob: Json, err) -> Optional[str]:
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
