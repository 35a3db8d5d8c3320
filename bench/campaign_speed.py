"""Campaign speed, two measures. Not a test: `python bench/campaign_speed.py [LOG]`.

1. **Jobs in flight over a build**, from Snakemake's own log (LOG, default the project's newest
   .snakemake/log/*.snakemake.log): stage jobs (every rule but aggregate and runs_table), the
   build's span, mean and peak stage jobs running at once, and where the stage time went by kind.
2. **The profile split of a dry run**: `snakemake -n all` over 1,000 generated runs
   (plan_bench.generate) under cProfile, split into our plan (Plan.load), our per-job functions
   (workflow/rules/common.smk, counted where Snakemake calls them) and Snakemake's own parse, DAG
   and job printing; and, timed side by side without the profiler, a bare Snakemake workflow with
   the same jobs and edges (one input function per job, no params or resources) as the ratio.
   The first call after an edit (composing and planning every run) is timed apart; the profile and
   the ratio are of the calls after it, which read the caches in .cache/.
3. **A finished campaign's dry run**: `snakemake -n all` in a scratch copy of the project whose
   store holds every output `all` would build, against a workflow with one rule and no job (what
   Snakemake costs before any DAG: its imports and plugin registry). The copy's outputs are
   placeholders made for this (`snakemake --summary` names them, `--touch` orders their times): a
   dry run reads names and times only, and nothing of the copy is kept.
   `--no-dry-run` skips 2 and 3.
"""
from __future__ import annotations

import json
import pstats
import shutil
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO / "bench"))

import plan_bench  # noqa: E402

from martingale.jobs import buildlog  # noqa: E402

NOT_STAGES = {"aggregate", "runs_table", "all"}

BARE_SNAKEFILE = '''# The same jobs and edges as the generated campaign, nothing else: one input function per job.
import json
E = json.load(open("edges.json"))
rule all:
    input: E["all"]
rule stage:
    input: lambda wc: E["stages"][wc.sid]
    output: "store/{sid}/MANIFEST.json"
    shell: "mkdir -p store/{wildcards.sid} && touch {output}"
rule aggregate:
    input: lambda wc: E["runs"][wc.run]
    output: "results/{run}/eval.json"
    shell: "touch {output}"
'''


def flight(log: Path) -> None:
    jobs = buildlog.jobs(log.read_text(encoding="utf-8"))
    stages = [j for j in jobs if j.rule not in NOT_STAGES]
    mean, peak = buildlog.in_flight(stages)
    done = [j for j in jobs if j.end]
    span = (max(j.end for j in done) - min(j.start for j in jobs)).total_seconds() if done else 0
    print(f"build log {log}")
    print(f"  {len(jobs)} jobs ({len(stages)} stage jobs, {sum(1 for j in stages if j.end)} finished), "
          f"span {span / 60:.1f} min")
    print(f"  stage jobs in flight: mean {mean:.2f}, peak {peak}")
    by_rule: dict[str, list[float]] = defaultdict(list)
    for j in jobs:
        if j.end:
            by_rule[j.rule].append(j.seconds)
    for rule, secs in sorted(by_rule.items(), key=lambda kv: -sum(kv[1])):
        print(f"  {rule:12s} {len(secs):4d} jobs {sum(secs):8.0f} s   mean {sum(secs) / len(secs):6.1f} s")


def bare_workflow(root: Path, out: Path) -> None:
    """out/: Snakefile + edges.json with the jobs and edges `snakemake all` plans in root."""
    from martingale.plan import Plan
    plan = Plan.load(root)
    runs = plan.active_run_ids()
    marker = "store/{}/MANIFEST.json".format
    stages = {sid: sorted({marker(u) for u in plan.stages[sid].inputs.values()}) for sid in plan.stages_for(runs)}

    def run_inputs(run: str) -> list[str]:
        parent = plan.tree.specs[run].parent
        evals = plan.evals(run) + (plan.evals(parent) if parent else []) + plan.natural_evals(run)
        return sorted({marker(e["eval_stage"]) for e in evals})
    edges = {"stages": stages, "runs": {r: run_inputs(r) for r in runs},
             "all": [f"results/{r}/eval.json" for r in runs]}
    out.mkdir(parents=True, exist_ok=True)
    (out / "edges.json").write_text(json.dumps(edges))
    (out / "Snakefile").write_text(BARE_SNAKEFILE)
    for r in runs[::2]:     # as plan_bench.generate: half the runs have an eval.json
        (out / "results" / r).mkdir(parents=True, exist_ok=True)
        (out / "results" / r / "eval.json").write_text("{}")


