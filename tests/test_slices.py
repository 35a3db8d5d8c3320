"""A stage body's config is its slice typed (config/slices.py): attributes of the schema's types, a
setting the id leaves out at its default, an unknown key refused naming it."""
from __future__ import annotations

import pytest

from martingale.config.slices import stage_config
from martingale.plan import Plan
from martingale.stages import kinds

from projcopy import FIXTURE


@pytest.fixture(scope="module")
def plan() -> Plan:
    return Plan.load(FIXTURE)


def _first(plan: Plan, kind: str):
    return next(st for st in plan.stages.values() if st.kind == kind)


def test_every_stage_of_the_fixture_campaign_types_its_slice(plan):
    typed = [stage_config(kinds()[st.kind], st.cfg) for st in plan.stages.values()]
    assert len(typed) == len(plan.stages) and {st.kind for st in plan.stages.values()} >= {"train", "evaluate"}


def test_a_train_slice_reads_typed_attributes(plan):
    st = _first(plan, "train")
    cfg = stage_config(kinds()["train"], {**st.cfg, "stage": {**st.cfg["stage"], "lr": 1}})
    assert cfg.stage.lr == 1.0 and isinstance(cfg.stage.lr, float)
    assert cfg.seed == st.cfg["seed"] and isinstance(cfg.seed, int)
    assert cfg.stage.reward == st.cfg["stage"]["reward"] and cfg.world.n_train == st.cfg["world"]["n_train"]


def test_a_section_the_slice_leaves_out_holds_its_defaults(plan):
    st = _first(plan, "train")
    assert "prompts" not in st.cfg                     # the embedded prompt set: not in the id
    cfg = stage_config(kinds()["train"], st.cfg)
    assert cfg.prompts.name == "embedded" and cfg.prompts.episode is None


def test_a_section_is_its_dataclass_read_by_attribute_only(plan):
    from martingale.beliefs.section import ElicitConfig
    from martingale.stages.section import EvalConfig
    cfg = stage_config(kinds()["evaluate"], _first(plan, "evaluate").cfg)
    assert type(cfg.eval) is EvalConfig and type(cfg.elicit) is ElicitConfig
    with pytest.raises(TypeError):
        cfg.eval["ci"]


def test_an_unknown_key_in_a_slice_is_refused_naming_it(plan):
    st = _first(plan, "train")
    with pytest.raises(ValueError, match=r"^train stage config\.stage: unknown key 'lrr'$"):
        stage_config(kinds()["train"], {**st.cfg, "stage": {**st.cfg["stage"], "lrr": 0.1}})


def test_a_kind_whose_key_is_no_config_section_is_refused_naming_it():
    from martingale.stages import StageKind
    odd = StageKind("odd", "source", keys=("nosuch",), inputs=(), body=lambda cfg, out_dir: None)
    with pytest.raises(ValueError, match=r"^stage kind odd: key 'nosuch' is no config section$"):
        stage_config(odd, {})


def test_a_roles_model_override_merges_into_a_typed_model_key_by_key(plan):
    from martingale.episodes.roles import role_model
    cfg = stage_config(kinds()["train"], _first(plan, "train").cfg)
    role = role_model({"model": cfg.model, "simulate": {"human_model": {"vllm": {"reload_every": 3}}}}, "human")
    assert role["vllm"]["reload_every"] == 3
    assert role["vllm"]["adapter_floor"] == cfg.model.vllm.adapter_floor   # the section's other keys kept


def test_a_typed_slice_is_written_as_json_like_the_dict_it_came_from(plan):
    import json

    from martingale.store.files import canonical_json
    cfg = stage_config(kinds()["train"], _first(plan, "train").cfg)
    assert json.loads(canonical_json(cfg))["stage"]["lr"] == cfg.stage.lr
