"""After a kill -9, Snakemake's lock stays behind: the tool tells a stale lock from a live one."""
from __future__ import annotations

import subprocess
import time

from martingale.store.locks import live_snakemakes, locked, stale_lock


def lock(root):
    (root / ".snakemake/locks").mkdir(parents=True)
    (root / ".snakemake/locks/0.input.lock").write_text("results/x\n")


def test_no_lock_is_not_stale(tmp_path):
    assert not locked(tmp_path) and not stale_lock(tmp_path)


def test_a_lock_no_snakemake_holds_is_stale(tmp_path):
    lock(tmp_path)
    assert stale_lock(tmp_path)


def test_a_lock_held_by_a_live_snakemake_in_the_project_is_not_stale(tmp_path):
    lock(tmp_path)
    proc = subprocess.Popen(["bash", "-c", "exec -a snakemake sleep 30"], cwd=tmp_path)
    try:
        for _ in range(50):
            if live_snakemakes(tmp_path):
                break
            time.sleep(0.1)
        assert live_snakemakes(tmp_path) == [proc.pid] and not stale_lock(tmp_path)
    finally:
        proc.kill()
        proc.wait()
    assert stale_lock(tmp_path)
