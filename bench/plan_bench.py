"""Planning and table timings against their goals. Not a test: `python bench/plan_bench.py`.

1. plan the campaign (conf/runs, 15 runs)            goal ≤ 2 s
2. plan 1,000 generated runs (random one-knob tree)  goal ≤ 10 s
3. `martingale table` over those 1,000 runs          goal ≤ 1 s
Each timing is a fresh process (imports included), as a user would see it.
"""
from __future__ import annotations

import json
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def generate(root: Path, n: int, seed: int = 0) -> None:
    """conf/ (groups from the repo) + a random tree of n runs, each one valid, non-no-op knob."""
    rng = random.Random(seed)
    shutil.copytree(REPO / "conf", root / "conf", ignore=shutil.ignore_patterns("runs"))
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


def timed(code: str, cwd: Path) -> tuple[float, str]:
    t = time.perf_counter()
    res = subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True)
    if res.returncode:
        raise SystemExit(res.stderr)
    return time.perf_counter() - t, res.stdout.strip()


# Planning includes writing results/_store/index.json, as Snakemake's onstart does.
PLAN = ("from martingale.plan import Plan; p = Plan.load('.'); r = p.active_run_ids(); p.write_index(); "
        "print(f'{len(r)} runs, {len(p.stages_for(r))} distinct stages, naive {p.naive_count(r)}')")
TABLE = "from martingale.table import write_table; print(write_table('.'))"


def main() -> None:
    rows = []
    dt, info = timed(PLAN, REPO)
    rows.append(("plan the campaign", dt, 2.0, info))
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        generate(root, 1000)
        dt, info = timed(PLAN, root)
        rows.append(("plan 1,000 generated runs", dt, 10.0, info))
        dt, info = timed(TABLE, root)
        rows.append(("martingale table, 1,000 runs", dt, 1.0, info))
        dt2, _ = timed(TABLE, root)
        rows.append(("martingale table again (no change)", dt2, 1.0, "byte-identical, not rewritten"))
    for name, dt, goal, info in rows:
        mark = "ok " if dt <= goal else "SLOW"
        print(f"{mark} {name:38s} {dt:6.2f} s  (goal ≤ {goal:g} s)  {info}")


if __name__ == "__main__":
    main()
