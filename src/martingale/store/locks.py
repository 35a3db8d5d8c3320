"""Snakemake's working-directory lock after a crash: held by a live Snakemake, or stale.

A Snakemake killed with SIGKILL (an OOM kill, a lost node, ``kill -9``) cannot remove its lock in
``.snakemake/locks``, and every later run then stops with "Directory cannot be locked". The lock
holds no process id, so it is stale when no live Snakemake process has this project as its working
directory; ``snakemake --unlock`` is then safe. (Linux: processes are read from /proc.)
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Optional


def locked(root: Path | str) -> bool:
    """A Snakemake lock file exists in root/.snakemake/locks."""
    locks = Path(root) / ".snakemake" / "locks"
    return locks.is_dir() and any(locks.iterdir())


def live_snakemakes(root: Path | str) -> list[int]:
    """Process ids of running Snakemake processes whose working directory is root."""
    root = Path(root).resolve()
    pids = []
    for entry in Path("/proc").iterdir() if Path("/proc").is_dir() else ():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            if any(Path(a.decode(errors="replace")).name == "snakemake" for a in argv[:2]) and \
                    (entry / "cwd").resolve() == root:
                pids.append(int(entry.name))
        except OSError:          # the process ended, or is not ours to read
            continue
    return pids


def lock_state(root: Path | str) -> Optional[str]:
    """The lock's state: "live" while a live Snakemake in root holds it, "stale" when none does
    (left by a killed run: --unlock is safe), None without a lock. The one test of a stale lock,
    for `martingale status` and for the table's running/crashed states alike."""
    if not locked(root):
        return None
    return "live" if live_snakemakes(root) else "stale"


def stale_lock(root: Path | str) -> bool:
    """A lock that no live Snakemake in root holds: left by a killed run; --unlock is safe."""
    return lock_state(root) == "stale"
