"""runs.json: one row per run, the same bytes each time, and no row ever dropped silently."""
from __future__ import annotations

import json
import subprocess
import time
from contextlib import contextmanager

import pytest

from martingale.plan import Plan
from martingale.store import manifest, stage_dir
from martingale.store.locks import live_snakemakes, stale_lock
from martingale.table import TableError, build_table, schema_errors, write_table

from projcopy import proj, write_eval, write_run  # noqa: F401 (proj: fixture)


def finish(root, run_id, stages=None):
    stages = stages or {"s0": {"brier": 0.2, "ms": 0.1}, "s1": {"brier": 0.15, "ms": 0.02,
                                                               "ms_ci": [-0.01, 0.05], "bss": 0.3,
                                                               "n": 512, "other": 1}}
    return write_eval(root, run_id, stages)


def rows(root):
    return {r["run_id"]: r for r in json.loads((root / "runs.json").read_text())}


def test_table_has_one_row_per_run_sorted_by_run_id(proj):
    table = build_table(proj)
    assert [r["run_id"] for r in table] == sorted(p.stem for p in (proj / "conf/runs").glob("*.yaml"))
    assert {r["state"] for r in table} == {"queued"}


def test_table_is_byte_identical_and_untouched_on_regeneration(proj):
    finish(proj, "A-on-D")
    path = write_table(proj)
    first, mtime = path.read_bytes(), path.stat().st_mtime_ns
    write_table(proj)
    assert path.read_bytes() == first and path.stat().st_mtime_ns == mtime


def test_done_run_shows_the_last_stage_headline_metrics(proj):
    finish(proj, "A-on-D")
    write_table(proj)
    row = rows(proj)["A-on-D"]
    assert row["state"] == "done" and row["stage"] == "s1"
    def one(value):         # a metric of one seed: its value, the mean beside it only for a number
        return {"mean": None if isinstance(value, list) else value, "sd": None, "per_seed": [value]}
    assert row["metrics"] == {"brier": one(0.15), "ms": one(0.02), "ms_ci": one([-0.01, 0.05]), "bss": one(0.3),
                              "n": one(512)}
    assert row["replicates"] == 1 and row["artifacts"]["eval"] == "results/A-on-D/eval.json"


def test_run_marked_invalid_keeps_its_row_with_the_bug(proj):
    write_run(proj, "A-on-D.yaml", "parent: D\nknob: stages.s1.reward=A\ninvalid: \"judge read the wrong cut\"\n")
    write_table(proj)
    row = rows(proj)["A-on-D"]
    assert row["state"] == "invalid" and row["invalid"] == "judge read the wrong cut"


def test_stage_log_with_a_traceback_and_no_output_marks_the_run_crashed(proj):
    plan = Plan.load(proj)
    plan.write_index()
    sid = plan.run_stages("A-on-D")[1].model_stage
    log = proj / "logs" / "train" / f"{sid}.log"
    log.parent.mkdir(parents=True)
    log.write_text("Traceback (most recent call last):\n  ...\nRuntimeError: boom\n")
    table = {r["run_id"]: r for r in build_table(proj)}
    assert table["A-on-D"]["state"] == "crashed"
    assert table["D"]["state"] == "queued"          # D does not need that stage
    (proj / stage_dir(sid)).mkdir(parents=True)       # the stage was rebuilt since (a finished stage
    manifest.write(proj / stage_dir(sid))             # is a folder with its manifest)
    assert {r["run_id"]: r for r in build_table(proj)}["A-on-D"]["state"] == "queued"


def test_vanished_results_of_a_done_run_raise_naming_the_fix(proj):
    finish(proj, "A-on-D")
    write_table(proj)
    before = (proj / "runs.json").read_bytes()
    (proj / "results/A-on-D/eval.json").unlink()
    others = {n: (proj / n).read_bytes() for n in ("RUNS.md", "runs.html")}
    with pytest.raises(TableError, match=r"results/A-on-D/eval.json vanished: mark the run `invalid"):
        write_table(proj)
    assert (proj / "runs.json").read_bytes() == before
    assert {n: (proj / n).read_bytes() for n in others} == others   # nothing half-written


