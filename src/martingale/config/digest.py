"""What a config is computed from, as digests: conf/'s files, the environment variables they read
and the package's code (the keys of the on-disk caches of composed bases, validated run configs
and the plan)."""
from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path

ENV_REFERENCE = re.compile(rb"\$\{oc\.env:([A-Za-z_][A-Za-z0-9_]*)")


def conf_digest(conf_dir: Path) -> str:
    """sha256 of conf/'s YAML files but the run files (their knobs are keyed on their own)."""
    h = hashlib.sha256()
    for p in sorted(conf_dir.rglob("*")):
        rel = p.relative_to(conf_dir)
        if p.is_file() and rel.parts[0] != "runs" and p.suffix in (".yaml", ".yml"):
            h.update(str(rel).encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()


def env_digest(conf_dir: Path) -> str:
    """The environment variables conf/ reads (``${oc.env:NAME,...}``, in any YAML file, run files
    included) with their values now, as JSON: a config resolved under one value of
    $MARTINGALE_WEIGHTS is not the config under another. A hash of it goes into cache keys, never
    the values themselves."""
    names: set[bytes] = set()
    for p in conf_dir.rglob("*"):
        if p.suffix in (".yaml", ".yml") and p.is_file():
            names.update(ENV_REFERENCE.findall(p.read_bytes()))
    return json.dumps({n: os.environ.get(n) for n in sorted(n.decode() for n in names)})


def code_digest() -> str:
    """sha256 of every module of the package: what composes and validates a run config."""
    h = hashlib.sha256()
    package = Path(__file__).resolve().parents[1]
    for path in sorted(package.rglob("*.py")):
        h.update(str(path.relative_to(package)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()
