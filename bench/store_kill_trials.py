"""kill -9 trials of a push: a push SIGKILLed at a random point is never seen by another machine as
a partial stage, and the next push completes it. Not a test (a minute or two):
`python bench/store_kill_trials.py [--trials 24] [--stage DIR]`.

A real S3-compatible server (SeaweedFS, tests/s3server.py) on loopback. The stage pushed is a copy
of DIR (default: a stage folder of 120 files, 1-64 KiB, made here, as a job leaves it). Each trial,
on a fresh prefix: `martingale.remote.push.push_stage` in its own process, SIGKILLed after a random
delay drawn up to the time an uninterrupted push takes; then a third machine (an empty folder)
pulls (`martingale.remote.pull.sync_stages`): it must get nothing or the complete stage, byte for
byte; then the push is run again and a fourth machine must pull the complete stage. Prints one line
a trial and the tally.
"""
from __future__ import annotations

import argparse
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(HERE / "tests"))
from martingale.remote.backend import open_store  # noqa: E402
from martingale.remote.pull import sync_stages  # noqa: E402
from martingale.store import stage_dir  # noqa: E402
from martingale.store.files import atomic_dir  # noqa: E402

from s3server import S3Server  # noqa: E402

SID = "train-0123456789ab"
PUSH = """
import sys
from pathlib import Path
from martingale.remote.backend import open_store
from martingale.remote.push import push_stage
print(push_stage(open_store(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], {}).state, flush=True)
"""


def make_stage(root: Path, source: Path | None) -> None:
    """The stage to push under root: a copy of ``source``'s files, or 120 seeded random files."""
    rng = random.Random(7)
    with atomic_dir(root / stage_dir(SID)) as tmp:
        if source is not None:
            for path in sorted(source.rglob("*")):
                if path.is_file() and path.name != "MANIFEST.json":
                    (tmp / path.relative_to(source)).parent.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(path, tmp / path.relative_to(source))
        else:
            for i in range(120):
                (tmp / f"part-{i:03d}.bin").write_bytes(rng.randbytes(rng.randint(1024, 65536)))


def tree(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def push(url: str, root: Path, env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", PUSH, url, str(root), SID], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)


def pulled(url: str, into: Path) -> str:
    """'none', 'complete', or what was wrong: what a machine that pulls now gets."""
    synced = sync_stages(open_store(url), into, [SID], {SID: {}}, False, lambda line: None)
    folder = into / stage_dir(SID)
    if not synced.pulled:
        return "none" if not folder.exists() else "PARTIAL FOLDER LEFT"
    return "complete" if tree(folder) == REFERENCE else "DIFFERENT BYTES"


def main() -> int:
    global REFERENCE
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=24)
    ap.add_argument("--stage", type=Path, default=None, help="a stage folder to push (default: 120 random files)")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="store-kill-"))
    with S3Server(work / "s3") as server:
        env = {**os.environ, **server.env}
        os.environ.update(server.env)
        make_stage(work / "a", args.stage)
        REFERENCE = tree(work / "a" / stage_dir(SID))
        bucket = server.url.split("/")[2]
        start = time.perf_counter()
        full = push(f"s3://{bucket}/reference", work / "a", env)
        full.communicate()
        whole = time.perf_counter() - start
        print(f"an uninterrupted push: {whole:.2f} s ({len(REFERENCE)} files, "
              f"{sum(map(len, REFERENCE.values())) / 1e6:.1f} MB); kills drawn in [0, {whole:.2f}] s")
        rng, tally, bad = random.Random(11), {}, 0
        for trial in range(args.trials):
            url = f"s3://{bucket}/trial-{trial}"
            proc = push(url, work / "a", env)
            delay = rng.uniform(0, whole)
            time.sleep(delay)
            finished = proc.poll() is not None
            if not finished:
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            seen = pulled(url, work / f"third-{trial}")
            proc = push(url, work / "a", env)
            state = proc.communicate()[0].strip()
            after = pulled(url, work / f"fourth-{trial}")
            ok = seen in ("none", "complete") and after == "complete" and (seen == "complete" or not finished)
            bad += not ok
            key = f"{'finished before the kill' if finished else 'killed'}: third machine {seen}"
            tally[key] = tally.get(key, 0) + 1
            print(f"trial {trial:2d}: kill at {delay:.2f} s, {'finished first' if finished else 'killed'}; "
                  f"a third machine pulls {seen}; the next push: {state}; then a pull is {after}"
                  + ("" if ok else "  <-- WRONG"))
    shutil.rmtree(work, ignore_errors=True)
    print("tally:", ", ".join(f"{k}: {v}" for k, v in sorted(tally.items())))
    print(f"{args.trials - bad} of {args.trials} trials as they must be")
    return 1 if bad else 0


REFERENCE: dict[str, bytes] = {}

if __name__ == "__main__":
    sys.exit(main())
