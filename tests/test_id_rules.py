"""What enters an id is declared at the setting (settings.setting(in_id=...)) and read by one function
for every stage's id and every run's identity (settings.identity): each rule as it reads."""
from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace

from martingale.config import sections as core
from martingale.core.settings import COUNT, OMIT, Int, identity, omitted_at, omitted_unless, setting

TRAIN = SimpleNamespace(serves=True, place="step", questions=True)
PRETRAIN = SimpleNamespace(serves=False, place="source", questions=False)
EVALUATE = SimpleNamespace(serves=True, place="measure", questions=True)


@dataclass
class Toy:
    size: int = setting(3, COUNT)
    added_later: int = setting(0, Int(0), in_id=omitted_at(0))
    only_for_b: int = setting(1, COUNT, in_id=omitted_unless("mode", "b"))
    mode: str = setting("a", None)


def test_a_setting_without_a_rule_is_hashed_as_it_is():
    assert identity(Toy, {"size": 5, "extra": 1}, TRAIN) == {"size": 5, "extra": 1}


def test_a_key_added_later_stays_out_while_it_holds_the_value_that_changes_nothing():
    assert identity(Toy, {"added_later": 0}, TRAIN) == {} and identity(Toy, {"added_later": 2}, TRAIN) == {"added_later": 2}


def test_a_setting_read_only_in_one_case_is_hashed_only_in_that_case():
    assert identity(Toy, {"mode": "a", "only_for_b": 4}, TRAIN) == {"mode": "a"}
    assert identity(Toy, {"mode": "b", "only_for_b": 4}, TRAIN) == {"mode": "b", "only_for_b": 4}


def test_where_and_how_a_model_runs_stays_out_of_a_stage_id_but_not_out_of_the_runs_identity():
    model = {"name": "tiny", "device": "cuda", "backend": "vllm", "server_url": None, "resources": {"cpus": 1},
             "generate_batch": 0, "loss_batch": 4}
    assert identity(core.ModelConfig, model, PRETRAIN) == {"name": "tiny"}
    assert identity(core.ModelConfig, model, TRAIN) == {"name": "tiny", "backend": "vllm", "server_url": None,
                                                        "loss_batch": 4}
    assert "loss_batch" not in identity(core.ModelConfig, model, EVALUATE)
    assert identity(core.ModelConfig, model, None) == model


def test_a_kind_that_asks_no_question_sees_the_synthetic_worlds_source_and_no_split_sizes():
    world = {"name": "jsonl", "questions_file": "q.jsonl", "n_train": 10, "n_heldout": 5, "seed": 42}
    assert identity(core.WorldConfig, world, PRETRAIN) == {"name": "synthetic", "questions_file": None, "seed": 42}
    assert identity(core.WorldConfig, world, TRAIN) == world


def test_the_omitted_marker_is_never_hashed():
    assert OMIT not in identity(Toy, {"added_later": 0, "size": 1}, None).values()


def test_a_heldout_redraw_enters_the_ids_of_the_evaluations_only_and_of_no_stage_at_the_first_draw():
    world = {"name": "synthetic", "seed": 0, "heldout_draw": 1}
    assert identity(core.WorldConfig, world, EVALUATE)["heldout_draw"] == 1
    assert "heldout_draw" not in identity(core.WorldConfig, world, TRAIN)
    assert "heldout_draw" not in identity(core.WorldConfig, {**world, "heldout_draw": 0}, EVALUATE)
    assert identity(core.WorldConfig, world, None)["heldout_draw"] == 1


def test_a_redraw_of_a_questions_files_split_changes_its_training_questions_too():
    world = {"name": "jsonl", "seed": 0, "heldout_draw": 1, "questions_file": "q.jsonl"}
    assert identity(core.WorldConfig, world, TRAIN)["heldout_draw"] == 1
    assert "heldout_draw" not in identity(core.WorldConfig, world, PRETRAIN)
