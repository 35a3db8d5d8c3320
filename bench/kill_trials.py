"""kill -9 trials: a build killed at a random point of each stage kind completes on rerun (after the
hinted `snakemake --unlock`) with every stage byte-identical to an uninterrupted build, and no
partial folder is ever consumed. Not a test (minutes): `python bench/kill_trials.py [--trials N]`.

At a micro scale, `results/A-on-D/eval.json` needs every stage kind (pretrain → distill → train s1 →
evaluate s0, s1 → aggregate). One uninterrupted reference build; then per kind, per trial: a copy
of the reference with that kind's stages and everything downstream removed, a Snakemake started
in its own process group and SIGKILLed (the whole group: Snakemake and its jobs, as a lost node)
at a random moment while a stage of that kind runs; a plain rerun must refuse on the stale lock,
`martingale.store.locks.stale_lock` must say so, `--unlock` then a rerun must finish (with
`--rerun-incomplete`, as the profiles set: a kill just after a stage's rename leaves an output
Snakemake did not see finish, which it then rebuilds), and every stage's
MANIFEST.json (the sha256 of each of its files) must equal the reference's.
"""
from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
from martingale.store.locks import stale_lock  # noqa: E402
from martingale.store.manifest import MANIFEST, problems, store_folders  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
SNAKEMAKE = str(Path(sys.executable).with_name("snakemake"))
TARGET = "results/A-on-D/eval.json"
KINDS = ("pretrain", "distill", "train", "evaluate")
DOWNSTREAM = {"pretrain": KINDS, "distill": KINDS[1:], "train": KINDS[2:], "evaluate": KINDS[3:]}
MICRO = {  # appended to conf/config.yaml: every stage kind in seconds
    "world": {"n_train": 16, "n_heldout": 24, "clues_per_question": 4},
    "model": {"hidden_size": 32, "num_layers": 1, "num_heads": 2, "intermediate_size": 64},
    "pretrain": {"steps": 150, "batch_size": 16}, "distill": {"steps": 20, "batch_size": 8},
    "eval": {"n_bootstrap": 50},
}


def project(root: Path) -> Path:
    for d in ("conf", "workflow"):
        shutil.copytree(REPO / d, root / d)
    shutil.copy(REPO / "Snakefile", root / "Snakefile")
    with open(root / "conf/config.yaml", "a", encoding="utf-8") as f:
        f.write("\n# --- micro scale (bench/kill_trials.py) ---\n" + yaml.safe_dump(MICRO, sort_keys=False))
    return root


def smk(root: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "WANDB_MODE": "disabled"}
    return subprocess.run([SNAKEMAKE, "--cores", "2", *args], cwd=root, capture_output=True, text=True, env=env)


def manifests(root: Path) -> dict[str, str]:
    return {p.name: (p / MANIFEST).read_text() for p in store_folders(root / "results/_store")
            if (p / MANIFEST).exists()}


def running(root: Path, kind: str) -> bool:
    """A stage of this kind has started: its job log exists (its atomic temp folder appears only
    when it writes, a moment before it ends)."""
    folder = root / "logs" / kind
    return folder.is_dir() and any(folder.iterdir())


def durations(ref: Path) -> dict[str, float]:
    """Seconds each kind's stage ran in the reference: from its log's first timestamp to its manifest."""
    out: dict[str, float] = {}
    for folder in store_folders(ref / "results/_store"):
        kind = folder.parent.name
        log = ref / "logs" / kind / f"{folder.name}.log"
        stamps = [line[:19] for line in log.read_text().splitlines() if line[:2] == "20"] if log.exists() else []
        if stamps:
            start = time.mktime(time.strptime(stamps[0], "%Y-%m-%d %H:%M:%S"))
            out[kind] = max(out.get(kind, 0.0), (folder / MANIFEST).stat().st_mtime - start)
    return out


def trial(ref: Path, work: Path, kind: str, rng: random.Random, duration: float) -> str:
    root = work / f"{kind}-{rng.random():.6f}"
    shutil.copytree(ref, root, symlinks=True)
    for k in DOWNSTREAM[kind]:
        shutil.rmtree(root / "results/_store" / k, ignore_errors=True)
        shutil.rmtree(root / "logs" / k, ignore_errors=True)
    for p in (root / "results").iterdir():
        if p.name != "_store":
            shutil.rmtree(p)
    proc = subprocess.Popen([SNAKEMAKE, "--cores", "2", TARGET], cwd=root, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env={**os.environ, "WANDB_MODE": "disabled"})
    deadline = time.time() + 600
    while not running(root, kind) and proc.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    time.sleep(rng.uniform(0, duration))
    if proc.poll() is not None:                      # the build ended before the kill: no trial
        shutil.rmtree(root)
        return f"SKIP the build ended (exit {proc.returncode}) before the kill"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    first = smk(root, TARGET)
    refused = first.returncode != 0 and "cannot be locked" in first.stdout + first.stderr
    hinted = stale_lock(root)
    assert smk(root, "--unlock").returncode == 0
    res = smk(root, "--rerun-incomplete", TARGET)   # as the profiles do
    if res.returncode:
        return f"FAIL rerun: {res.stderr[-500:]}"
    bad = [line for p in store_folders(root / "results/_store") for line in problems(p)]
    same = manifests(root) == manifests(ref)
    shutil.rmtree(root)
    return f"{'ok ' if same and not bad else 'FAIL'} refused-on-lock={refused} stale-lock-hint={hinted} " \
           f"identical={same} corrupt={len(bad)}"


def main() -> None:
    args = sys.argv[1:]
    trials = int(args[args.index("--trials") + 1]) if "--trials" in args else 10
    kinds = args[args.index("--kinds") + 1].split(",") if "--kinds" in args else list(KINDS)
    rng = random.Random(0)
    with tempfile.TemporaryDirectory() as tmp:
        ref = project(Path(tmp) / "ref")
        t = time.time()
        res = smk(ref, TARGET)
        if res.returncode:
            raise SystemExit(res.stderr[-3000:])
        took = durations(ref)
        print(f"reference build {time.time() - t:.0f} s, {len(manifests(ref))} stages; a stage of each kind "
              f"ran {', '.join(f'{k} {v:.0f} s' for k, v in took.items())}")
        for kind in kinds:   # `trials` kills per kind; a build that ended before its kill is no trial
            done = attempts = 0
            while done < trials and attempts < 3 * trials:
                attempts += 1
                outcome = trial(ref, Path(tmp), kind, rng, took.get(kind, 5.0))
                done += not outcome.startswith("SKIP")
                print(f"{kind:9s} attempt {attempts:2d} (trial {done:2d}): {outcome}", flush=True)


if __name__ == "__main__":
    main()
