"""world=jsonl: resolved binary questions from a JSONL file — validation, summary, splits, negations,
and `martingale questions check`."""
from __future__ import annotations

import dataclasses
import json
import re
from datetime import date
from pathlib import Path

import pytest
from typer.testing import CliRunner

from martingale.cli import app
from martingale.world.questions import ForecastQuestion, QuestionsError, load_questions, splits, summary

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "data" / "questions" / "forecastbench-2024-07-21-sample.jsonl"
runner = CliRunner()

GOOD = {"id": "q1", "question": "Will it rain in Paris on 2024-08-01?", "background": "Summer.",
        "resolution_criteria": "Météo-France records rain.", "option": "", "y": 1,
        "open_date": "2024-07-01", "close_date": "2024-07-31", "resolve_date": "2024-08-02"}


def row(**changes) -> dict:
    """GOOD with fields changed; a field set to ... is removed."""
    out = {**GOOD, **changes}
    return {k: v for k, v in out.items() if v is not ...}


def write(tmp_path: Path, *lines, name: str = "q.jsonl") -> Path:
    """A questions file: dicts become JSON lines, strings are written as they are."""
    path = tmp_path / name
    path.write_text("".join((json.dumps(x) if isinstance(x, dict) else x) + "\n" for x in lines),
                    encoding="utf-8")
    return path


def problems(path: Path) -> list[str]:
    with pytest.raises(QuestionsError) as info:
        load_questions(path)
    assert str(info.value) == "\n".join(info.value.problems)
    return info.value.problems


def many(n: int) -> list[ForecastQuestion]:
    return [ForecastQuestion(f"q{i:04d}", f"Question {i}?", int(i % 3 == 0)) for i in range(n)]


# --------------------------------------------------------------------------- the sample
def test_the_sample_loads_and_its_summary_matches_the_raw_json():
    raw = [json.loads(line) for line in SAMPLE.read_text(encoding="utf-8").splitlines() if line.strip()]
    qs = load_questions(SAMPLE)
    s = summary(qs)
    n, n_yes = len(raw), sum(r["y"] for r in raw)
    rate = n_yes / n
    dates = sorted(r[k] for r in raw for k in ("open_date", "close_date", "resolve_date") if r[k])
    assert 30 <= n <= 40 and [q.qid for q in qs] == [r["id"] for r in raw]
    assert (s["n"], s["n_yes"]) == (n, n_yes) == (36, 9)
    assert s["base_rate"] == pytest.approx(rate) == pytest.approx(0.25)
    assert s["constant_brier"] == pytest.approx(rate * (1 - rate)) == pytest.approx(0.1875)
    assert (s["first_date"], s["last_date"]) == (dates[0], dates[-1])


def test_the_sample_names_its_source_and_licence():
    readme = (SAMPLE.parent / "README.md").read_text(encoding="utf-8")
    assert "forecastingresearch/forecastbench-datasets" in readme and "CC BY-SA 4.0" in readme
    assert all(r["source"] in readme and r["url"].startswith("https://")
               for r in map(json.loads, SAMPLE.read_text(encoding="utf-8").splitlines()))


def test_the_constant_predictor_brier_is_the_brier_of_always_predicting_the_base_rate():
    qs = load_questions(SAMPLE)
    s = summary(qs)
    assert s["constant_brier"] == pytest.approx(sum((s["base_rate"] - q.y) ** 2 for q in qs) / len(qs))


# --------------------------------------------------------------------------- a good line
def test_a_good_line_becomes_a_question_with_its_dates(tmp_path):
    (q,) = load_questions(write(tmp_path, GOOD))
    assert (q.qid, q.y, q.negated, q.option) == ("q1", 1, False, "")
    assert (q.open_date, q.close_date, q.resolve_date) == (date(2024, 7, 1), date(2024, 7, 31), date(2024, 8, 2))
    assert q.resolution_criteria == "Météo-France records rain." and dict(q.extra) == {}


def test_optional_fields_may_be_absent_or_null(tmp_path):
    (q,) = load_questions(write(tmp_path, {"id": 7, "question": "Q?", "y": 0, "background": None,
                                           "open_date": None}))
    assert (q.qid, q.background, q.option, q.open_date, q.resolve_date) == ("7", "", "", None, None)


def test_extra_fields_are_kept_as_they_are(tmp_path):
    extra = {"source": "metaculus", "url": "https://example.org/1", "tags": ["a", {"b": 1}], "p": "0.3"}
    (q,) = load_questions(write(tmp_path, row(**extra)))
    assert dict(q.extra) == extra and q.negation().extra == q.extra
    with pytest.raises(TypeError):
        q.extra["source"] = "x"   # read-only


def test_a_date_time_keeps_its_date(tmp_path):
    path = write(tmp_path, row(open_date="2024-07-01T17:44:30+00:00", close_date="2024-07-31T23:59:00Z"))
    (q,) = load_questions(path)
    assert (q.open_date, q.close_date) == (date(2024, 7, 1), date(2024, 7, 31))


