"""The run tree: loading, composing root-first, and every rule's one-line error."""
from __future__ import annotations

from pathlib import Path

import pytest

from martingale.config.compose import Composer, compose
from martingale.config.runs import RunError, RunTree

from projcopy import FIXTURE, proj, run_files, snapshot, write_run  # noqa: F401 (proj: fixture)

CONF = FIXTURE / "conf"   # the frozen fixture campaign (read-only)


def rejected(root: Path, file: str, key: str) -> str:
    """Load the tree expecting a RunError that names file and key, and that nothing was written."""
    before = snapshot(root)
    with pytest.raises(RunError) as info:
        RunTree.load(root / "conf")
    msg = str(info.value)
    assert msg.startswith(f"conf/runs/{file}: {key}: "), msg
    assert "\n" not in msg
    assert snapshot(root) == before
    return msg


# ------------------------------------------------------------------ the fixture campaign

def test_every_run_file_is_one_valid_run_named_by_its_file():
    tree = RunTree.load(CONF)
    assert sorted(tree.ids()) == sorted(p.stem for p in run_files(FIXTURE))
    assert tree.specs["base"].parent is None


def test_knobs_are_applied_root_first_so_the_last_one_wins():
    tree = RunTree.load(CONF)
    assert tree.overrides("filter-s2only") == [
        "start=D", "stages.s1.reward=A", "stages.s1.filter=top-quartile", "stages.s1.reward=BP",
        "stages.s2.reward=A", "stages.s2.filter=top-quartile", "stages.s1.filter=null"]
    cfg = tree.resolved_config("filter-s2only")
    assert cfg["start"] == "D"
    assert cfg["stages"]["s1"]["reward"] == "BP" and cfg["stages"]["s1"]["filter"] is None
    assert cfg["stages"]["s2"]["reward"] == "A" and cfg["stages"]["s2"]["filter"] == "top-quartile"


def test_lineage_runs_from_the_root_to_the_run():
    tree = RunTree.load(CONF)
    assert [s.run_id for s in tree.lineage("twostage-v2-k3")] == [
        "base", "D", "D-snap", "twostage-v2-D-snap-s1", "twostage-v2-D-snap", "twostage-v2-k3"]


@pytest.mark.slow   # a Hydra compose per run (~4 s); the tricky override lists below stay fast
def test_fast_composer_matches_hydra_compose_for_every_campaign_run():
    tree = RunTree.load(CONF)
    for run_id in tree.ids():
        assert tree.resolved_config(run_id) == compose(tree.overrides(run_id), CONF), run_id


def test_group_knob_reapplies_earlier_key_overrides_as_hydra_does():
    overrides = ["elicit.cut=0.25", "elicit=snap"]
    assert Composer(CONF).compose(overrides) == compose(overrides, CONF)
    assert compose(overrides, CONF)["elicit"]["cut"] == 0.25


def test_resolved_config_is_a_copy_safe_to_modify():
    tree = RunTree.load(CONF)
    tree.resolved_config("base")["start"] = "zzz"
    assert tree.resolved_config("base")["start"] == "base"


# ------------------------------------------------------------------ one error each

def test_two_overrides_in_one_knob_string_is_rejected_naming_the_file(proj):
    write_run(proj, "x.yaml", "parent: base\nknob: stages.s1.reward=A stages.s2.reward=B\n")
    assert "more than one override" in rejected(proj, "x.yaml", "knob")


def test_two_overrides_in_a_knob_list_are_rejected_naming_the_file(proj):
    write_run(proj, "x.yaml", "parent: base\nknob: [stages.s1.reward=A, stages.s2.reward=B]\n")
    assert "more than one override" in rejected(proj, "x.yaml", "knob")


def test_comma_joined_overrides_are_rejected_as_two(proj):
    write_run(proj, "x.yaml", "parent: base\nknob: stages.s1.reward=A,stages.s2.reward=B\n")
    assert "more than one override" in rejected(proj, "x.yaml", "knob")


def test_noop_knob_is_rejected_naming_the_file_and_key(proj):
    write_run(proj, "x.yaml", "parent: D\nknob: start=D\n")
    assert "no-op" in rejected(proj, "x.yaml", "start")


def test_unknown_config_key_is_rejected(proj):
    write_run(proj, "x.yaml", "parent: base\nknob: stages.s1.rewrd=A\n")
    assert "unknown key" in rejected(proj, "x.yaml", "stages.s1.rewrd")


