"""The Snakefile over the plan: a dry run builds each distinct stage once; lint is clean."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from martingale.plan import Plan

from projcopy import REPO, proj, write_run  # noqa: F401 (proj: fixture)

SNAKEMAKE = str(Path(sys.executable).with_name("snakemake"))


def snakemake(root, *args):
    return subprocess.run([SNAKEMAKE, *args], cwd=root, capture_output=True, text=True)


def job_counts(output: str) -> dict[str, int]:
    counts = {}
    for line in output.splitlines():
        m = re.fullmatch(r"\s*([A-Za-z_]+)\s+(\d+)\s*", line)
        if m:
            counts[m.group(1)] = int(m.group(2))
    return counts


def test_dry_run_of_all_lists_each_distinct_stage_once(proj):
    res = snakemake(proj, "-n", "--quiet", "rules")
    assert res.returncode == 0, res.stderr
    counts = job_counts(res.stdout + res.stderr)
    plan = Plan.load(proj)
    runs = plan.active_run_ids()
    kinds = [plan.stages[s].kind for s in plan.stages_for(runs)]
    assert counts["pretrain"] == kinds.count("pretrain") == 1
    assert counts["distill"] == kinds.count("distill") == 1
    assert counts["train"] == kinds.count("train")
    assert counts["evaluate"] == kinds.count("eval")
    assert counts["aggregate"] == len(runs) == 15
    assert counts["total"] == len(kinds) + len(runs) + 2  # + runs_table + all
    assert not (proj / "results").exists()


def test_invalid_runs_are_not_built(proj):
    write_run(proj, "twostage-v2-k3.yaml",
              "parent: twostage-v2-D-snap\nknob: seeds=[41,42,43]\ninvalid: \"seed 41 used the wrong split\"\n")
    res = snakemake(proj, "-n", "--quiet", "rules")
    assert res.returncode == 0, res.stderr
    assert job_counts(res.stdout + res.stderr)["aggregate"] == 14


def test_a_bad_run_file_fails_the_parse_with_its_one_line_error(proj):
    write_run(proj, "x.yaml", "parent: base\nknob: stages.s1.lr=fast\n")
    res = snakemake(proj, "-n", "--quiet")
    assert res.returncode != 0
    assert "conf/runs/x.yaml: stages.s1.lr: Value 'fast'" in res.stderr
    assert not (proj / "results").exists()


def test_snakemake_lint_has_no_findings():
    res = snakemake(REPO, "--lint")
    assert res.returncode == 0, res.stdout + res.stderr


STUBS = {
    "__init__.py": "",
    "common.py": '''
import json
from pathlib import Path
from martingale.io import atomic_dir

def make(out_dir, cfg, **upstream):
    if cfg.get("stage", {}).get("reward") == "C":
        raise RuntimeError("stub: reward C is broken")
    with atomic_dir(Path(out_dir)) as tmp:
        (tmp / "model").mkdir()
        (tmp / "stage.json").write_text(json.dumps(
            {"keys": sorted(cfg), "upstream": {k: str(v) for k, v in upstream.items()}}))
''',
    "pretrain.py": "from .common import make\ndef run(cfg, out_dir):\n    make(out_dir, cfg)\n",
    "distill.py": "from .common import make\ndef run(cfg, base_model, out_dir):\n"
                  "    assert (base_model / 'model').is_dir()\n    make(out_dir, cfg, base_model=base_model)\n",
    "train.py": "from .common import make\ndef run(cfg, start_model, judge_model, out_dir):\n"
                "    make(out_dir, cfg, start_model=start_model, judge_model=judge_model)\n",
    "evaluate.py": "from .common import make\ndef run(cfg, model, judge_model, out_dir):\n"
                   "    make(out_dir, cfg, model=model, judge_model=judge_model)\n",
    "aggregate.py": '''
import json
from martingale.io import write_json, write_jsonl, write_yaml

def write_run_results(run_id, cfg, lineage, evals, out_dir):
    write_yaml(out_dir / "config.yaml", cfg)
    write_json(out_dir / "lineage.json", lineage)
    write_jsonl(out_dir / "records.jsonl", [])
    stages = {e["stage"]: {"brier": 0.1, "n": 8, "dir": str(e["dir"])} for e in evals}
    write_json(out_dir / "eval.json", {"run_id": run_id, "stages": stages})
''',
}


def stub_env(root: Path) -> dict:
    import os

    pkg = root / "stubs" / "stubstages"
    pkg.mkdir(parents=True)
    for name, text in STUBS.items():
        (pkg / name).write_text(text)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(root / "stubs"), env.get("PYTHONPATH", "")])
    env["MARTINGALE_STAGES"] = "stubstages"
    env["MARTINGALE_AGGREGATE"] = "stubstages.aggregate"
    return env


def test_running_two_runs_builds_shared_stages_once_and_a_knob_edit_reruns_only_downstream(proj):
    env = stub_env(proj)

    def smk(*args):
        return subprocess.run([SNAKEMAKE, "--cores", "2", *args], cwd=proj, env=env,
                              capture_output=True, text=True)

    targets = ["results/D/eval.json", "results/A-on-D/eval.json"]
    res = smk(*targets)
    assert res.returncode == 0, res.stderr[-3000:]
    store = sorted(p.name for p in (proj / "results/_store").glob("*/*"))
    assert [s.split("-")[0] for s in store].count("distill") == 1
    assert len(store) == 5                          # pretrain, distill, eval s0, train s1, eval s1
    train = next((proj / "results/_store/train").iterdir())
    meta = json.loads((train / "stage.json").read_text())
    assert meta["keys"] == ["elicit", "model", "seed", "stage", "world"]
    assert json.loads((proj / "results/A-on-D/eval.json").read_text())["stages"].keys() == {"s0", "s1"}

    (proj / "conf/runs/A-on-D.yaml").write_text("parent: D\nknob: stages.s1.reward=B\n")
    counts = job_counts((r := smk("-n", *targets, "--quiet", "rules")).stdout + r.stderr)
    assert counts.get("train") == 1 and counts.get("evaluate") == 1 and counts.get("aggregate") == 1
    assert "pretrain" not in counts and "distill" not in counts


def test_a_failing_stage_logs_its_traceback_and_the_table_marks_the_run_crashed(proj):
    env = stub_env(proj)
    (proj / "conf/runs/A-on-D.yaml").write_text("parent: D\nknob: stages.s1.reward=C\n")
    res = subprocess.run([SNAKEMAKE, "--cores", "2", "--keep-going", "results/A-on-D/eval.json"],
                         cwd=proj, env=env, capture_output=True, text=True)
    assert res.returncode != 0
    logs = list((proj / "logs/train").glob("*.log"))
    assert len(logs) == 1 and "RuntimeError: stub: reward C is broken" in logs[0].read_text()
    from martingale.table import build_table

    states = {r["run_id"]: r["state"] for r in build_table(proj)}
    assert states["A-on-D"] == "crashed" and states["D"] == "queued"
