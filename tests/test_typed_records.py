"""eval.json and runs.json read through types: each dataclass (records/eval_record.py) and row
TypedDict (table/runs_row.py) has exactly its schema definition's keys, required where the schema
requires them; what the aggregate writes reads back whole; an unreadable file is one line."""
from __future__ import annotations

import dataclasses
import json
import math

import pytest
from test_eval_schema import _evals

from martingale.records import eval_record as er
from martingale.records.aggregate import write_run_results
from martingale.records.eval_schema import EvalSchemaError, eval_schema
from martingale.table import runs_row as rr
from martingale.table.schema import runs_schema


def _resolve(schema: dict, node: dict) -> dict:
    """A definition, following one $ref or a oneOf's non-null branch."""
    for branch in node.get("oneOf", []):
        if branch.get("type") != "null":
            node = branch
    ref = node.get("$ref")
    return schema["definitions"][ref.rsplit("/", 1)[1]] if ref else node


EVAL = eval_schema()
EVAL_CLASSES = [
    (er.EvalRecord, EVAL),
    (er.Stage, EVAL["definitions"]["stage"]),
    (er.Spread, EVAL["definitions"]["spread"]),
    (er.SeedList, EVAL["definitions"]["seed_list"]),
    (er.Count, EVAL["definitions"]["count"]),
    (er.QuestionCov, EVAL["definitions"]["question_cov"]),
    (er.Part, EVAL["definitions"]["part"]),
    (er.SeedEffect, EVAL["definitions"]["seed_effect"]),
    (er.Effect, EVAL["definitions"]["effect"]),
    (er.RunEffect, EVAL["definitions"]["run_effect"]),
    (er.EvalIds, EVAL["properties"]["provenance"]["additionalProperties"]["additionalProperties"]),
]


@pytest.mark.parametrize("cls, definition", EVAL_CLASSES, ids=[c.__name__ for c, _ in EVAL_CLASSES])
def test_each_eval_dataclass_has_its_schema_definitions_keys(cls, definition):
    fields = {f.name: f for f in dataclasses.fields(cls)}
    if cls is er.Stage:        # a stage's metrics are its additionalProperties
        assert definition["additionalProperties"] == {"$ref": "#/definitions/metric"}
        del fields["metrics"]
    assert set(fields) == set(definition["properties"])
    required = {n for n, f in fields.items() if f.default is dataclasses.MISSING
                and f.default_factory is dataclasses.MISSING}
    assert required == set(definition.get("required", []))


RUNS = runs_schema()
RUN = RUNS["definitions"]["run"]
ROW_TYPES = [
    (rr.Row, RUN),
    (rr.Seeded, RUNS["definitions"]["metric"]),
    (rr.Count, RUNS["definitions"]["count"]),
    (rr.RowEffect, RUN["properties"]["effect"]),
    (rr.Provenance, RUN["properties"]["provenance"]),
    (rr.Artifacts, RUN["properties"]["artifacts"]),
    (rr.Wandb, RUN["properties"]["wandb"]),
]


@pytest.mark.parametrize("cls, definition", ROW_TYPES, ids=[c.__name__ for c, _ in ROW_TYPES])
def test_each_row_type_has_its_schema_definitions_keys(cls, definition):
    assert set(cls.__annotations__) == set(definition["properties"])
    assert set(cls.__required_keys__) == set(definition.get("required", []))


def test_what_the_aggregate_writes_reads_back_whole(tmp_path):
    lineage = [{"run_id": "base", "parent": None, "knob": None}, {"run_id": "kid", "parent": "base", "knob": "x=1"}]
    write_run_results("kid", {"eval": {"n_bootstrap": 50}}, lineage, _evals(tmp_path, "kid", [41, 42]),
                      tmp_path / "out", parent_evals=_evals(tmp_path, "base", [41, 42]), plots=False)
    record = er.read_eval(tmp_path / "out" / "eval.json")
    assert record.final == "s1" and record.parent == "base" and record.seeds == [41, 42]
    s1 = record.stages["s1"]
    assert isinstance(s1.metrics["brier"], er.Spread) and len(s1.values("brier")) == 2
    assert [len(ci) for ci in s1.values("ms_ci")] == [2, 2]
    final = record.effect_at("s1")
    assert final is not None and final is record.effect.final and [s for s, _ in final.blocks()] == [41, 42]
    assert isinstance(final.blocks()[0][1].brier.delta, float) and set(final.crossed) <= {"brier", "ms"}
    assert record.model_kinds("s1") == {"train"}


def test_an_unreadable_eval_json_is_one_line_naming_it(tmp_path):
    path = tmp_path / "eval.json"
    path.write_text("{not json")
    with pytest.raises(EvalSchemaError, match="^results/x/eval.json: unreadable"):
        er.read_eval(path, "results/x/eval.json")
    path.write_text(json.dumps([1, 2]))
    with pytest.raises(EvalSchemaError, match="^results/x/eval.json: unreadable"):
        er.read_eval(path, "results/x/eval.json")


def test_a_question_covariance_is_read_only_where_every_cell_is_a_number():
    cov = er.QuestionCov([[1.0, 0.5], [0.5, None]], 10, [[0.025, -1.0, math.nan]])
    assert cov.finite_cov(2) is None and cov.finite_tails() is None
    good = er.QuestionCov([[1.0, 0.5], [0.5, 1.0]], 10, [[0.025, -1.0, 1.0]])
    assert good.finite_cov(2) == [[1.0, 0.5], [0.5, 1.0]] and good.finite_cov(3) is None
    assert good.finite_tails() == [[0.025, -1.0, 1.0]]


def test_read_rows_refuses_a_runs_json_of_the_old_metric_shape(tmp_path):
    path = tmp_path / "runs.json"
    path.write_text(json.dumps([{"run_id": "x", "metrics": {"brier": 0.2}}]))
    with pytest.raises(rr.RowsError, match="runs.json: ") as e:
        rr.read_rows(path)
    assert "\n" not in str(e.value)
