"""Stage speed side by side: the same stages, this checkout against another, and the same bytes.
Not a test: `python bench/stage_speed.py --against DIR [RUN LABEL ...]`.

Each stage (a run and one of its stage labels: train-s1, eval-s1, ...; ``aggregate`` for the run's
aggregate) runs in a fresh process with a checkout's src/ first on the import path, on this
project's store (``--root``: another project's; the inputs must be built: `make demo` builds the
default ones), into a temporary folder; the body is timed after the imports, as a warm worker runs it. Rounds alternate between
the checkouts (``--rounds``, best of them). Printed per stage: both times, the ratio this / other,
and whether the two wrote the same bytes (every file but provenance.json, which names the
checkout's path). ``--n-train N`` runs a train stage on the first N training questions (a shorter
stage of the same kind, the same on both sides).

    python bench/stage_speed.py --against ../old                        # the demo's defaults
    python bench/stage_speed.py --against ../old filter-s2only train-s1 A-on-D eval-s1
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT = ["filter-s2only", "train-s1", "filter-s2only", "eval-s1", "filter-s2only", "aggregate"]

# One stage in a fresh process: argv = root run label out n_train; prints {"seconds": ...}.
BODY = r'''
import json, sys, time
from pathlib import Path
root, run, label, out, n_train = Path(sys.argv[1]), sys.argv[2], sys.argv[3], Path(sys.argv[4]), int(sys.argv[5])
import numpy, scipy.stats, torch, transformers, peft, matplotlib  # imported before the clock, as in a warm worker
from martingale.plan import Plan, run_identity
plan = Plan.load(root)
if label == "aggregate":
    from martingale.records.aggregate import write_run_results
    fix = lambda group: [dict(e, dir=root / e["dir"]) for e in group]
    parent = plan.tree.specs[run].parent
    args = (run, run_identity(plan.resolved_config(run)), plan.lineage(run), fix(plan.evals(run)), out)
    kw = dict(parent_evals=fix(plan.evals(parent) if parent else []), natural_evals=fix(plan.natural_evals(run)))
    t = time.perf_counter()
    write_run_results(*args, **kw)
else:
    from martingale.jobs.smk import compute_threads
    from martingale.stages import kinds
    from martingale.store import stage_dir
    from martingale.core.threads import use_threads
    if label.startswith(("train-", "eval-")):       # a stage of the run's own seed chain
        kind, _, name = label.partition("-")
        row = next(r for r in plan.run_stages(run) if r.stage == name)
        sid = row.eval_stage if kind == "eval" else row.model_stage
    else:                                            # another role of its chain: pretrain, distill-D, ...
        job_types = plan.index()["stages"]
        sid = next(s for s in plan.run_chain(run) if job_types[s]["job_type"] == label)
    stage = plan.stages[sid]
    cfg = dict(stage.cfg)
    if n_train and "world" in cfg:
        cfg["world"] = {**cfg["world"], "n_train": n_train}
    use_threads(compute_threads(cfg, 1))
    inputs = {role: root / stage_dir(uid) for role, uid in stage.inputs.items()}
    kind = kinds()[stage.kind]
    try:                                             # a checkout whose bodies read typed slices
        from martingale.config.slices import stage_config
        cfg = stage_config(kind, cfg)
    except ImportError:                              # an older one: the slice as a dict
        pass
    t = time.perf_counter()
    kind.run(cfg, out_dir=out / "stage", **inputs)
print(json.dumps({"seconds": time.perf_counter() - t}))
'''


def digest(folder: Path) -> str:
    """sha256 over every file's relative path and bytes, provenance.json left out."""
    h = hashlib.sha256()
    for f in sorted(p for p in folder.rglob("*") if p.is_file() and p.name != "provenance.json"):
        h.update(str(f.relative_to(folder)).encode())
        h.update(f.read_bytes())
    return h.hexdigest()


def run_once(root: Path, checkout: Path, run: str, label: str, n_train: int) -> tuple[float, str]:
    """(seconds of the stage body, digest of what it wrote) with ``checkout``'s code."""
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "PYTHONPATH": str(checkout / "src"), "WANDB_MODE": "disabled"}
        res = subprocess.run([sys.executable, "-c", BODY, str(root), run, label, tmp, str(n_train)],
                             cwd=root, env=env, capture_output=True, text=True)
        if res.returncode:
            raise SystemExit(f"stage_speed: {run} {label} with {checkout}:\n{res.stderr[-3000:]}")
        return json.loads(res.stdout.strip().splitlines()[-1])["seconds"], digest(Path(tmp))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("pairs", nargs="*", help="RUN LABEL pairs (default: the demo's train-s1, eval-s1, aggregate)")
    ap.add_argument("--against", type=Path, required=True, help="another checkout (e.g. a git worktree)")
    ap.add_argument("--root", type=Path, default=REPO, help="the project whose conf/ and store are used")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--n-train", type=int, default=0)
    args = ap.parse_args()
    pairs = args.pairs or DEFAULT
    if len(pairs) % 2:
        ap.error("stages are RUN LABEL pairs")
    other = args.against.resolve()
    for run, label in zip(pairs[::2], pairs[1::2]):
        mine, theirs = [], []
        for _ in range(args.rounds):
            mine.append(run_once(args.root.resolve(), REPO, run, label, args.n_train))
            theirs.append(run_once(args.root.resolve(), other, run, label, args.n_train))
        same = len({d for _, d in mine + theirs}) == 1
        a, b = min(s for s, _ in mine), min(s for s, _ in theirs)
        print(f"{run:18s} {label:10s} {a:7.2f} s  other {b:7.2f} s  ratio {a / b:5.2f}  "
              f"same bytes: {'yes' if same else 'NO'}", flush=True)


if __name__ == "__main__":
    main()
