"""What a config is computed from, as digests: conf/'s files and the package's code (the keys of
the on-disk caches of composed bases and validated run configs)."""
from __future__ import annotations

import hashlib
from pathlib import Path


def conf_digest(conf_dir: Path) -> str:
    """sha256 of conf/'s YAML files but the run files (their knobs are keyed on their own)."""
    h = hashlib.sha256()
    for p in sorted(conf_dir.rglob("*")):
        rel = p.relative_to(conf_dir)
        if p.is_file() and rel.parts[0] != "runs" and p.suffix in (".yaml", ".yml"):
            h.update(str(rel).encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()


def code_digest() -> str:
    """sha256 of every module of the package: what composes and validates a run config."""
    h = hashlib.sha256()
    package = Path(__file__).resolve().parents[1]
    for path in sorted(package.rglob("*.py")):
        h.update(str(path.relative_to(package)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()
