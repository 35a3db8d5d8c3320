"""Compose a run's config: ``conf/config.yaml`` + Hydra overrides, validated against the schema.

Two paths that give the same result:

- :func:`compose` — Hydra's own compose API (``initialize_config_dir``), the reference.
- :class:`Composer` — the fast path used for planning. Hydra composes each distinct combination of
  config-group choices (``elicit=snap``, ``model=llama31_8b`` ...) once; plain ``key=value``
  overrides are then applied on a copy of that structured config with Hydra's own override
  application, which is exactly what Hydra does after composing the defaults list (group overrides
  first, then key overrides in order). Types, unknown keys, ``choices()`` and every key's domain
  (``schema.domains()``) are still checked. A knob holds no interpolation: its value is a literal.

Errors come out as :class:`ComposeError` with ``key`` (the offending key) and a one-line ``reason``
(overrides.py: a knob parsed, an error in one line; values.py: the values checked).
"""
from __future__ import annotations

import copy
import hashlib
import json
import pickle
import re
from pathlib import Path
from typing import Iterable

import yaml
from hydra import compose as hydra_compose
from hydra import initialize_config_dir
from hydra.core.config_store import ConfigStore
from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.types import Override
from omegaconf import DictConfig, ListConfig, OmegaConf, open_dict
from omegaconf.errors import ConfigAttributeError, ConfigKeyError

from ..core.jsonvalue import Json, JsonObject
from ..core.registry import epoch
from ..store.files import keep_newest, write_bytes
from .digest import conf_digest, conf_files
from .overrides import ComposeError, _first_line, one_line, parse_override
from .schema import choices, config_class
from .values import check_values

SCHEMA_NAME = "martingale_schema"
_STORED = [-1]   # the registries' epoch the stored schema was built for


def store_schema() -> None:
    """Put the schema for the extensions registered now in Hydra's ConfigStore (again only when a
    registry changed: an extension registered at test time brings its keys)."""
    node = config_class()   # imports every extension first: the epoch read next is theirs
    if _STORED[0] != epoch():
        ConfigStore.instance().store(name=SCHEMA_NAME, node=node)
        _STORED[0] = epoch()


store_schema()


def to_dict(cfg: DictConfig) -> dict:
    """A composed OmegaConf config as a plain dict, every interpolation resolved."""
    try:
        return OmegaConf.to_container(cfg, resolve=True, throw_on_missing=True)  # type: ignore[return-value]
    except Exception as e:
        key = getattr(e, "full_key", None) or "config"
        raise ComposeError(str(key), one_line(e)) from None


# --------------------------------------------------------------------------- Hydra (reference)

_INIT_DIR: str | None = None


def _ensure_hydra(conf_dir: Path | str) -> None:
    """Initialise Hydra once per config folder (kept initialised: it is global state)."""
    global _INIT_DIR
    conf_dir = str(Path(conf_dir).resolve())
    gh = GlobalHydra.instance()
    if _INIT_DIR == conf_dir and gh.is_initialized():
        return
    if gh.is_initialized():
        gh.clear()
    initialize_config_dir(config_dir=conf_dir, version_base=None)
    _INIT_DIR = conf_dir


def _hydra_error(e: BaseException, overrides: list[str]) -> ComposeError:
    msg = one_line(e)
    key = getattr(e, "full_key", None)
    if not key:
        for ov in overrides:
            k = ov.split("=", 1)[0].lstrip("+~")
            if f"'{k}'" in str(e) or k in str(e):
                key = k
                break
    return ComposeError(str(key or "config"), msg)


def compose_cfg(overrides: list[str], conf_dir: Path | str) -> DictConfig:
    """Hydra compose of conf_dir/config.yaml with the overrides: the structured DictConfig."""
    store_schema()
    _ensure_hydra(conf_dir)
    try:
        return hydra_compose(config_name="config", overrides=list(overrides))
    except Exception as e:
        raise _hydra_error(e, list(overrides)) from None