def test_y_may_be_written_as_a_float(tmp_path):
    qs = load_questions(write(tmp_path, row(id="a", y=1.0), row(id="b", y=0.0)))
    assert [q.y for q in qs] == [1, 0] and all(type(q.y) is int for q in qs)


def test_blank_lines_are_skipped_and_still_counted_in_line_numbers(tmp_path):
    path = write(tmp_path, "", row(id="a"), "   ", row(id="b", y=2))
    assert problems(path) == [f"{path}:4: y: must be 0 or 1, not 2"]


# --------------------------------------------------------------------------- each bad line
def test_a_missing_resolution_is_refused(tmp_path):
    path = write(tmp_path, row(id="a"), row(id="b", y=...))
    assert problems(path) == [f"{path}:2: y: missing (the resolution, 0 or 1)"]


def test_y_2_is_refused(tmp_path):
    path = write(tmp_path, row(y=2))
    assert problems(path) == [f"{path}:1: y: must be 0 or 1, not 2"]


def test_y_true_is_refused(tmp_path):
    path = write(tmp_path, row(y=True))
    assert problems(path) == [f"{path}:1: y: must be 0 or 1, not true"]


def test_a_duplicate_id_names_the_line_it_first_appeared_on(tmp_path):
    path = write(tmp_path, row(id="a"), row(id="b"), row(id="a"))
    assert problems(path) == [f'{path}:3: id: duplicate id "a" (first on line 1)']


def test_a_bad_date_is_refused(tmp_path):
    path = write(tmp_path, row(resolve_date="2024-02-30"))
    assert problems(path) == [f'{path}:1: resolve_date: "2024-02-30" is not an ISO 8601 date (YYYY-MM-DD)']


def test_a_line_that_is_not_json_is_refused(tmp_path):
    path = write(tmp_path, row(id="a"), '{"id": "b", "question": "Q?", "y": 1')
    (p,) = problems(path)
    assert p.startswith(f"{path}:2: json: not valid JSON (")


def test_a_line_that_is_not_an_object_is_refused(tmp_path):
    path = write(tmp_path, '["q1", "Q?", 1]')
    assert problems(path) == [f"{path}:1: json: a list, not an object"]


def test_dates_out_of_order_are_refused(tmp_path):
    path = write(tmp_path, row(open_date="2024-08-01", close_date="2024-07-31", resolve_date="2024-08-02"))
    assert problems(path) == [f"{path}:1: close_date: 2024-07-31 is before open_date 2024-08-01"]


def test_a_resolution_before_the_close_is_refused(tmp_path):
    path = write(tmp_path, row(close_date="2024-08-05", resolve_date="2024-08-02"))
    assert problems(path) == [f"{path}:1: resolve_date: 2024-08-02 is before close_date 2024-08-05"]


def test_an_empty_question_is_refused(tmp_path):
    path = write(tmp_path, row(question="  "))
    assert problems(path) == [f"{path}:1: question: empty"]


def test_a_wrong_type_is_refused(tmp_path):
    path = write(tmp_path, row(background=["not", "text"]))
    assert problems(path) == [f"{path}:1: background: must be a string, not a list"]


def test_an_id_ending_in_the_negation_mark_is_refused(tmp_path):
    path = write(tmp_path, row(id="q1~"))
    assert problems(path) == [f"{path}:1: id: \"q1~\" ends with '~', which marks a negation"]


def test_a_key_given_twice_on_a_line_is_refused(tmp_path):
    path = write(tmp_path, '{"id": "a", "question": "Q?", "y": 1, "y": 0}')
    assert problems(path) == [f"{path}:1: y: given twice on the line"]


def test_an_empty_file_is_refused(tmp_path):
    path = write(tmp_path, "")
    assert problems(path) == [f"{path}: file: holds no questions"]


def test_every_problem_of_a_file_is_reported_together_in_line_order(tmp_path):
    path = write(tmp_path, row(id="a", y=...), row(id="b", y=2), row(id="a"), row(id="c", open_date="soon"),
                 "not json", row(id="d"), row(id="e", close_date="2024-06-01"))
    assert problems(path) == [
        f"{path}:1: y: missing (the resolution, 0 or 1)",
        f"{path}:2: y: must be 0 or 1, not 2",
        f'{path}:3: id: duplicate id "a" (first on line 1)',
        f'{path}:4: open_date: "soon" is not an ISO 8601 date (YYYY-MM-DD)',
        f"{path}:5: json: not valid JSON (Expecting value at column 1)",
        f"{path}:7: close_date: 2024-06-01 is before open_date 2024-07-01",
    ]


# --------------------------------------------------------------------------- the command
def listing(*folders: Path) -> dict[str, tuple[int, int]]:
    return {str(p): (p.stat().st_size, p.stat().st_mtime_ns) for d in folders for p in sorted(d.rglob("*"))}


