"""world=jsonl: questions from a file. The synthetic world exported as a questions file is read back
as the same questions, asked with the same prompts; a real question has no oracle; a bad or stale
file is refused before any job."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf
from typer.testing import CliRunner

from martingale.cli import app
from martingale.config.schema import Config
from martingale.plan import Plan
from martingale.world import traces
from martingale.world.jsonl import JsonlWorld, exported_rows
from martingale.world.questions import QuestionsError
from martingale.world.synthetic import SyntheticWorld

from projcopy import REPO, make_project, snapshot

SAMPLE = REPO / "data/questions/forecastbench-2024-07-21-sample.jsonl"
runner = CliRunner()
GOOD = "".join(f'{{"id": "q{i}", "question": "Will it?", "y": {i % 2}}}\n' for i in (1, 2, 3))


def world_cfg(**over) -> dict:
    cfg = OmegaConf.to_container(OmegaConf.structured(Config), resolve=True)["world"]
    cfg.update({"n_train": 40, "n_heldout": 60, **over})
    return cfg


def export(path: Path, **over) -> Path:
    rows = exported_rows(SyntheticWorld(world_cfg(**over)))
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_the_exported_synthetic_world_is_read_back_as_the_same_questions(tmp_path):
    synthetic = SyntheticWorld(world_cfg())
    jsonl = JsonlWorld(world_cfg(name="jsonl", questions_file=str(export(tmp_path / "q.jsonl"))))
    for mine, theirs in zip(synthetic.splits(), jsonl.splits()):
        assert [(q.qid, q.clues, q.y) for q in mine] == [(q.qid, q.clues, q.y) for q in theirs]
        assert [traces.prompt(q) for q in mine] == [traces.prompt(q) for q in theirs]
        assert [synthetic.bayes(q, 3) for q in mine] == [jsonl.bayes(q, 3) for q in theirs]


def test_a_negated_file_question_is_asked_with_not_like_a_synthetic_one(tmp_path):
    jsonl = JsonlWorld(world_cfg(name="jsonl", questions_file=str(export(tmp_path / "q.jsonl"))))
    q = jsonl.splits()[1][0]
    assert traces.prompt(q.negation()) == traces.prompt(SyntheticWorld(world_cfg()).splits()[1][0].negation())


def test_a_real_question_is_asked_through_its_text_and_has_no_oracle():
    world = JsonlWorld(world_cfg(name="jsonl", questions_file=str(SAMPLE), n_train=20, n_heldout=16))
    train, heldout = world.splits()
    assert len(train) == 20 and len(heldout) == 16
    assert not {q.qid for q in train} & {q.qid for q in heldout}
    q = heldout[0]
    assert q.clues == () and world.bayes(q) is None and world.bayes(q, 2) is None
    assert traces.prompt(q) == " ".join(["Q", *q.text.split(), "?"])


def test_a_file_exported_from_another_synthetic_world_is_refused(tmp_path):
    stale = export(tmp_path / "q.jsonl", seed=1)
    with pytest.raises(QuestionsError, match=r"bayes_end: question tr00000 was exported from another synthetic world"):
        JsonlWorld(world_cfg(name="jsonl", questions_file=str(stale)))


def test_export_synthetic_writes_base_world_inside_the_project_only(tmp_path):
    root = make_project(tmp_path / "proj")
    res = runner.invoke(app, ["--root", str(root), "questions", "export-synthetic", "data/q.jsonl"])
    assert res.exit_code == 0, res.output
    rows = [json.loads(line) for line in (root / "data/q.jsonl").read_text().splitlines()]
    cfg = Plan.load(root).resolved_config("base")["world"]
    assert len(rows) == cfg["n_train"] + cfg["n_heldout"]
    assert {r["split"] for r in rows} == {"train", "heldout"}
    before = snapshot(tmp_path)
    res = runner.invoke(app, ["--root", str(root), "questions", "export-synthetic", "../outside.jsonl"])
    assert res.exit_code == 1 and "leaves the project" in res.output
    assert snapshot(tmp_path) == before


def test_a_jsonl_run_shares_base_pretrain_and_asks_its_own_eval(tmp_path):
    root = make_project(tmp_path / "proj", runs={"base-jsonl.yaml": "parent: base\nknob: world=jsonl\n"})
    runner.invoke(app, ["--root", str(root), "questions", "export-synthetic", "data/questions/synthetic-world.jsonl"])
    plan = Plan.load(root)
    (base,), (mine,) = plan.run_stages("base"), plan.run_stages("base-jsonl")
    assert mine.model_stage == base.model_stage and mine.eval_stage != base.eval_stage


@pytest.mark.parametrize("line,error", [
    ('{"id": "a", "question": "Will it?"}', r"bad\.jsonl:4: y: "),
    ('{"id": "a", "question": "Will it?", "y": 2}', r"bad\.jsonl:4: y: "),
    ('{"id": "q1", "question": "Will it?", "y": 1}', r"bad\.jsonl:4: id: duplicate id"),
    ('{"id": "a", "question": "Will it?", "y": 1, "open_date": "2024-13-01"}', r"bad\.jsonl:4: open_date: "),
    ('{"id": "a", "question": "Will it?", "y": 1', r"bad\.jsonl:4: json: not valid JSON"),
], ids=["missing resolution", "y = 2", "duplicate id", "bad date", "not JSON"])
def test_a_bad_questions_file_is_refused_at_check_naming_file_line_and_field(tmp_path, line, error):
    root = make_project(tmp_path / "proj", config="world: {questions_file: data/bad.jsonl, n_train: 1, n_heldout: 2}\n",
                        runs={"on-file.yaml": "parent: base\nknob: world=jsonl\n"})
    (root / "data").mkdir()
    (root / "data/bad.jsonl").write_text(GOOD + line + "\n")
    before = snapshot(root)
    res = runner.invoke(app, ["--root", str(root), "check"])
    assert res.exit_code == 1
    assert len([x for x in res.output.splitlines() if x.startswith("error:")]) == 1
    import re
    assert re.search(error, res.output), res.output
    assert snapshot(root) == before


@pytest.mark.slow   # one snakemake subprocess
def test_snakemake_refuses_a_bad_questions_file_before_any_job(tmp_path):
    root = make_project(tmp_path / "proj", config="world: {questions_file: data/bad.jsonl, n_train: 1, n_heldout: 2}\n",
                        runs={"on-file.yaml": "parent: base\nknob: world=jsonl\n"})
    (root / "data").mkdir()
    (root / "data/bad.jsonl").write_text('{"id": "q0", "question": "Will it?", "y": 2}\n' + GOOD)
    snakemake = str(Path(sys.executable).with_name("snakemake"))
    res = subprocess.run([snakemake, "-c1", "results/on-file/eval.json"], cwd=root, capture_output=True, text=True)
    assert res.returncode != 0
    assert "bad.jsonl:1: y: " in res.stderr + res.stdout
    assert not (root / "results").exists()
