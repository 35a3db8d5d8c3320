"""`martingale questions import forecastbench`: ForecastBench's question and resolution sets (small
raw files shaped like theirs, traps included) joined into one questions file by the shipped
sample's rules; one line per problem and nothing written on a failure; the same bytes on a rerun."""
from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from martingale.cli import app
from martingale.world.questions import load_questions

runner = CliRunner()


def question(qid, source="manifold", **over):
    q = {"id": qid, "source": source, "question": f"Will {qid} happen?", "resolution_criteria": "See the market.",
         "background": "Some context.", "market_info_open_datetime": "2024-01-01T00:00:00+00:00",
         "market_info_close_datetime": "2024-06-01T00:00:00+00:00", "market_info_resolution_criteria": "N/A",
         "url": f"https://example.org/{qid}", "freeze_datetime": "2024-03-01T00:00:00+00:00",
         "freeze_datetime_value": "0.25", "freeze_datetime_value_explanation": "The market value.",
         "source_intro": "A prediction market.", "resolution_dates": "N/A"}
    return {**q, **over}


def resolution(qid, source="manifold", resolved_to=1.0, resolved=True, date="2024-06-02"):
    return {"id": qid, "source": source, "direction": None, "resolution_date": date, "resolved_to": resolved_to,
            "resolved": resolved}


def write(path: Path, obj) -> Path:
    path.write_text(json.dumps(obj), encoding="utf-8")
    return path


def sets(tmp_path: Path, questions: list, resolutions: list, due="2024-03-10", name="a") -> list[Path]:
    return [write(tmp_path / f"{name}-questions.json", {"forecast_due_date": due, "question_set": f"{name}.json",
                                                         "questions": questions}),
            write(tmp_path / f"{name}-resolutions.json", {"forecast_due_date": due, "question_set": f"{name}.json",
                                                           "resolutions": resolutions})]


def run(root: Path, *files: Path, out="data/q.jsonl"):
    return runner.invoke(app, ["--root", str(root), "questions", "import", "forecastbench", *map(str, files), "-o", out])


def rows(root: Path, out="data/q.jsonl") -> list[dict]:
    return [json.loads(x) for x in (root / out).read_text().splitlines()]


def test_market_questions_resolved_0_or_1_are_joined_with_their_resolution_and_crowd_value(tmp_path):
    files = sets(tmp_path, [question("q1"), question("m2", "metaculus", market_info_resolution_criteria="Yes if X.")],
                 [resolution("q1"), resolution("m2", "metaculus", 0.0)])
    res = run(tmp_path, *files)
    assert res.exit_code == 0, res.output
    got = {r["id"]: r for r in rows(tmp_path)}
    assert got["manifold-q1"]["y"] == 1 and got["metaculus-m2"]["y"] == 0
    assert got["manifold-q1"]["crowd_p"] == 0.25 and got["manifold-q1"]["freeze_datetime_value"] == "0.25"
    assert got["metaculus-m2"]["resolution_criteria"] == "Yes if X."          # the market's own criteria
    assert got["manifold-q1"]["resolution_criteria"] == "See the market."     # N/A: the pointer
    assert got["manifold-q1"]["open_date"] == "2024-01-01" and got["manifold-q1"]["resolve_date"] == "2024-06-02"
    assert len(load_questions(tmp_path / "data/q.jsonl")) == 2                  # a valid questions file
    assert "2 questions (1 yes" in res.output


def test_an_unresolved_market_row_whose_resolved_to_is_its_current_value_is_left_out(tmp_path):
    files = sets(tmp_path, [question("q1"), question("q2")],
                 [resolution("q1"), resolution("q2", resolved_to=0.75, resolved=False)])
    res = run(tmp_path, *files)
    assert [r["id"] for r in rows(tmp_path)] == ["manifold-q1"] and "1 unresolved" in res.output


