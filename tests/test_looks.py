"""A finding's looks (martingale/table/looks.py): decide's plan is validated like the config, a
later look is ordinary run files with one knob each whose config is the run's on more seeds or a
fresh held-out draw, and a finding reads its latest complete look."""
from __future__ import annotations

import pytest

from martingale.config.runs import RunTree
from martingale.table import TableError
from martingale.table.looks import DecidePlan, current_look, load_plan, look_runs

from projcopy import proj  # noqa: F401 (proj: fixture)


@pytest.mark.parametrize("text, key", [("looks: 0\n", "looks"), ("seeds: [5, 3]\n", "seeds"),
                                       ("alpha: 0.7\n", "alpha"), ("boundary: maybe\n", "boundary"),
                                       ("stops: 3\n", "stops")])
def test_a_bad_plan_is_one_line_naming_the_file_and_the_key(proj, text, key):
    (proj / "conf" / "decide.yaml").write_text(text, encoding="utf-8")
    with pytest.raises(TableError) as e:
        load_plan(proj)
    assert str(e.value).startswith(f"conf/decide.yaml: {key}: ") and "\n" not in str(e.value)


def test_no_plan_is_one_look_at_five_percent(proj):
    plan = load_plan(proj)
    assert plan == DecidePlan() and plan.bound().nominal() == 0.05


def _write(root, files) -> RunTree:
    for f in files:
        (root / "conf" / "runs" / f"{f.run_id}.yaml").write_text(f.text(), encoding="utf-8")
    return RunTree.load(root / "conf")


def test_a_look_on_more_seeds_is_the_run_with_more_seeds_and_no_other_change(proj):
    tree = RunTree.load(proj / "conf")
    files = look_runs(tree, "D", 3, 0, paired=set())
    assert [(f.run_id, f.parent, f.knob) for f in files] == [("D--k3", "D", "seeds=[42,43,44]")]
    tree = _write(proj, files)
    want = tree.resolved_config("D")
    want["seeds"] = [42, 43, 44]
    assert tree.resolved_config("D--k3") == want


def test_an_effects_look_is_its_knob_on_its_parents_look_so_it_still_pairs_with_the_parent(proj):
    tree = RunTree.load(proj / "conf")
    files = look_runs(tree, "A-on-D", 3, 1, paired={"A-on-D"})
    runs = {f.run_id: (f.parent, f.knob) for f in files}
    assert runs["A-on-D--k3d1"] == ("D--k3d1", tree.specs["A-on-D"].knob)
    assert runs["D--k3d1"] == ("D--k3", "world.heldout_draw=1") and runs["D--k3"][0] == "D"
    tree = _write(proj, files)
    want = tree.resolved_config("A-on-D")
    want["seeds"], want["world"]["heldout_draw"] = [42, 43, 44], 1
    assert tree.resolved_config("A-on-D--k3d1") == want


def test_a_finding_reads_its_latest_complete_look(proj):
    plan = DecidePlan(looks=3, seeds=(1, 3, 5), draws=2)
    tree = _write(proj, look_runs(RunTree.load(proj / "conf"), "D", 3, 0, set()) +
                  look_runs(RunTree.load(proj / "conf"), "D", 3, 1, set()))
    look = current_look(tree, "D", plan, done=lambda r: r in ("D", "D--k3"))
    assert (look.k, look.draws, look.runs, look.index) == (3, 1, ("D--k3",), 2)
    look = current_look(tree, "D", plan, done=lambda r: True)
    assert (look.k, look.draws, look.runs, look.index) == (3, 2, ("D--k3", "D--k3d1"), 3)


def test_a_look_another_finding_took_by_the_other_route_is_not_this_findings_next(proj):
    """D (1 seed) read on a second draw (look 2); D--k3 (3 seeds on the first draw, also look 2) was
    written for another finding on D. It is a branch: resuming it would read look 2 again, for ever.
    3 seeds on both draws (look 3) is this finding's next."""
    from martingale.decide import pending_look

    plan = DecidePlan(looks=3, seeds=(1, 3, 5), draws=2)
    tree = RunTree.load(proj / "conf")
    tree = _write(proj, look_runs(tree, "D", 1, 1, set()) + look_runs(tree, "D", 3, 0, set()))
    look = current_look(tree, "D", plan, done=lambda r: r in ("D", "D--d1"))
    assert (look.k, look.draws, look.index) == (1, 2, 2)
    assert pending_look(tree, "D", look, plan, 1) is None
    tree = _write(proj, look_runs(tree, "D", 3, 1, set()))
    assert pending_look(tree, "D", look, plan, 1) == (3, 2)