def test_questions_check_on_a_bad_file_exits_1_prints_every_error_and_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = write(tmp_path, row(id="a", y=...), row(id="b", y=2), row(id="a"), row(id="c", open_date="2024-13-01"),
                 "{nope")
    before = listing(tmp_path)
    res = runner.invoke(app, ["questions", "check", str(path)])
    assert res.exit_code == 1
    for line in (f"{path}:1: y: missing", f"{path}:2: y: must be 0 or 1, not 2",
                 f'{path}:3: id: duplicate id "a" (first on line 1)', f"{path}:4: open_date:",
                 f"{path}:5: json: not valid JSON"):
        assert line in res.output, line
    assert "5 problems" in res.output
    assert listing(tmp_path) == before


def test_questions_check_on_the_sample_exits_0_and_prints_its_numbers(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    res = runner.invoke(app, ["questions", "check", str(SAMPLE)])
    assert res.exit_code == 0, res.output
    for pattern in (r"questions\W+36\b", r"resolved yes\W+9\b", r"base rate\W+0\.2500\b",
                    r"constant-predictor Brier\W+0\.1875\b", r"dates\W+2019-01-21 \.\. 2025-12-31\b"):
        assert re.search(pattern, res.output), pattern
    assert list(tmp_path.iterdir()) == []


def test_questions_help_lists_check():
    res = runner.invoke(app, ["questions", "--help"])
    assert res.exit_code == 0 and "check" in res.output
    assert runner.invoke(app, ["questions", "check", "--help"]).exit_code == 0


def test_questions_check_on_a_missing_file_exits_1(tmp_path):
    res = runner.invoke(app, ["questions", "check", str(tmp_path / "absent.jsonl")])
    assert res.exit_code == 1 and "absent.jsonl: file: cannot read it" in res.output


# --------------------------------------------------------------------------- splits
def test_splits_are_disjoint_and_of_the_asked_sizes():
    train, heldout = splits(many(100), seed=42, n_train=60, n_heldout=30)
    assert (len(train), len(heldout)) == (60, 30)
    assert not {q.qid for q in train} & {q.qid for q in heldout}
    assert len({q.qid for q in train}) == 60


def test_splits_are_the_same_for_the_same_seed():
    assert splits(many(100), 42, 60, 30) == splits(many(100), 42, 60, 30)


def test_a_different_seed_gives_a_different_split():
    assert splits(many(100), 42, 60, 30)[1] != splits(many(100), 43, 60, 30)[1]


def test_a_heldout_redraw_of_a_files_split_draws_train_and_heldout_afresh():
    first, redrawn = splits(many(100), 42, 60, 30), splits(many(100), 42, 60, 30, draw=1)
    assert first[1] != redrawn[1] and first[0] != redrawn[0]
    assert splits(many(100), 42, 60, 30, draw=0) == first


def test_splits_do_not_depend_on_the_order_of_the_file():
    qs = many(100)
    assert splits(qs, 7, 50, 20) == splits(list(reversed(qs)), 7, 50, 20)


def test_the_heldout_set_does_not_change_with_n_train_and_a_small_train_set_is_a_subset():
    small, held_small = splits(many(100), 42, 20, 30)
    full, held_full = splits(many(100), 42, 70, 30)
    assert held_small == held_full
    assert small == full[:20]


def test_too_few_questions_are_refused_naming_the_keys():
    with pytest.raises(ValueError, match=r"world\.n_train \+ world\.n_heldout: 80 \+ 30 = 110 .* holds 100"):
        splits(many(100), 42, 80, 30)


def with_negations(questions):
    """Each question followed by its negation (mean y exactly 0.5, as the log balanced its training set)."""
    return [x for q in questions for x in (q, q.negation())]


def test_a_negative_size_is_refused_naming_its_key():
    with pytest.raises(ValueError, match=r"world\.n_heldout"):
        splits(many(10), 42, 5, -1)


def test_splits_refuse_negations():
    with pytest.raises(ValueError, match="negations"):
        splits(with_negations(many(10)), 42, 5, 5)


# --------------------------------------------------------------------------- negations
def test_negation_flips_y_and_marks_the_id():
    q = load_questions(SAMPLE)[0]
    n = q.negation()
    assert (n.qid, n.y, n.negated) == (q.qid + "~", 1 - q.y, True)
    assert (n.question, n.option, n.background, n.resolve_date) == (q.question, q.option, q.background, q.resolve_date)


def test_negation_round_trips():
    for q in load_questions(SAMPLE):
        assert q.negation().negation() == q


def test_each_question_with_its_negation_balances_the_labels():
    qs = with_negations(load_questions(SAMPLE))
    assert len(qs) == 72 and summary(qs)["base_rate"] == 0.5


def test_a_question_is_frozen():
    q = many(1)[0]
    with pytest.raises(dataclasses.FrozenInstanceError):
        q.y = 0   # type: ignore[misc]
    assert hash(q) == hash(many(1)[0])


def test_a_question_written_back_as_json_loads_as_the_same_question(tmp_path):
    qs = load_questions(SAMPLE)
    assert load_questions(write(tmp_path, *(q.to_json() for q in qs))) == qs