def test_combination_and_dataset_rows_are_left_out_and_counted(tmp_path):
    combo = question(["q1", "q2"], direction=[1, -1])
    fred = question("DAAA", "fred", question="Will X have increased by {resolution_date}?",
                    resolution_dates=["2024-06-01", "2024-07-01"])
    files = sets(tmp_path, [question("q1"), combo, fred],
                 [resolution("q1"), {**resolution(["q1", "q2"]), "direction": [1, -1]},
                  resolution("DAAA", "fred", 1.0, date="2024-06-01"), resolution("DAAA", "fred", 0.0, date="2024-07-01")])
    res = run(tmp_path, *files)
    assert [r["id"] for r in rows(tmp_path)] == ["manifold-q1"]
    assert "2 combination" in res.output and "3 dataset" in res.output


def test_a_question_resolved_before_its_markets_scheduled_close_is_kept_without_a_close_date(tmp_path):
    """An event that settled the market early: dropping it would bias the base rate (early
    resolutions are mostly Yes); its scheduled close stays in market_info_close_datetime."""
    files = sets(tmp_path, [question("q1"), question("early")], [resolution("q1"), resolution("early", date="2024-05-01")])
    assert run(tmp_path, *files).exit_code == 0
    early = next(r for r in rows(tmp_path) if r["id"] == "manifold-early")
    assert early["close_date"] is None and early["resolve_date"] == "2024-05-01"
    assert early["market_info_close_datetime"] == "2024-06-01T00:00:00+00:00"


def test_dates_out_of_order_leave_a_question_out(tmp_path):
    files = sets(tmp_path, [question("q1"), question("odd", market_info_open_datetime="2024-07-01T00:00:00+00:00")],
                 [resolution("q1"), resolution("odd")])
    res = run(tmp_path, *files)
    assert [r["id"] for r in rows(tmp_path)] == ["manifold-q1"] and "1 dates out of order" in res.output


def test_the_same_question_in_two_sets_is_one_question_with_its_earliest_sets_crowd_value(tmp_path):
    later = sets(tmp_path, [question("q1", freeze_datetime_value="0.9")], [], due="2024-04-01", name="b")
    early = sets(tmp_path, [question("q1")], [resolution("q1")], due="2024-03-10", name="a")
    assert run(tmp_path, *later, *early).exit_code == 0
    (only,) = rows(tmp_path)
    assert only["crowd_p"] == 0.25 and only["forecastbench_question_set"] == "a-questions.json"


def test_the_same_files_in_any_order_give_the_same_bytes(tmp_path):
    a = sets(tmp_path, [question("q1"), question("q2")], [resolution("q1"), resolution("q2", resolved_to=0.0)])
    b = sets(tmp_path, [question("q3")], [resolution("q3")], name="b")
    assert run(tmp_path, *a, *b, out="data/one.jsonl").exit_code == 0
    assert run(tmp_path, *reversed(b), *reversed(a), out="data/two.jsonl").exit_code == 0
    assert (tmp_path / "data/one.jsonl").read_bytes() == (tmp_path / "data/two.jsonl").read_bytes()


def test_two_sets_that_disagree_on_a_resolution_fail_in_one_line_and_write_nothing(tmp_path):
    files = sets(tmp_path, [question("q1")], [resolution("q1", resolved_to=1.0)])
    other = write(tmp_path / "c-resolutions.json", {"forecast_due_date": "2024-04-01", "resolutions": [resolution("q1", resolved_to=0.0)]})
    res = run(tmp_path, *files, other)
    assert res.exit_code == 1 and "manifold-q1: resolved_to 0 in one resolution set and 1 in another" in res.output
    assert not (tmp_path / "data").exists()


def test_a_file_that_is_no_set_or_a_pointer_is_refused_naming_it(tmp_path):
    files = sets(tmp_path, [question("q1")], [resolution("q1")])
    pointer = write(tmp_path / "latest-llm.json", "2024-07-21-llm.json")
    other = write(tmp_path / "forecasts.json", {"forecasts": []})
    res = run(tmp_path, *files, pointer, other)
    assert res.exit_code == 1 and not (tmp_path / "data").exists()
    assert "latest-llm.json: file: a pointer to '2024-07-21-llm.json', not a set" in res.output
    assert "forecasts.json: file: neither a question set" in res.output


def test_a_question_without_a_crowd_value_keeps_no_crowd_p(tmp_path):
    files = sets(tmp_path, [question("q1", freeze_datetime_value="N/A")], [resolution("q1")])
    assert run(tmp_path, *files).exit_code == 0
    assert "crowd_p" not in rows(tmp_path)[0]
