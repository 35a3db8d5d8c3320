"""results/_store/index.json read through types: what the plan writes reads back the same, and a
file of another shape reads as no index (the plan computes it again), never as partly typed."""
from __future__ import annotations

import json

from martingale.plan import Plan
from martingale.store import STORE, read_index
from martingale.store.plan_index import PlanIndex

from projcopy import proj  # noqa: F401 (fixture)


def test_the_index_the_plan_writes_reads_back_as_the_same_typed_index(proj):
    written = Plan.load(proj).write_index()
    assert read_index(proj) == written
    assert json.loads((proj / STORE / "index.json").read_text()) == written.to_json()


def test_an_index_whose_runs_lack_a_field_reads_as_no_index(proj):
    raw = Plan.load(proj).index().to_json()
    del next(iter(raw["runs"].values()))["config_hash"]
    assert PlanIndex.from_json(raw) is None


def test_an_index_with_a_field_it_does_not_declare_reads_as_no_index(proj):
    raw = Plan.load(proj).index().to_json()
    next(iter(raw["stages"].values()))["priority"] = 3
    assert PlanIndex.from_json(raw) is None


def test_a_file_that_is_not_an_object_reads_as_no_index(proj):
    (proj / STORE).mkdir(parents=True, exist_ok=True)
    (proj / STORE / "index.json").write_text("[]")
    assert read_index(proj) is None