def test_vanished_results_are_fine_once_the_run_is_marked_invalid(proj):
    finish(proj, "A-on-D")
    write_table(proj)
    (proj / "results/A-on-D/eval.json").unlink()
    write_run(proj, "A-on-D.yaml", "parent: D\nknob: stages.s1.reward=A\ninvalid: \"bug 7\"\n")
    write_table(proj)
    assert rows(proj)["A-on-D"]["state"] == "invalid"


def test_vanished_run_file_raises_instead_of_dropping_its_row(proj):
    write_table(proj)
    (proj / "conf/runs/filter-s2only.yaml").unlink()
    with pytest.raises(TableError, match=r"conf/runs/filter-s2only.yaml vanished"):
        write_table(proj)


# ---------------------------------------------------------------- what a row says

def test_every_row_validates_against_the_runs_json_schema(proj):
    finish(proj, "A-on-D")
    write_run(proj, "D.yaml", "parent: base\nknob: start=D\ninvalid: \"wrong split\"\n")
    table = build_table(proj)
    assert schema_errors(table) == []
    assert {r["state"] for r in table} == {"done", "queued", "invalid"}


def test_the_schema_rejects_an_unknown_state_and_a_missing_key(proj):
    table = build_table(proj)
    bad = [dict(table[0], state="finished")] + [{k: v for k, v in table[1].items() if k != "config_hash"}]
    errors = schema_errors(bad)
    assert any(e.startswith("0/state") for e in errors)
    assert any("'config_hash' is a required property" in e for e in errors)


def test_a_row_carries_model_start_stage_chain_seeds_config_hash_and_wandb_name(proj):
    row = {r["run_id"]: r for r in build_table(proj)}["filter-s2only"]
    assert (row["model"], row["start"], row["seeds"]) == ("tiny", "D", [42])
    assert row["stage_chain"] == ["pretrain", "distill:D", "s1:BP", "s2:A"]
    assert row["config_hash"].startswith("sha256:") and len(row["config_hash"]) == 71
    assert row["wandb"]["name"] == "filter-s2only"
    assert row["wandb"]["group"].startswith("base/D/") and row["wandb"]["group"].endswith("/filter-s2only")


def test_the_config_hash_follows_the_resolved_config(proj):
    before = {r["run_id"]: r["config_hash"] for r in build_table(proj)}
    write_run(proj, "A-on-D.yaml", "parent: D\nknob: stages.s1.reward=B\n")
    after = {r["run_id"]: r["config_hash"] for r in build_table(proj)}
    assert after["A-on-D"] != before["A-on-D"] and after["D"] == before["D"]


def stage_being_written(proj) -> str:
    """A-on-D's s1 train stage with its files.atomic_dir temp folder and the start of its job log; its id."""
    sid = Plan.load(proj).run_stages("A-on-D")[1].model_stage
    tmp = proj / stage_dir(sid)
    tmp.parent.mkdir(parents=True)
    (tmp.parent / f".{sid}.x1y2.tmp").mkdir()
    log = proj / "logs" / "train" / f"{sid}.log"
    log.parent.mkdir(parents=True)
    log.write_text("10:00:00 INFO martingale: step 3/30 loss 2.1\n")     # no failure (yet)
    return sid


def lock(proj) -> None:
    (proj / ".snakemake/locks").mkdir(parents=True)
    (proj / ".snakemake/locks/0.output.lock").write_text("")


@contextmanager
def live_snakemake(proj):
    """A live process named snakemake working in proj (what martingale.store.locks looks for)."""
    proc = subprocess.Popen(["bash", "-c", "exec -a snakemake sleep 60"], cwd=proj)
    try:
        for _ in range(100):
            if live_snakemakes(proj):
                break
            time.sleep(0.05)
        assert live_snakemakes(proj) == [proc.pid]
        yield proc
    finally:
        proc.kill()
        proc.wait()