_COMPOSE_CACHE: dict[tuple[str, int, tuple[str, ...]], JsonObject] = {}


def compose(overrides: Iterable[str], conf_dir: Path | str) -> dict:
    """Reference compose through Hydra: a plain, resolved, validated dict (cached per override tuple)."""
    overrides = tuple(overrides)
    key = (str(Path(conf_dir).resolve()), epoch(), overrides)
    if key not in _COMPOSE_CACHE:
        for ov in overrides:
            parse_override(ov)
        resolved = to_dict(compose_cfg(list(overrides), conf_dir))
        check_values(resolved, root=Path(conf_dir).resolve().parent)
        _COMPOSE_CACHE[key] = resolved
    return copy.deepcopy(_COMPOSE_CACHE[key])


# --------------------------------------------------------------------------- fast path

# Hydra-composed bases, pickled (unpickling is ~4x faster than deepcopy), keyed by the content of
# the conf/ folder (every yaml but runs/) and the group choices: a Hydra compose costs ~0.1 s. They
# are kept on disk too (<project>/.cache/compose/, unresolved: ${oc.env:...} is read at each use),
# keyed also by what Hydra composes them from besides conf/ (the schema nodes in its ConfigStore,
# Hydra's and OmegaConf's versions), so a fresh process plans without composing.
_BASES: dict[tuple[str, str, tuple], bytes] = {}
CACHE_DIR = Path(".cache") / "compose"
TREES_KEPT = 4     # the conf/ trees whose bases stay on disk (each tree: one file per group-choice combination)


def _store_digest() -> str:
    """What Hydra composes from besides conf/: the nodes stored in its ConfigStore (ours; not
    Hydra's own hydra/ group, which it fills as it starts), and the versions."""
    import hydra
    import omegaconf

    def walk(d: dict, prefix: str = ""):
        for k, v in sorted(d.items()):
            if isinstance(v, dict):
                yield from walk(v, f"{prefix}{k}/")
            else:
                yield f"{prefix}{k}", OmegaConf.to_yaml(v.node)
    h = hashlib.sha256(f"hydra {hydra.__version__} omegaconf {omegaconf.__version__}".encode())
    ours = {k: v for k, v in ConfigStore.instance().repo.items() if k != "hydra"}
    for name, text in walk(ours):
        h.update(f"\0{name}\0{text}".encode())
    return h.hexdigest()


def _read_cached(path: Path) -> tuple[bytes, DictConfig] | None:
    """A cached base's pickle and the config it holds, or None when absent or unreadable (then it
    is composed again)."""
    try:
        blob = path.read_bytes()
        return blob, pickle.loads(blob)
    except Exception:
        return None


def _write_cached(path: Path, blob: bytes) -> None:
    """Atomically (two planners writing one key write the same bytes); a read-only tree is fine.
    Then only the bases of the TREES_KEPT newest trees stay (a file is named ``<tree>-<choices>.pkl``):
    every conf/ edit makes a tree, and only the recent ones are read again."""
    try:
        write_bytes(path, blob)
    except OSError:
        return
    # a name of an older layout (no "-"): a tree of its own
    keep_newest(path.parent, TREES_KEPT, "*.pkl", group=lambda f: f.name.split("-", 1)[0])


def _default_choices(conf_dir: Path) -> dict[str, str]:
    """Group choices named in config.yaml's defaults list (``- elicit: samemode``)."""
    try:
        data = yaml.safe_load((conf_dir / "config.yaml").read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError):
        return {}
    out: dict[str, str] = {}
    for item in data.get("defaults") or []:
        if isinstance(item, dict):
            for g, c in item.items():
                if isinstance(g, str) and isinstance(c, str) and not g.startswith(("override ", "/")):
                    out[g] = c
    return out


