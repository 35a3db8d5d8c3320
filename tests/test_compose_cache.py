"""Hydra-composed bases are cached on disk by content: a fresh process plans without composing,
and any change to what Hydra composes from (a conf/ file, the schema) composes again."""
from __future__ import annotations

import pytest

from martingale.config import compose
from martingale.plan import Plan

from projcopy import proj  # noqa: F401 (fixture)


@pytest.fixture
def fresh_process(monkeypatch):
    """As a new process: no base in memory; compose_cfg counted."""
    calls: list[list[str]] = []
    real = compose.compose_cfg

    def counted(overrides, conf_dir):
        calls.append(list(overrides))
        return real(overrides, conf_dir)
    monkeypatch.setattr(compose, "_BASES", {})
    monkeypatch.setattr(compose, "compose_cfg", counted)
    return calls


def test_a_second_process_plans_the_same_stages_without_composing(proj, fresh_process, monkeypatch):
    first = Plan.load(proj)
    assert fresh_process and list((proj / ".cache" / "compose").glob("*.pkl"))
    fresh_process.clear()
    monkeypatch.setattr(compose, "_BASES", {})
    second = Plan.load(proj)
    assert fresh_process == []
    assert {s: st.cfg for s, st in second.stages.items()} == {s: st.cfg for s, st in first.stages.items()}


def test_an_edited_group_file_is_composed_again_and_its_edit_is_seen(proj, fresh_process, monkeypatch):
    Plan.load(proj)
    fresh_process.clear()
    monkeypatch.setattr(compose, "_BASES", {})
    world = proj / "conf" / "world" / "synthetic.yaml"
    world.write_text(world.read_text().replace("base_rate: 0.3", "base_rate: 0.35"))
    plan = Plan.load(proj)
    assert fresh_process
    assert plan.resolved_config("base")["world"]["base_rate"] == 0.35


def test_a_schema_change_is_composed_again(proj, fresh_process, monkeypatch):
    Plan.load(proj)
    fresh_process.clear()
    monkeypatch.setattr(compose, "_BASES", {})
    monkeypatch.setattr(compose, "_store_digest", lambda: "another schema")
    Plan.load(proj)
    assert fresh_process


def test_a_corrupt_cache_file_is_composed_again(proj, fresh_process, monkeypatch):
    Plan.load(proj)
    for f in (proj / ".cache" / "compose").glob("*.pkl"):
        f.write_bytes(b"not a pickle")
    fresh_process.clear()
    monkeypatch.setattr(compose, "_BASES", {})
    assert Plan.load(proj).stages
    assert fresh_process