def test_a_stage_being_written_under_a_running_snakemake_marks_the_run_running(proj):
    stage_being_written(proj)
    assert {r["run_id"]: r for r in build_table(proj)}["A-on-D"]["state"] == "queued"   # no lock
    lock(proj)
    with live_snakemake(proj):
        row = {r["run_id"]: r for r in build_table(proj)}["A-on-D"]
        assert row["state"] == "running" and row["log"] is None
    # the same files once that Snakemake is gone (killed: its lock stays): no longer running
    assert {r["run_id"]: r for r in build_table(proj)}["A-on-D"]["state"] == "crashed"


def test_running_outranks_an_earlier_attempts_failure_only_while_snakemake_lives(proj):
    sid = stage_being_written(proj)
    with open(proj / "logs" / "train" / f"{sid}.log", "a") as f:       # a retry appends to the log
        f.write("10:01:00 ERROR martingale: stage failed\nTraceback (most recent call last):\n")
    lock(proj)
    with live_snakemake(proj):
        assert {r["run_id"]: r for r in build_table(proj)}["A-on-D"]["state"] == "running"
    row = {r["run_id"]: r for r in build_table(proj)}["A-on-D"]
    assert row["state"] == "crashed" and row["log"] == f"logs/train/{sid}.log"


def test_a_stale_lock_with_a_leftover_temp_folder_marks_the_run_crashed_not_running(proj):
    """kill -9 of a build: the lock and the stage's temp folder stay, its job log is cut off
    mid-run (no failure written); no Snakemake runs. The row is crashed, naming that log."""
    sid = stage_being_written(proj)
    lock(proj)
    assert stale_lock(proj)
    table = {r["run_id"]: r for r in build_table(proj)}
    assert table["A-on-D"]["state"] == "crashed" and table["A-on-D"]["log"] == f"logs/train/{sid}.log"
    assert table["D"]["state"] == "queued"                # D does not need that stage
    tmp = next((proj / stage_dir(sid)).parent.glob(f".{sid}.*.tmp"))
    tmp.rmdir()                                            # killed mid-training: only the log shows it
    row = {r["run_id"]: r for r in build_table(proj)}["A-on-D"]
    assert row["state"] == "crashed" and row["log"] == f"logs/train/{sid}.log"
    tmp.mkdir()
    (proj / "logs" / "train" / f"{sid}.log").unlink()      # a job killed before its log was opened
    row = {r["run_id"]: r for r in build_table(proj)}["A-on-D"]
    assert row["state"] == "crashed" and row["log"] is None
    (proj / stage_dir(sid)).mkdir(parents=True)            # rebuilt since: the leftover is not read
    manifest.write(proj / stage_dir(sid))
    assert {r["run_id"]: r for r in build_table(proj)}["A-on-D"]["state"] == "queued"


def test_a_killed_aggregate_under_a_stale_lock_marks_the_run_crashed(proj):
    plan = Plan.load(proj)
    plan.write_index()
    log = proj / "logs" / "aggregate" / "D.log"
    log.parent.mkdir(parents=True)
    log.write_text("10:00:00 INFO martingale: aggregate D\n")          # cut off: no eval.json
    assert {r["run_id"]: r for r in build_table(proj)}["D"]["state"] == "queued"    # no lock
    lock(proj)
    row = {r["run_id"]: r for r in build_table(proj)}["D"]
    assert row["state"] == "crashed" and row["log"] == "logs/aggregate/D.log"


def killed_train_stage(proj) -> str:
    """A-on-D's s1 train stage, killed by SIGTERM: its own log says so (martingale.jobs.smk). Its id."""
    sid = Plan.load(proj).run_stages("A-on-D")[1].model_stage
    log = proj / "logs" / "train" / f"{sid}.log"
    log.parent.mkdir(parents=True)
    log.write_text("10:00:00 ERROR martingale: stage failed\nmartingale.smk.Killed: killed by signal SIGTERM\n")
    return sid


