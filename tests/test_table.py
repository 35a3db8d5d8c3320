"""runs.json: one row per run, the same bytes each time, and no row ever dropped silently."""
from __future__ import annotations

import json

import pytest

from martingale.plan import Plan, stage_dir
from martingale.table import TableError, build_table, write_table

from projcopy import proj, write_run  # noqa: F401 (proj: fixture)


def finish(root, run_id, stages=None):
    stages = stages or {"s0": {"brier": 0.2, "ms": 0.1}, "s1": {"brier": 0.15, "ms": 0.02,
                                                               "ms_ci": [-0.01, 0.05], "bss": 0.3,
                                                               "n": 512, "other": 1}}
    path = root / "results" / run_id / "eval.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"stages": stages}))
    return path


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
    assert row["metrics"] == {"brier": 0.15, "ms": 0.02, "ms_ci": [-0.01, 0.05], "bss": 0.3, "n": 512}


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
    (proj / stage_dir(sid)).mkdir(parents=True)       # the stage was rebuilt since
    assert {r["run_id"]: r for r in build_table(proj)}["A-on-D"]["state"] == "queued"


def test_vanished_results_of_a_done_run_raise_naming_the_fix(proj):
    finish(proj, "A-on-D")
    write_table(proj)
    before = (proj / "runs.json").read_bytes()
    (proj / "results/A-on-D/eval.json").unlink()
    with pytest.raises(TableError, match=r"results/A-on-D/eval.json vanished: mark the run `invalid"):
        write_table(proj)
    assert (proj / "runs.json").read_bytes() == before


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