def test_unknown_top_level_key_in_run_file_is_rejected(proj):
    write_run(proj, "x.yaml", "parent: base\nknob: stages.s1.reward=A\nqestion: typo\n")
    assert "unknown key" in rejected(proj, "x.yaml", "qestion")


def test_value_not_in_choices_is_rejected(proj):
    write_run(proj, "x.yaml", "parent: base\nknob: stages.s1.reward=Z\n")
    assert "'Z' is not one of" in rejected(proj, "x.yaml", "stages.s1.reward")


def test_unknown_group_option_is_rejected(proj):
    write_run(proj, "x.yaml", "parent: base\nknob: elicit=telepathy\n")
    assert "telepathy" in rejected(proj, "x.yaml", "elicit")


def test_unknown_parent_is_rejected(proj):
    write_run(proj, "x.yaml", "parent: nobody\nknob: start=D\n")
    assert "unknown parent 'nobody'" in rejected(proj, "x.yaml", "parent")


def test_cycle_is_rejected(proj):
    write_run(proj, "a.yaml", "parent: b\nknob: start=D\n")
    write_run(proj, "b.yaml", "parent: a\nknob: stages.s1.reward=A\n")
    assert "cycle: a -> b -> a" in rejected(proj, "a.yaml", "parent")


def test_two_files_with_one_run_id_are_rejected(proj):
    write_run(proj, "x.yaml", "parent: base\nknob: start=D\n")
    write_run(proj, "x.yml", "parent: base\nknob: start=D\n")
    assert "also defined by conf/runs/x.yaml" in rejected(proj, "x.yml", "run-id")


def test_run_id_with_dotdot_is_rejected(proj):
    write_run(proj, "a..b.yaml", "parent: base\nknob: start=D\n")
    assert "not a safe name" in rejected(proj, "a..b.yaml", "run-id")


def test_run_id_with_a_space_is_rejected(proj):
    write_run(proj, "a b.yaml", "parent: base\nknob: start=D\n")
    assert "not a safe name" in rejected(proj, "a b.yaml", "run-id")


def test_yaml_that_does_not_parse_is_rejected(proj):
    write_run(proj, "x.yaml", "parent: base\nknob: [start=D\n")
    assert "does not parse" in rejected(proj, "x.yaml", "yaml")


def test_seeds_of_wrong_type_are_rejected(proj):
    write_run(proj, "x.yaml", "parent: base\nknob: seeds=abc\n")
    rejected(proj, "x.yaml", "seeds")


def test_learning_rate_of_wrong_type_is_rejected(proj):
    write_run(proj, "x.yaml", "parent: base\nknob: stages.s1.lr=fast\n")
    assert "could not be converted to Float" in rejected(proj, "x.yaml", "stages.s1.lr")


def test_root_with_a_knob_is_rejected(proj):
    write_run(proj, "x.yaml", "parent: null\nknob: start=D\n")
    assert "root" in rejected(proj, "x.yaml", "knob")


def test_child_without_a_knob_is_rejected(proj):
    write_run(proj, "x.yaml", "parent: base\nquestion: what changes?\n")
    assert "missing" in rejected(proj, "x.yaml", "knob")


def test_invalid_without_a_named_bug_is_rejected(proj):
    write_run(proj, "x.yaml", "parent: base\nknob: start=D\ninvalid: ''\n")
    rejected(proj, "x.yaml", "invalid")


def test_bad_knob_deep_in_the_tree_names_its_own_file_not_its_descendants(proj):
    (proj / "conf" / "runs" / "D.yaml").write_text("parent: base\nknob: start=E\n")
    rejected(proj, "D.yaml", "start")


def test_fast_composer_matches_hydra_on_tricky_override_lists():
    cases = [
        ["seeds=[1,2]", "seeds=[3]"],
        ["elicit=snap", "elicit.judge=oracle", "elicit=samemode"],
        ["stages.s1.reward=A", "stages.s1.reward=null"],
        ["model=llama31_8b", "model.resources.gpus=4", "model=tiny"],
        ["stages.s1={reward: A, lr: 0.1}", "stages.s1.epochs=2"],
        ["model.lora_targets=[q_proj]", "stages.s2.balance=false", "eval.ci=0.9"],
    ]
    composer = Composer(CONF)
    for overrides in cases:
        assert composer.compose(overrides) == compose(overrides, CONF), overrides