class Composer:
    """Compose many override lists quickly; same semantics as :func:`compose`.

    ``groups``: the config-group folders of conf_dir (every sub-folder but ``runs``). A lineage's
    overrides are split into group choices (last one wins, as in Hydra) and key overrides (applied
    in order after composition, as in Hydra).
    """

    def __init__(self, conf_dir: Path | str):
        self.conf_dir = Path(conf_dir).resolve()
        self.groups = {
            p.name: sorted({f.stem for f in p.iterdir() if f.suffix in (".yaml", ".yml")})
            for p in self.conf_dir.iterdir() if p.is_dir() and p.name != "runs"
        }
        self._digest = conf_digest(conf_files(self.conf_dir))
        store_schema()
        self._store = _store_digest()
        self._defaults = _default_choices(self.conf_dir)
        self._cache: dict[tuple[str, ...], dict] = {}
        self._base_infos: dict[tuple, tuple[DictConfig, dict, bool]] = {}
        self._values: dict[tuple, Json] = {}
        self._parsed: dict[str, Override] = {}
        self._choices: dict[str, tuple[Json, ...]] | None = None

    def parse(self, text: str) -> Override:
        ov = self._parsed.get(text)
        if ov is None:
            ov = parse_override(text)
            if ov.key_or_group in self.groups:
                choice = ov.value()
                if not isinstance(choice, str) or choice not in self.groups[ov.key_or_group]:
                    opts = ", ".join(self.groups[ov.key_or_group])
                    raise ComposeError(ov.key_or_group,
                                       f"no option {choice!r} in conf/{ov.key_or_group}/ (choose from: {opts})")
            self._parsed[text] = ov
        return ov

    def base(self, group_choices: tuple[tuple[str, str], ...]) -> DictConfig:
        """A fresh copy of the Hydra-composed config for one combination of group choices (cached
        in memory and on disk by conf/'s digest, unless conf/ changed while Hydra composed it)."""
        # a choice equal to config.yaml's default composes the same config: drop it
        group_choices = tuple((g, c) for g, c in group_choices if self._defaults.get(g) != c)
        key = (self._digest, self._store, group_choices)
        blob = _BASES.get(key)
        if blob is None:
            tree = hashlib.sha256(json.dumps([self._digest, self._store]).encode()).hexdigest()
            choices = hashlib.sha256(json.dumps(group_choices).encode()).hexdigest()
            path = self.conf_dir.parent / CACHE_DIR / f"{tree[:16]}-{choices[:16]}.pkl"
            cached = _read_cached(path)
            if cached is not None:
                _BASES[key] = cached[0]
                return cached[1]
            composed = compose_cfg([f"{g}={c}" for g, c in group_choices], self.conf_dir)
            if conf_digest(conf_files(self.conf_dir)) != self._digest:   # conf/ edited while composing
                return composed
            try:
                blob = pickle.dumps(composed)
            except (pickle.PicklingError, AttributeError, TypeError):   # a section class no module holds
                return composed
            _write_cached(path, blob)
            _BASES[key] = blob
        return pickle.loads(blob)

    def apply(self, cfg: DictConfig, overrides: list[str]) -> DictConfig:
        """Apply key=value overrides (not group choices) to cfg in place, as Hydra does."""
        for text in overrides:
            ov = self.parse(text)
            try:
                if isinstance(ov.value(), dict) and OmegaConf.select(cfg, ov.key_or_group) is None:
                    # a mapping onto an optional mapping that is null (simulate.human_model): Hydra
                    # would merge into the null node; the mapping is the value
                    with open_dict(cfg):
                        OmegaConf.update(cfg, ov.key_or_group, ov.value(), merge=False)
                    continue
                # what Hydra does with a plain key=value (the parser refused ~, + and ++):
                # merge the value in; a key the schema lacks is an unknown key
                OmegaConf.update(cfg, ov.key_or_group, ov.value(), merge=True)
            except (ConfigAttributeError, ConfigKeyError) as e:
                raise ComposeError(ov.key_or_group, f"unknown key ({_first_line(str(e))})") from None
            except Exception as e:
                raise ComposeError(ov.key_or_group, one_line(e)) from None
        return cfg

    def split(self, overrides: list[str]) -> tuple[tuple[tuple[str, str], ...], list[str]]:
        """(group choices, last one wins; sorted) and the key overrides in order."""
        groups: dict[str, str] = {}
        keys: list[str] = []
        for text in overrides:
            ov = self.parse(text)
            if ov.key_or_group in self.groups:
                groups[ov.key_or_group] = str(ov.value())
            else:
                keys.append(text)
        return tuple(sorted(groups.items())), keys

    def compose_cfg(self, overrides: list[str]) -> DictConfig:
        """The structured DictConfig (slow path: a copy of the base plus every key override)."""
        groups, keys = self.split(overrides)
        return self.apply(self.base(groups), keys)

    # ---- fast path on plain dicts -------------------------------------------------------------
    # A key override's value, once converted by the schema node it targets, does not depend on
    # the rest of the config (types are fixed by the schema; lists are replaced, not merged). So
    # each distinct override is validated once on a scratch copy of its base, and a run's config is
    # its base's resolved dict with those converted values set in order. Overrides that merge a
    # mapping or hold an interpolation, and bases whose interpolations point at config keys, take
    # the slow path, so the result is always what Hydra composes.

    def _base_info(self, groups: tuple[tuple[str, str], ...]) -> tuple[DictConfig, dict, bool]:
        info = self._base_infos.get(groups)
        if info is None:
            scratch = self.base(groups)
            resolved = to_dict(scratch)
            raw = OmegaConf.to_container(scratch, resolve=False)
            refs = re.findall(r"\$\{([^}]*)\}", json.dumps(raw))
            key_refs = any(":" not in r for r in refs)   # ${a.b} (not a resolver like ${oc.env:X})
            info = self._base_infos[groups] = (scratch, resolved, key_refs)
        return info

    def _converted(self, groups: tuple[tuple[str, str], ...], text: str) -> tuple[list[str], Json] | None:
        """(key path, converted value) of a key override, or None when it needs the slow path."""
        cache_key = (groups, text)
        if cache_key in self._values:
            return self._values[cache_key]
        ov = self.parse(text)
        value = ov.value()
        result = None
        if not isinstance(value, dict) and "${" not in json.dumps(value, default=str):
            scratch = self._base_info(groups)[0]
            self.apply(scratch, [text])  # raises ComposeError naming the key
            node = OmegaConf.select(scratch, ov.key_or_group, throw_on_missing=True)
            if isinstance(node, (DictConfig,)):
                result = None
            else:
                if isinstance(node, ListConfig):
                    node = OmegaConf.to_container(node, resolve=True)
                result = (ov.key_or_group.split("."), node)
        self._values[cache_key] = result
        return result

    def compose(self, overrides: Iterable[str]) -> dict:
        """Resolved, validated plain dict (cached per override tuple; do not mutate it)."""
        key = tuple(overrides)
        resolved = self._cache.get(key)
        if resolved is None:
            groups, keys = self.split(list(key))
            groups = tuple((g, c) for g, c in groups if self._defaults.get(g) != c)
            _, base_resolved, key_refs = self._base_info(groups)
            converted = [None] if key_refs else [self._converted(groups, t) for t in keys]
            if any(c is None for c in converted):
                resolved = to_dict(self.compose_cfg(list(key)))
            else:
                resolved = base_resolved
                for path, value in converted:  # type: ignore[misc]
                    resolved = _set_path(resolved, path, value)
            if self._choices is None:   # the registries do not change while a tree is checked
                self._choices = choices()
            check_values(resolved, self._choices, self.conf_dir.parent)
            self._cache[key] = resolved
        return resolved


def _set_path(d: dict, path: list[str], value: Json) -> dict:
    """A copy of d with d[path] = value; only the dicts along the path are copied."""
    out = dict(d)
    if len(path) == 1:
        out[path[0]] = copy.deepcopy(value) if isinstance(value, (list, dict)) else value
    else:
        out[path[0]] = _set_path(d[path[0]], path[1:], value)
    return out