def split(prof: Path) -> dict[str, float]:
    """Profiled seconds: total, our plan, our per-job functions (top-level calls only)."""
    st = pstats.Stats(str(prof)).stats   # type: ignore[attr-defined]
    total = max(v[3] for v in st.values())
    plan = sum(v[3] for f, v in st.items() if f[0].endswith("martingale/plan/__init__.py") and f[2] == "load")
    per_job = 0.0
    for f, (_, _, _, _, callers) in st.items():
        if f[0].endswith("common.smk") and f[2] != "<module>":
            per_job += sum(c[3] for caller, c in callers.items() if not caller[0].endswith("common.smk"))
    return {"total": total, "plan": plan, "per_job": per_job}


def dry_run_split() -> None:
    src = REPO / "src"
    with tempfile.TemporaryDirectory() as tmp:
        gen, bare = Path(tmp) / "gen", Path(tmp) / "bare"
        plan_bench.generate(gen, 1000)
        bare_workflow(gen, bare)
        first = plan_bench.timed(plan_bench.DRY_RUN, gen, src)[0]
        prof = Path(tmp) / "dry.prof"
        plan_bench.timed([sys.executable, "-m", "cProfile", "-o", str(prof), *plan_bench.DRY_RUN], gen, src)
        s = split(prof)
        ours, theirs = [], []
        for _ in range(3):     # side by side, alternating
            ours.append(plan_bench.timed(plan_bench.DRY_RUN, gen, src)[0])
            theirs.append(plan_bench.timed(plan_bench.DRY_RUN, bare, src)[0])
    ours.sort()
    theirs.sort()
    snake = s["total"] - s["plan"] - s["per_job"]
    print(f"snakemake -n all, 1,000 generated runs: first call after an edit {first:.2f} s")
    print("  then, under cProfile, shares of the profiled time")
    print(f"  our plan (Plan.load)        {s['plan'] / s['total']:6.1%}")
    print(f"  our per-job functions       {s['per_job'] / s['total']:6.1%}")
    print(f"  Snakemake (parse, DAG, print) {snake / s['total']:6.1%}")
    print(f"  wall, median of 3: ours {ours[1]:.2f} s, bare Snakemake (same jobs and edges) {theirs[1]:.2f} s, "
          f"ratio {ours[1] / theirs[1]:.2f}")


EMPTY_SNAKEFILE = "rule all:\n    input: []\n"


def finished_campaign_dry_run() -> None:
    """3. above: a scratch copy with every output of `all` present, its dry run against an empty workflow."""
    snakemake = plan_bench.DRY_RUN[0]
    with tempfile.TemporaryDirectory() as tmp:
        built, empty = Path(tmp) / "built", Path(tmp) / "empty"
        for part in ("conf", "workflow", "data", "profiles"):
            shutil.copytree(REPO / part, built / part)
        shutil.copy(REPO / "Snakefile", built / "Snakefile")
        for part in ("models", ".venv-vllm"):        # so `all` plans the runs that need them, as here
            if (REPO / part).exists():
                (built / part).symlink_to(REPO / part)
        summary = subprocess.run([snakemake, "--summary", "all", "--cores", "1"], cwd=built,
                                 capture_output=True, text=True, check=True).stdout.splitlines()[1:]
        for line in summary:
            out = built / line.split("\t")[0]
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text("{}")
        subprocess.run([snakemake, "--touch", "all", "--cores", "1"], cwd=built, capture_output=True, check=True)
        empty.mkdir()
        (empty / "Snakefile").write_text(EMPTY_SNAKEFILE)
        plan_bench.timed(plan_bench.DRY_RUN, built, REPO / "src")      # the caches, as after any call
        ours, theirs = [], []
        for _ in range(5):     # side by side, alternating
            ours.append(plan_bench.timed(plan_bench.DRY_RUN, built, REPO / "src")[0])
            theirs.append(plan_bench.timed(plan_bench.DRY_RUN, empty, REPO / "src")[0])
    print(f"snakemake -n all, a finished campaign ({len(summary)} outputs present): best of 5 {min(ours):.2f} s, "
          f"median {sorted(ours)[2]:.2f} s; an empty workflow {min(theirs):.2f} s, median {sorted(theirs)[2]:.2f} s")


def main() -> None:
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    try:
        flight(Path(args[0]) if args else buildlog.latest(REPO))
    except FileNotFoundError as e:
        print(f"no build log: {e}")
    if "--no-dry-run" not in sys.argv:
        dry_run_split()
        finished_campaign_dry_run()


if __name__ == "__main__":
    main()
