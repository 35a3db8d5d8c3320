"""The table never reports a stale or unreadable result as done: an edited knob makes a built run
`stale` (with the knob it was built with), an eval.json that is not JSON makes the step fail."""
from __future__ import annotations

import json

import pytest

from martingale.plan import Plan
from martingale.table import TableError, build_table, write_table

from projcopy import proj  # noqa: F401 (fixture)


def built(root, run_id):
    """A done run as the aggregate leaves it: eval.json with the knob and the config hash."""
    plan = Plan.load(root)
    info = plan.index()["runs"][run_id]
    path = root / "results" / run_id / "eval.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"knob": plan.tree.specs[run_id].knob, "config_hash": info["config_hash"],
                                "stages": {"s0": {"brier": 0.2, "ms": 0.1}}}))
    return path


def states(root):
    return {r["run_id"]: r for r in build_table(root)}


def test_a_built_run_whose_knob_was_edited_is_stale_with_the_knob_it_was_built_with(proj):
    built(proj, "A-on-D")
    assert states(proj)["A-on-D"]["state"] == "done"
    run_file = proj / "conf/runs/A-on-D.yaml"
    run_file.write_text(run_file.read_text().replace("stages.s1.reward=A", "stages.s1.reward=B"))
    row = states(proj)["A-on-D"]
    assert row["state"] == "stale" and row["built_knob"] == "stages.s1.reward=A"
    assert row["knob"] == "stages.s1.reward=B"


def test_an_unreadable_eval_json_is_corrupt_and_the_table_step_fails_writing_nothing(proj):
    path = built(proj, "A-on-D")
    path.write_text("{not json")
    row = states(proj)["A-on-D"]
    assert row["state"] == "corrupt" and row["log"] == "results/A-on-D/eval.json"
    with pytest.raises(TableError, match="results/A-on-D/eval.json: unreadable"):
        write_table(proj)
    assert not (proj / "runs.json").exists()


def test_status_explains_a_stale_run_and_a_stale_lock(proj):
    from typer.testing import CliRunner

    from martingale.cli import app
    built(proj, "A-on-D")
    run_file = proj / "conf/runs/A-on-D.yaml"
    run_file.write_text(run_file.read_text().replace("stages.s1.reward=A", "stages.s1.reward=B"))
    (proj / ".snakemake/locks").mkdir(parents=True)
    (proj / ".snakemake/locks/0.input.lock").write_text("x\n")
    res = CliRunner().invoke(app, ["--root", str(proj), "status"], env={"COLUMNS": "300"})
    assert res.exit_code == 0, res.output
    assert "stale: A-on-D was built with 'stages.s1.reward=A'" in res.output
    assert "`snakemake --unlock` is safe" in res.output
