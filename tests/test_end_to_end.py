"""The whole chain, for real, at smoke scale: snakemake builds filter-s2only (pretrain → D → s1 BP
→ s2 martingale → eval of every stage → aggregate) in a copy of the project, then the table.

Smoke scale = the frozen fixture campaign (tests/fixtures/conf) with small sizes appended to
config.yaml; every stage body, the HF loaders, peft and the Snakefile are the real ones. A test
that edits the built project restores what it edits, or works on its own copy: no test depends on
the order the tests run in.
"""
from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import oneseed
import pytest
from typed import typed_slice

from projcopy import SMOKE, make_project

SNAKEMAKE = str(Path(sys.executable).with_name("snakemake"))


pytestmark = pytest.mark.slow

# A W&B key in the environment of every Snakemake call: the mirror runs offline (the default) and
# the key must never reach results, logs, the table or the wandb folder.
SECRET = "wandb-key-NEVER-WRITE-0123456789abcdef"
ENV = {**{k: v for k, v in os.environ.items() if k != "WANDB_MODE"}, "WANDB_API_KEY": SECRET}


def smk(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([SNAKEMAKE, "--cores", "2", *args], cwd=root, capture_output=True, text=True,
                          env=ENV)


@contextmanager
def edited(path: Path, text: str):
    """path holds text inside the block; its bytes and mtime are restored after (even on failure),
    so Snakemake sees no change once the block is left."""
    original, st = path.read_bytes(), path.stat()
    path.write_text(text, encoding="utf-8")
    try:
        yield path
    finally:
        path.write_bytes(original)
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def stated_in_both(built: Path, child_dir: str, parent_dir: str) -> int:
    """Questions (qid) evaluated in both eval folders with a parseable stated P in both."""
    def stated(d: str) -> dict:
        rows = [json.loads(line) for line in (built / d / "records.jsonl").read_text().splitlines()]
        return {r["qid"]: r.get("stated") for r in rows}

    def parsed(p) -> bool:
        return isinstance(p, (int, float)) and not math.isnan(p)

    child, parent = stated(child_dir), stated(parent_dir)
    return sum(1 for q, p in child.items() if q in parent and parsed(p) and parsed(parent[q]))


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    """A smoke-scale project where `snakemake results/filter-s2only/eval.json` has run once."""
    root = make_project(tmp_path_factory.mktemp("e2e") / "proj", config=SMOKE)
    res = smk(root, "results/filter-s2only/eval.json")
    assert res.returncode == 0, res.stderr[-4000:]
    return root


def test_filter_s2only_reports_every_stage_with_the_core_metrics(built):
    ev = json.loads((built / "results/filter-s2only/eval.json").read_text())
    assert ev["stage_order"] == ["s0", "s1", "s2"]
    for block in ev["stages"].values():
        stage = oneseed.metrics(block)
        for key in ("n", "brier", "bss", "mean_p", "share_gt_0.8", "ms", "ms_ci", "rho",
                    "parse_rate", "coherence", "ms_trace"):
            assert key in stage, key
        assert stage["n"] == 48


def test_filter_s2only_shows_its_knobs_paired_effect_against_filter_twostage(built):
    from martingale.plan import Plan
    plan = Plan.load(built)
    dirs = {run: {(e["stage"], e["seed"]): e["dir"] for e in plan.evals(run)}
            for run in ("filter-s2only", "filter-twostage")}
    ev = json.loads((built / "results/filter-s2only/eval.json").read_text())
    assert ev["effect"]["parent"] == "filter-twostage" and ev["effect"]["knob"] == "stages.s1.filter=null"
    for name, stage in ev["stages"].items():
        eff = oneseed.effect(stage["effect"])
        assert eff["n_paired"] == 48 and eff["parent_seed"] == 42, name
        brier, ms = eff["brier"], eff["ms"]
        # ΔBrier pairs the questions where child and parent both stated a parseable P (at smoke
        # scale ~80% of the 48: enough pairs that every number of the battery is defined)
        n_stated = stated_in_both(built, dirs["filter-s2only"][(name, 42)], dirs["filter-twostage"][(name, 42)])
        assert brier["n"] == n_stated <= eff["n_paired"] and n_stated >= 30, name
        if name == "s0":    # D, evaluated once for both: the same eval, so Δ ≡ 0, and no test statistic
            assert eff["same_eval_stage"]
            assert brier["delta"] == 0 and brier["ci"] == [0, 0] and ms["delta"] == 0 and ms["ci"] == [0, 0]
            assert set(brier["undefined"]) == {"t", "p_t", "wilcoxon", "p_wilcoxon"}
            assert all("every paired difference is 0" in why for why in brier["undefined"].values())
            assert set(ms["undefined"]) == {"p_perm"}
        else:               # the knob changes s1 (and so s2): distinct evals, every number defined
            assert not eff["same_eval_stage"]
            assert brier["undefined"] == {} and ms["undefined"] == {}, name
            for block, keys in ((brier, ("child", "parent", "delta", "t", "p_t", "wilcoxon", "p_wilcoxon",
                                         "share_child_wins", "share_ties")), (ms, ("child", "parent", "delta", "p_perm"))):
                assert all(isinstance(block[k], (int, float)) for k in keys), (name, block)
            for block in (brier, ms):
                assert block["ci"][0] <= block["delta"] <= block["ci"][1], (name, block)
            assert brier["delta"] != 0
    assert set(ev["stages"]["s2"]["counts"]) >= {"beats_parent", "beats_start", "beats_constant"}


def test_every_plot_of_the_run_exists_as_a_png(built):
    from martingale.records.plots import PLOTS
    for name in PLOTS:
        data = (built / "results/filter-s2only/plots" / f"{name}.png").read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000, name


def test_snakemake_report_includes_the_plots_and_the_runs_table(built):
    assert smk(built, "runs.json").returncode == 0   # a report shows results; it builds none
    res = smk(built, "--report", "report.html", "results/filter-s2only/eval.json", "runs.json")
    assert res.returncode == 0, res.stderr[-3000:]
    html = (built / "report.html").read_text(encoding="utf-8", errors="replace")
    for name in ("prior_posterior.png", "effect_forest.png", "reliability.png", "runs.html"):
        assert name in html, name


def test_run_folder_holds_config_lineage_and_per_question_records(built):
    run = built / "results/filter-s2only"
    lineage = json.loads((run / "lineage.json").read_text())
    assert [r["run_id"] for r in lineage][0] == "base" and lineage[-1]["run_id"] == "filter-s2only"
    assert "stages:" in (run / "config.yaml").read_text()
    rows = [json.loads(line) for line in (run / "records.jsonl").read_text().splitlines()]
    assert len(rows) == 3 * 48
    assert {"qid", "y", "prior", "posterior", "stage", "seed"} <= rows[0].keys()


def test_stage_jobs_run_on_their_one_thread_and_two_run_at_once_on_two_cores(built):
    # the tiny model asks for 1 CPU (2 for pretrain, alone at the start): with --cores 2, two stage
    # jobs ran side by side
    from martingale.jobs import buildlog
    stage_logs = [p for p in (built / "logs").glob("*/*.log") if p.parent.name != "aggregate"]
    assert {p.parent.name for p in stage_logs} >= {"pretrain", "distill", "train", "evaluate"}
    for log in stage_logs:
        n = 2 if log.parent.name == "pretrain" else 1
        assert f"job threads: {n} (torch {n})" in log.read_text(), log
    build = next(t for p in sorted((built / ".snakemake" / "log").glob("*.snakemake.log"))
                 if "rule pretrain:" in (t := p.read_text()))
    jobs = [j for j in buildlog.jobs(build) if j.rule not in ("aggregate", "runs_table")]
    assert buildlog.in_flight(jobs)[1] == 2


def test_second_call_does_nothing(built):
    res = smk(built, "-n", "results/filter-s2only/eval.json")
    assert res.returncode == 0
    assert "Nothing to be done" in res.stdout + res.stderr


def test_a_sibling_run_reuses_the_shared_prefix(built):
    # judge-samemode-BP shares pretrain, D and the unfiltered BP stage with filter-s2only.
    res = smk(built, "-n", "results/judge-samemode-BP/eval.json", "--quiet", "rules")
    out = res.stdout + res.stderr
    assert res.returncode == 0, out
    assert "pretrain" not in out and "distill" not in out
    assert "train" in out  # only its unfiltered s2


def test_a_knob_edit_reruns_exactly_the_stages_it_affects(built):
    # filter-twostage's knob feeds filter-s2only's s2 only: s1 (BP, unfiltered) and D stay cached.
    path = built / "conf/runs/filter-twostage.yaml"
    with edited(path, path.read_text().replace("stages.s2.filter=top-quartile", "stages.s2.filter=top-half")):
        res = smk(built, "-n", "results/filter-s2only/eval.json", "--quiet", "rules")
    counts = dict(re.findall(r"^(\w+)\s+(\d+)$", res.stdout + res.stderr, re.M))
    # filter-s2only's s2, and the parent's own s2: the aggregate pairs the run with its parent.
    assert counts == {"aggregate": "1", "evaluate": "2", "total": "5", "train": "2"}, res.stdout


def test_a_failing_stage_logs_its_error_and_the_table_marks_the_run_crashed(built):
    # a valid knob whose s2 cannot run: more questions per batch than the filtered s2 has at smoke scale
    from martingale.plan import Plan
    run_file = built / "conf/runs/big-batch.yaml"
    run_file.write_text("parent: filter-s2only\nknob: stages.s2.batch_questions=1000\n")
    try:
        plan = Plan.load(built)
        s2 = next(r.model_stage for r in plan.run_stages("big-batch") if r.stage == "s2")
        res = smk(built, "--keep-going", "results/big-batch/eval.json")
        assert res.returncode != 0
        log = (built / "logs" / plan.stages[s2].kind / f"{s2}.log").read_text()
        assert "no training step ran" in log and "StageError" in log
        assert not (built / "results/big-batch").exists()
        from martingale.table import build_table
        states = {r["run_id"]: r["state"] for r in build_table(built)}
        assert states["big-batch"] == "crashed" and states["filter-s2only"] == "done"
    finally:
        run_file.unlink()


TABLE_FILES = ("runs.json", "RUNS.md", "runs.html")


def test_snakemake_runs_json_writes_the_three_table_files_and_regenerates_byte_identical(built):
    from martingale.table import schema_errors
    assert smk(built, "runs.json").returncode == 0
    first = {name: (built / name).read_bytes() for name in TABLE_FILES}
    rows = {r["run_id"]: r for r in json.loads(first["runs.json"])}
    assert schema_errors(list(rows.values())) == []
    assert rows["filter-s2only"]["state"] == "done" and rows["twostage-v2-k3"]["state"] == "queued"  # never built here
    assert rows["filter-s2only"]["landed"] and rows["filter-s2only"]["replicates"] == 1
    ev = json.loads((built / "results/filter-s2only/eval.json").read_text())
    assert rows["filter-s2only"]["effect"] == ev["effect"]["headline"]   # null if no stage has a ΔBrier
    assert "| filter-s2only | filter-twostage | stages.s1.filter=null | tiny | done | s2 |" in first["RUNS.md"].decode()
    assert b'"run_id":"filter-s2only"' in first["runs.html"]
    base = built / "conf/runs/base.yaml"           # a run file edited without changing any row:
    with edited(base, base.read_text() + "# a comment\n"):   # the step reruns, writes the same bytes
        res = smk(built, "runs.json")
    assert res.returncode == 0 and "Updated input files: conf/runs/base.yaml" in res.stdout + res.stderr
    subprocess.run([str(Path(sys.executable).with_name("martingale")), "--root", str(built), "table"],
                   check=True, capture_output=True)
    assert {name: (built / name).read_bytes() for name in TABLE_FILES} == first


def test_every_built_stage_and_the_run_are_mirrored_to_wandb_offline(built):
    from martingale.store import read_index
    index = read_index(built)
    assert index is not None
    chain = index.runs["filter-s2only"].chain
    folders = {p.name.rsplit("-", 2)[-2] + "-" + p.name.rsplit("-", 1)[-1]: p
               for p in (built / "wandb").glob("offline-run-*")}
    for sid in chain:
        data = b"".join(f.read_bytes() for f in folders[sid].glob("*.wandb"))
        stage = index.stages[sid]
        assert stage.owner.encode() in data and stage.job_type.encode() in data, sid
    agg = next(p for p in (built / "wandb").glob("offline-run-*-filter-s2only-aggregate"))
    assert b"aggregate" in b"".join(f.read_bytes() for f in agg.glob("*.wandb"))


def test_the_wandb_key_in_the_environment_is_written_nowhere(built):
    leaks = [p for top in ("results", "logs", "wandb", ".snakemake") for p in (built / top).rglob("*")
             if p.is_file() and not p.is_symlink() and SECRET.encode() in p.read_bytes()]
    leaks += [built / n for n in TABLE_FILES if (built / n).exists() and SECRET.encode() in (built / n).read_bytes()]
    assert leaks == []


def test_same_seed_gives_byte_identical_records(built, tmp_path):
    from martingale.plan import Plan
    from martingale.stages.body import evaluate, train
    from martingale.store import stage_dir
    from martingale.store.files import read_json
    plan = Plan.load(built)
    ev = next(e for e in plan.evals("filter-s2only") if e["stage"] == "s2")
    s2 = plan.stages[ev["model_stage"]]
    cfg = plan.stages[ev["eval_stage"]].cfg
    inputs = plan.stages[ev["eval_stage"]].inputs
    evaluate.run(typed_slice("evaluate", cfg), built / stage_dir(inputs["model"]), built / stage_dir(inputs["judge_model"]),
                 tmp_path / "again")
    assert (tmp_path / "again/records.jsonl").read_bytes() == (built / ev["dir"] / "records.jsonl").read_bytes()
    # ... and retraining the stage from the same start, on its own thread count as its job did
    # (it is in the stage's id), gives the same weights.
    import torch
    before = torch.get_num_threads()
    torch.set_num_threads(s2.cfg["model"]["threads"])
    try:
        train.run(typed_slice("train", s2.cfg), built / stage_dir(s2.inputs["start_model"]), built / stage_dir(s2.inputs["judge_model"]),
                  tmp_path / "s2")
    finally:
        torch.set_num_threads(before)
    assert (tmp_path / "s2/model/model.safetensors").read_bytes() == \
        (built / stage_dir(s2.id) / "model/model.safetensors").read_bytes()
    assert read_json(tmp_path / "s2/stage.json")["steps"] > 0


def test_vanished_results_fail_the_table_step_until_the_run_is_marked_invalid(built, tmp_path):
    # on a copy of the built project (mtimes kept): deleting a run's results leaves `built` whole
    proj = Path(shutil.copytree(built, tmp_path / "proj", symlinks=True, ignore=shutil.ignore_patterns("wandb")))
    assert smk(proj, "runs.json").returncode == 0
    before = {name: (proj / name).read_bytes() for name in TABLE_FILES}
    (proj / "results/filter-s2only/eval.json").unlink()
    res = smk(proj, "runs.json")
    assert res.returncode != 0
    log = (proj / "logs/runs_table.log").read_text()
    assert "results/filter-s2only/eval.json vanished: mark the run `invalid" in log
    assert {name: (proj / name).read_bytes() for name in TABLE_FILES} == before
    run_file = proj / "conf/runs/filter-s2only.yaml"
    run_file.write_text(run_file.read_text() + 'invalid: "eval.json lost in a disk clean-up"\n')
    assert smk(proj, "runs.json").returncode == 0
    rows = {r["run_id"]: r for r in json.loads((proj / "runs.json").read_text())}
    assert rows["filter-s2only"]["state"] == "invalid"
    excluded = (proj / "RUNS.md").read_text().split("## Excluded")[1]
    assert "| filter-s2only | filter-twostage | stages.s1.filter=null |" in excluded
    assert "eval.json lost in a disk clean-up |" in excluded


def test_one_call_builds_two_runs_and_the_table_shows_both_done(built):
    """`snakemake A B runs.json` regenerates the table after both aggregates, not before them."""
    res = smk(built, "results/A-on-D/eval.json", "results/D/eval.json", "runs.json")
    assert res.returncode == 0, res.stderr[-4000:]
    rows = {r["run_id"]: r for r in json.loads((built / "runs.json").read_text())}
    assert rows["A-on-D"]["state"] == "done" and rows["D"]["state"] == "done"


def test_a_knob_that_adds_a_stage_is_headlined_by_its_stage_against_the_parents_final(built):
    """A-on-D adds s1 (reward A) to D: the headline is A-on-D's s1 against D's s0, paired."""
    if not (built / "results/A-on-D/eval.json").exists():
        assert smk(built, "results/A-on-D/eval.json").returncode == 0
    ev = json.loads((built / "results/A-on-D/eval.json").read_text())
    final = oneseed.effect(ev["effect"]["final"])
    assert ev["effect"]["compares"] == "s1 vs parent s0" and not final["same_eval_stage"]
    assert final["n_paired"] == 48 and "effect" not in ev["stages"]["s1"]
    assert final["undefined"] == {} and final["brier"]["undefined"] == {} and final["ms"]["undefined"] == {}
    assert final["brier"]["n"] >= 30
    head = ev["effect"]["headline"]
    assert head is not None, "a defined final effect is the headline"
    assert head["compares"] == "s1 vs parent s0" and head["stage"] == "s1" and head["parent_stage"] == "s0"
    assert (head["brier_delta"], head["brier_ci"], head["p_t"]) == \
        (final["brier"]["delta"], final["brier"]["ci"], final["brier"]["p_t"])
    assert (head["ms_delta"], head["ms_ci"]) == (final["ms"]["delta"], final["ms"]["ci"])
    assert head["brier_ci"][0] <= head["brier_delta"] <= head["brier_ci"][1]


def test_base_asked_from_its_exported_questions_file_measures_exactly_what_base_measures(built, tmp_path):
    """world=jsonl end to end: `martingale questions export-synthetic` writes base's world as a
    questions file, `base-jsonl` (knob world=jsonl) reads it back; same pretrain, same questions,
    same prompts, so the same answers: a nil paired effect, stated P for stated P."""
    root = tmp_path / "proj"
    shutil.copytree(built, root, symlinks=True)
    martingale = str(Path(sys.executable).with_name("martingale"))
    res = subprocess.run([martingale, "--root", str(root), "questions", "export-synthetic"], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    (root / "conf/runs/base-jsonl.yaml").write_text("parent: base\nknob: world=jsonl\n")
    res = smk(root, "results/base-jsonl/eval.json")
    assert res.returncode == 0, res.stderr[-4000:]
    assert "pretrain" not in re.findall(r"^rule (\w+):", res.stdout + res.stderr, re.M)   # base's pretrain reused
    final = oneseed.effect(json.loads((root / "results/base-jsonl/eval.json").read_text())["effect"]["final"])
    assert final["n_paired"] == 48
    lo, hi = final["brier"]["ci"]
    assert lo <= 0 <= hi
    from martingale.plan import Plan
    from martingale.store import stage_dir
    plan = Plan.load(root)
    rows = {r: [json.loads(x) for x in (root / stage_dir(plan.run_stages(r)[0].eval_stage) / "records.jsonl")
                .read_text().splitlines()] for r in ("base", "base-jsonl")}
    assert [(x["qid"], x["stated"], x["prior"]) for x in rows["base"]] == \
        [(x["qid"], x["stated"], x["prior"]) for x in rows["base-jsonl"]]
