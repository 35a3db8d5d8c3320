"""The run tree: ``conf/runs/<run-id>.yaml`` files, each a parent and exactly one knob.

Every rule breaks with one line, ``conf/runs/<file>: <key>: <what is wrong>`` (:class:`RunError`),
and loading never writes anything. A run's config is ``conf/config.yaml`` composed with its
ancestors' knobs, root first (:meth:`RunTree.overrides`).
"""
from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

import yaml

if TYPE_CHECKING:  # Hydra is imported only when configs are composed (the table never does)
    from .compose import Composer

try:  # the C loader is ~10x faster; 1,000 run files must load well under a second
    from yaml import CSafeLoader as _Loader
except ImportError:  # pragma: no cover
    from yaml import SafeLoader as _Loader  # type: ignore[assignment]

SAFE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
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


def _check_knob(knob: Any, err) -> Optional[str]:
    if knob is None:
        return None
    if isinstance(knob, list):
        if len(knob) != 1:
            raise err("knob", f"more than one override ({len(knob)} in a list): a knob is exactly one")
        knob = knob[0]
    if not isinstance(knob, str):
        raise err("knob", f"wrong type: expected one override 'key=value', got {type(knob).__name__}")
    knob = knob.strip()
    if len(_OVERRIDE_START.findall(knob)) > 1:
        raise err("knob", f"more than one override in {knob!r}: a knob is exactly one")
    if not knob:
        raise err("knob", "empty override")
    return knob


def parse_run_file(path: Path, text: str | None = None) -> RunSpec:
    """Read and check one run file on its own (not its parent or its config).

    ``text``: the file's content when it is not (yet) on disk at ``path``.
    """
    shown = display_path(path)

    def err(key: str, what: str) -> RunError:
        return RunError(shown, key, what)

    run_id = path.stem
    if not SAFE_ID.match(run_id) or ".." in run_id:
        raise err("run-id", f"{run_id!r} is not a safe name (letters, digits, . _ -; no '..', spaces or '/')")
    try:
        if text is None:
            text = path.read_text(encoding="utf-8")
        data = yaml.load(text, Loader=_Loader)
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
    if "parent" not in data:
        raise err("parent", "missing (use `parent: null` for a root run)")
    parent = data.get("parent")
    if parent is not None and not isinstance(parent, str):
        raise err("parent", f"wrong type: expected a run-id, got {type(parent).__name__}")
    knob = _check_knob(data.get("knob"), err)
    if parent is None and knob is not None:
        raise err("knob", "a root run (parent: null) has no knob")
    if parent is not None and knob is None:
        raise err("knob", "missing: a child run changes exactly one knob of its parent")
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
    return RunSpec(run_id=run_id, parent=parent, knob=knob, question=data.get("question"),
                   claims=tuple(claims), verdict=data.get("verdict"), invalid=data.get("invalid"),
                   owner=data.get("owner"), path=path)


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
        runs_dir = conf_dir / "runs"
        files = sorted(p for p in runs_dir.glob("*") if p.suffix in (".yaml", ".yml") and p.is_file()) \
            if runs_dir.is_dir() else []
        texts: dict[Path, str | None] = {p: None for p in files}
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
            from .compose import Composer

            self._composer = Composer(self.conf_dir)
        return self._composer

    def check_configs(self) -> None:
        """Compose every run (root first); a bad or no-op knob fails naming the file and key."""
        for run_id in sorted(self.specs):
            self._resolve(run_id)

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

    def _resolve(self, run_id: str) -> dict:
        resolved = self._resolved.get(run_id)
        if resolved is not None:
            return resolved
        spec = self.specs[run_id]
        parent_cfg = self._resolve(spec.parent) if spec.parent is not None else None
        overrides = self.overrides(run_id)
        from .compose import ComposeError

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
        return copy.deepcopy(self._resolve(run_id))


def load_runs(conf_dir: Path | str, compose: bool = True) -> RunTree:
    return RunTree.load(conf_dir, compose=compose)