def test_a_crashed_row_names_the_failed_job_log(proj):
    sid = killed_train_stage(proj)
    row = {r["run_id"]: r for r in build_table(proj)}["A-on-D"]
    assert row["state"] == "crashed" and row["log"] == f"logs/train/{sid}.log"


def test_a_cancelled_cluster_job_marks_the_run_crashed_naming_the_newest_job_log(proj):
    sid = killed_train_stage(proj)
    jobs = proj / ".snakemake/slurm_logs/rule_train" / sid
    jobs.mkdir(parents=True)
    for job in (9, 17):           # the first attempt and its retry, both scancel'd
        (jobs / f"{job}.log").write_text(f"slurmstepd: error: *** JOB {job} ON node CANCELLED AT 2026-11-30 ***\n")
    row = {r["run_id"]: r for r in build_table(proj)}["A-on-D"]
    assert row["state"] == "crashed" and row["log"] == f".snakemake/slurm_logs/rule_train/{sid}/17.log"


# ---------------------------------------------------------------- RUNS.md and runs.html

def land(root, run_id, when):
    (root / "results" / run_id / "landed.json").write_text(json.dumps({"landed": when}))


def test_runs_md_has_one_strict_line_per_run_newest_landing_first(proj):
    finish(proj, "A-on-D"), land(proj, "A-on-D", "2026-11-30T10:00:00Z")
    finish(proj, "D"), land(proj, "D", "2026-11-30T09:00:00Z")
    write_table(proj)
    md = (proj / "RUNS.md").read_text()
    table = md.split("## Master runs table")[1].split("## Claims")[0]
    lines = [ln for ln in table.splitlines() if ln.startswith("| ") and not ln.startswith("| run_id")]
    ids = [ln.split("|")[1].strip() for ln in lines]
    assert sorted(ids) == sorted(r["run_id"] for r in build_table(proj))
    assert ids.index("A-on-D") == len(ids) - 2 and ids[-1] == "D"   # landed newest first, after the unlanded
    assert all(ln.count("|") == 12 for ln in lines)                  # one strict line: 11 cells each


def test_marking_a_run_invalid_moves_it_to_excluded_with_its_bug(proj):
    finish(proj, "A-on-D")
    write_table(proj)
    write_run(proj, "A-on-D.yaml", "parent: D\nknob: stages.s1.reward=A\ninvalid: \"judge | read the wrong cut\"\n")
    write_table(proj)
    md = (proj / "RUNS.md").read_text()
    master, excluded = md.split("## Excluded")
    assert "\n| A-on-D |" not in master.split("## Claims")[0]
    assert "| A-on-D | D | stages.s1.reward=A | – | judge \\| read the wrong cut |" in excluded


def test_claims_section_maps_each_claim_to_its_supporting_runs_with_headline_numbers(proj):
    finish(proj, "A-on-D")
    write_table(proj)
    md = (proj / "RUNS.md").read_text()
    c1 = md.split("### C1")[1].split("###")[0]
    assert "training improves a degenerate model" in c1.splitlines()[0]
    assert "**A-on-D** (stages.s1.reward=A) — s1: Brier 0.1500, MS +0.020 [-0.010, +0.050]" in c1
    assert "**filter-s2only** (stages.s1.filter=null) — queued" in c1
    assert "No supporting run yet." in md.split("### C3")[1]


def test_runs_html_embeds_the_rows_safely_and_regenerates_byte_identical(proj):
    write_run(proj, "A-on-D.yaml", "parent: D\nknob: stages.s1.reward=A\nquestion: \"</script><b>x\"\n")
    write_table(proj)
    html = (proj / "runs.html").read_text()
    assert html.count("</script>") == 4 and "<\\/script><b>x" in html   # runs, claims, columns, the code
    first = {n: (proj / n).read_bytes() for n in ("runs.json", "RUNS.md", "runs.html")}
    write_table(proj)
    assert {n: (proj / n).read_bytes() for n in first} == first
