"""The table never reports a stale or unreadable result as done: an edited knob makes a built run
`stale` (with the knob it was built with), an eval.json that is not JSON makes the step fail."""
from __future__ import annotations

import json

import pytest

from martingale.table import TableError, build_table, write_table

from projcopy import proj, write_eval  # noqa: F401 (fixture)


def built(root, run_id):
    """A done run as the aggregate leaves it: eval.json with the knob and the config hash."""
    return write_eval(root, run_id, {"s0": {"brier": 0.2, "ms": 0.1}})


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


def test_an_eval_json_of_the_old_bare_shape_is_refused_in_one_line_naming_it(proj):
    """A metric written as one seed's bare value (before eval.json had one shape whatever the seed
    count) is not read half-way: the row is corrupt and the table step fails naming the file and key."""
    path = built(proj, "A-on-D")
    doc = json.loads(path.read_text())
    doc["stages"]["s0"]["brier"] = 0.2
    path.write_text(json.dumps(doc))
    assert states(proj)["A-on-D"]["state"] == "corrupt"
    with pytest.raises(TableError) as e:
        write_table(proj)
    assert str(e.value).startswith("results/A-on-D/eval.json: stages/s0/brier: ") and "\n" not in str(e.value)
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
