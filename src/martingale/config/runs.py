"""The run tree: ``conf/runs/<run-id>.yaml`` files (each read by run_file.py), checked together.

Every rule breaks with one line, ``conf/runs/<file>: <key>: <what is wrong>`` (:class:`RunError`),
and loading never writes anything. A run's config is ``conf/config.yaml`` composed with its
ancestors' knobs, root first (:meth:`RunTree.overrides`).
"""
from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path
from typing import TYPE_CHECKING, Optional

from ..core.jsonvalue import JsonObject
from ..store.files import read_pickle, write_pickle
from .checks import questions_file_problem
from .compose import ComposeError, Composer
from .digest import code_and_versions, conf_digest, conf_files, env_digest
from .schema import run_config
from .sections import RunConfig

if TYPE_CHECKING:  # Hydra is imported only when configs are composed (the table never does)
    from .compose import Composer

from .run_file import (  # noqa: F401  (a run file's names, read through the tree's module)
    RUN_ID_MAX,
    RUN_ID_PATTERN,
    RunError,
    RunSpec,
    display_path,
    parse_run_file,
    run_files,
    run_id_problem,
)

RESOLVED_CACHE = Path(".cache") / "runs"   # validated run configs by content (RunTree.check_configs)
RESOLVED_KEPT = 4                           # the newest kept: a conf/ edit and back composes nothing


class RunTree:
    """All runs of a conf/ folder, checked together; configs composed once and cached."""

    def __init__(self, conf_dir: Path, specs: dict[str, RunSpec]):
        self.conf_dir = Path(conf_dir)
        self.specs = specs
        self._composer: Composer | None = None
        self._resolved: dict[str, RunConfig] = {}

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
            self.resolved(run_id)
        if self._cache_path() == path:
            write_pickle(path, self._resolved, RESOLVED_KEPT)

    def check_questions(self) -> None:
        """What no cache key covers, checked on every load of cached configs: each run's questions
        file (world.questions_file) is still there and still fits its world."""
        root = self.conf_dir.resolve().parent
        for run_id in sorted(self.specs):
            why = questions_file_problem(self._resolved[run_id].world, root)
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

    def resolved(self, run_id: str) -> RunConfig:
        """The run's validated config, typed, composed once and cached: shared, so never modified
        (``resolved_config`` gives a copy as JSON)."""
        resolved = self._resolved.get(run_id)
        if resolved is not None:
            return resolved
        spec = self.specs[run_id]
        parent_cfg = self.resolved(spec.parent) if spec.parent is not None else None
        overrides = self.overrides(run_id)

        try:
            if spec.knob is not None:
                self.composer.parse(spec.knob)  # knob-level errors (parse, group option) first
            resolved = run_config(self.composer.compose(overrides), run_id)
        except ComposeError as e:
            raise self._err(run_id, e.key, e.reason) from None
        if parent_cfg is not None and spec.knob is not None and resolved == parent_cfg:
            key = self.composer.parse(spec.knob).key_or_group
            raise self._err(run_id, key, f"no-op knob: {spec.knob!r} leaves the config of parent "
                                         f"{spec.parent!r} unchanged")
        self._resolved[run_id] = resolved
        return resolved

    def resolved_config(self, run_id: str) -> JsonObject:
        """The run's full config as its JSON, a plain dict (a copy: safe to modify)."""
        return dataclasses.asdict(self.resolved(run_id))

