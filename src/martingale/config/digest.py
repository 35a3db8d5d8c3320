"""What a config is computed from, as digests: conf/'s files, the environment variables they read
and the package's code (the keys of the on-disk caches of composed bases, validated run configs
and the plan). conf/ is read once per key (conf_files); each digest is a function of those bytes."""
from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path

from .schema import shape

ENV_REFERENCE = re.compile(rb"\$\{oc\.env:([A-Za-z_][A-Za-z0-9_]*)")
ConfFiles = list[tuple[Path, bytes]]


def conf_files(conf_dir: Path) -> ConfFiles:
    """Every file under conf_dir, in path order: (path relative to conf_dir, bytes)."""
    return [(p.relative_to(conf_dir), p.read_bytes()) for p in sorted(conf_dir.rglob("*")) if p.is_file()]


def conf_digest(files: ConfFiles) -> str:
    """sha256 of conf/'s YAML files but the run files (their knobs are keyed on their own)."""
    h = hashlib.sha256()
    for rel, data in files:
        if rel.parts[0] != "runs" and rel.suffix in (".yaml", ".yml"):
            h.update(str(rel).encode() + b"\0" + data + b"\0")
    return h.hexdigest()


def tree_digest(files: ConfFiles) -> str:
    """sha256 of every file under conf/ (relative path + bytes), run files included."""
    h = hashlib.sha256()
    for rel, data in files:
        h.update(rel.as_posix().encode("utf-8") + b"\0")
        h.update(data + b"\0")
    return h.hexdigest()


def env_digest(files: ConfFiles) -> str:
    """The environment variables conf/ reads (``${oc.env:NAME,...}``, in any YAML file, run files
    included) with their values now, as JSON: a config resolved under one value of
    $MARTINGALE_WEIGHTS is not the config under another. A hash of it goes into cache keys, never
    the values themselves."""
    names: set[bytes] = set()
    for rel, data in files:
        if rel.suffix in (".yaml", ".yml"):
            names.update(ENV_REFERENCE.findall(data))
    return json.dumps({n: os.environ.get(n) for n in sorted(n.decode() for n in names)})


def code_digest() -> str:
    """sha256 of every module of the package: what composes and validates a run config."""
    h = hashlib.sha256()
    package = Path(__file__).resolve().parents[1]
    for path in sorted(package.rglob("*.py")):
        h.update(str(path.relative_to(package)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def code_and_versions() -> list[str]:
    """What composes and validates a config besides conf/: the package's code (code_digest), the
    schema's keys with the extensions registered now, Hydra's and OmegaConf's versions."""
    from importlib.metadata import version
    return [code_digest(), hashlib.sha256(shape().encode()).hexdigest(), version("hydra-core"), version("omegaconf")]
