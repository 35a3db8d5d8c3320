"""Planning and table timings against their goals. Not a test: `python bench/plan_bench.py`.

1. plan the campaign (conf/runs)                     goal ≤ 2 s
2. plan 1,000 generated runs (random one-knob tree)  goal ≤ 10 s
3. `martingale table` over those 1,000 runs          goal ≤ 1 s
4. `snakemake -n all` over those 1,000 runs, and the part of it that is our plan (parse + plan)
Each timing is a fresh process (imports included), as a user would see it. Planning is timed twice
on a fresh copy: the first call, with no cache at all (Hydra composes every base, every run is
validated and planned: no goal), then a call with nothing changed (the caches in .cache/: what
every `snakemake` call after it sees, held to the goal).

`--against DIR` times another checkout (e.g. a git worktree of an earlier commit) the same way,
alternating with this one (best of two rounds each), and prints the ratios side by side: this / other.
"""
from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def generate(root: Path, n: int, seed: int = 0, repo: Path = REPO) -> None:
    """conf/ (groups from the repo) + a random tree of n runs, each one valid, non-no-op knob; the
    Snakefile and workflow/ beside them, so `snakemake -n all` plans them."""
    rng = random.Random(seed)
    shutil.copytree(repo / "conf", root / "conf", ignore=shutil.ignore_patterns("runs", "findings.yaml"))
    shutil.copytree(repo / "workflow", root / "workflow")
    shutil.copy(repo / "Snakefile", root / "Snakefile")
    runs = root / "conf" / "runs"
    runs.mkdir()
    (runs / "base.yaml").write_text("parent: null\nknob: null\nquestion: root\n")
    state = {"base": {"start": "base", "elicit": "samemode", "s1": None, "s2": None, "seeds": "[42]"}}
    numeric = ["stages.s1.lr", "stages.s2.kl_beta", "world.seed", "pretrain.seed", "distill.steps",
               "eval.n_bootstrap", "stages.s1.lora_r", "elicit.cut"]
    ids = ["base"]
    for i in range(1, n):
        parent = rng.choice(ids)
        st = dict(state[parent])
        kind = rng.random()
        if kind < 0.5:
            key = rng.choice(numeric)
            value = {"elicit.cut": 0.3 + i * 1e-5, "stages.s1.lr": 1e-3 + i * 1e-7}.get(key, 1000 + i)
            knob = f"{key}={value}"
        elif kind < 0.6:
            st["start"] = "D" if st["start"] == "base" else "base"
            knob = f"start={st['start']}"
        elif kind < 0.7:
            st["elicit"] = "snap" if st["elicit"] == "samemode" else "samemode"
            knob = f"elicit={st['elicit']}"
        elif kind < 0.95:
            s = rng.choice(["s1", "s2"])
            st[s] = rng.choice([r for r in ("A", "B", "C", "BP", None) if r != st[s]])
            knob = f"stages.{s}.reward={'null' if st[s] is None else st[s]}"
        else:
            st["seeds"] = "[41,42]" if st["seeds"] != "[41,42]" else "[42]"
            knob = f"seeds={st['seeds']}"
        run_id = f"r{i:04d}"
        (runs / f"{run_id}.yaml").write_text(f"parent: {parent}\nknob: {knob}\nquestion: generated\nclaims: []\n")
        state[run_id] = st
        ids.append(run_id)
    for run_id in ids[::2]:  # half the runs are done: the table reads their eval.json
        out = root / "results" / run_id
        out.mkdir(parents=True)
        (out / "eval.json").write_text(json.dumps({"stages": {"s0": {"brier": 0.2, "ms": 0.01, "n": 512}}}))


def timed(argv: list[str], cwd: Path, src: Path) -> tuple[float, str]:
    """Wall time of one fresh process with ``src`` first on the import path; its last stdout line."""
    env = {**os.environ, "PYTHONPATH": str(src)}
    t = time.perf_counter()
    res = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, env=env)
    if res.returncode:
        raise SystemExit(res.stderr[-3000:])
    return time.perf_counter() - t, (res.stdout.strip().splitlines() or [""])[-1]


# Planning includes writing results/_store/index.json, as Snakemake's onstart does.
PLAN = ("from martingale.plan import Plan; p = Plan.load('.'); r = p.active_run_ids(); p.write_index(); "
        "print(f'{len(r)} runs, {len(p.stages_for(r))} distinct stages, naive {p.naive_count(r)}')")
TABLE = "from martingale.table import write_table; print(write_table('.'))"
PY = [sys.executable, "-c"]
DRY_RUN = [str(Path(sys.executable).with_name("snakemake")), "-n", "all", "--quiet", "all", "--cores", "1"]


def measure(repo: Path, tmp: Path) -> list[tuple[str, float, float | None, str]]:
    """(name, seconds, goal, info) for one checkout (its src/ imported, its conf/ generated from)."""
    src = repo / "src"
    campaign = tmp / "campaign"
    shutil.copytree(repo / "conf", campaign / "conf")
    shutil.copytree(repo / "data", campaign / "data")       # the questions files runs read
    rows = [("plan the campaign, first call", *_pair(timed(PY + [PLAN], campaign, src), None)),
            ("plan the campaign, nothing changed", *_pair(timed(PY + [PLAN], campaign, src), 2.0))]
    root = tmp / "gen"
    generate(root, 1000, repo=repo)
    rows.append(("plan 1,000 generated runs, first call", *_pair(timed(PY + [PLAN], root, src), None)))
    rows.append(("plan 1,000 runs, nothing changed", *_pair(timed(PY + [PLAN], root, src), 10.0)))
    rows.append(("martingale table, 1,000 runs", *_pair(timed(PY + [TABLE], root, src), 1.0)))
    dt, _ = timed(PY + [TABLE], root, src)
    rows.append(("martingale table again (no change)", dt, 1.0, "byte-identical, not rewritten"))
    dt, _ = timed(DRY_RUN, root, src)
    rows.append(("snakemake -n all, 1,000 runs", dt, None,
                 f"of which our plan {rows[3][1]:.2f} s, Snakemake's parse + DAG the rest"))
    return rows


def _pair(timing: tuple[float, str], goal: float | None) -> tuple[float, float | None, str]:
    return timing[0], goal, timing[1]


def best(a: list[tuple], b: list[tuple]) -> list[tuple]:
    """Row by row, the faster of two rounds."""
    return [x if x[1] <= y[1] else y for x, y in zip(a, b)]


def main() -> None:
    args = sys.argv[1:]
    other = Path(args[args.index("--against") + 1]).resolve() if "--against" in args else None
    theirs = None
    with tempfile.TemporaryDirectory() as tmp:
        mine = measure(REPO, Path(tmp) / "a1")
        if other:
            theirs = measure(other, Path(tmp) / "b1")
            mine = best(mine, measure(REPO, Path(tmp) / "a2"))
            theirs = best(theirs, measure(other, Path(tmp) / "b2"))
    for i, (name, dt, goal, info) in enumerate(mine):
        mark = "   " if goal is None else "ok " if dt <= goal else "SLOW"
        line = f"{mark} {name:40s} {dt:6.2f} s" + (f"  (goal ≤ {goal:g} s)" if goal else " " * 16)
        if theirs:
            line += f"  other {theirs[i][1]:6.2f} s  ratio {dt / theirs[i][1]:5.2f}"
        print(f"{line}  {info}")


if __name__ == "__main__":
    main()
