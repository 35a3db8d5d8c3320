"""The plan: content ids, shared prefixes, and what a changed knob invalidates."""
from __future__ import annotations

import re
import time

from martingale.plan import Plan, stage_dir

from projcopy import REPO, proj, write_run  # noqa: F401 (proj: fixture)


def ids_by_stage(plan: Plan, run_id: str) -> dict[tuple[str, int], tuple[str, str]]:
    return {(r.stage, r.seed): (r.model_stage, r.eval_stage) for r in plan.run_stages(run_id)}


def test_stage_ids_are_kind_dash_twelve_hex_and_live_in_the_store():
    plan = Plan.load(REPO)
    for sid, st in plan.stages.items():
        assert re.fullmatch(rf"{st.kind}-[0-9a-f]{{12}}", sid)
        assert stage_dir(sid) == f"results/_store/{st.kind}/{sid}"


def test_every_run_shares_the_one_pretrain_stage():
    plan = Plan.load(REPO)
    assert [s.kind for s in plan.stages.values()].count("pretrain") == 1


def test_all_arms_starting_from_D_share_one_distill_id():
    plan = Plan.load(REPO)
    d_runs = [r for r in plan.run_ids() if plan.resolved_config(r)["start"] == "D"]
    assert len(d_runs) >= 10
    distills = {plan.run_stages(r)[0].model_stage for r in d_runs}
    assert len(distills) == 1 and next(iter(distills)).startswith("distill-")
    assert [s.kind for s in plan.stages.values()].count("distill") == 1


def test_filter_s2only_reuses_D_s0_eval_and_the_unfiltered_BP_stage_of_judge_samemode_BP():
    plan = Plan.load(REPO)
    mine, theirs, d = (ids_by_stage(plan, r) for r in ("filter-s2only", "judge-samemode-BP", "D"))
    assert mine[("s0", 42)] == d[("s0", 42)]
    assert mine[("s1", 42)] == theirs[("s1", 42)]          # BP, no filter, same-mode, on D
    assert mine[("s2", 42)] != theirs[("s2", 42)]          # the s2 filter differs


def test_filter_s2only_does_not_reuse_the_filtered_s1_of_its_parent():
    plan = Plan.load(REPO)
    mine, parent = ids_by_stage(plan, "filter-s2only"), ids_by_stage(plan, "filter-twostage")
    assert mine[("s1", 42)] != parent[("s1", 42)]


def test_seeds_share_pretrain_and_distill_but_train_and_eval_are_per_seed():
    plan = Plan.load(REPO)
    rows = plan.run_stages("twostage-v2-k3")
    assert sorted({r.seed for r in rows}) == [41, 42, 43]
    assert len({r.model_stage for r in rows if r.stage == "s0"}) == 1
    assert len({r.eval_stage for r in rows if r.stage == "s0"}) == 3
    assert len({r.model_stage for r in rows if r.stage == "s1"}) == 3
    # seed 42 of the 3-seed run is exactly the single-seed parent
    assert ids_by_stage(plan, "twostage-v2-D-snap").items() <= ids_by_stage(plan, "twostage-v2-k3").items()


def test_campaign_needs_fewer_distinct_stages_than_the_naive_per_run_sum():
    plan = Plan.load(REPO)
    runs = plan.active_run_ids()
    assert len(plan.stages_for(runs)) == 44
    assert plan.naive_count(runs) == 92


def test_changing_a_knob_changes_exactly_the_downstream_ids(proj):
    before = Plan.load(proj)
    (proj / "conf/runs/filter-twostage.yaml").write_text(
        "parent: filter-twostage-s2a\nknob: stages.s2.filter=top-half\n")
    after = Plan.load(proj)
    changed = {"filter-twostage", "filter-s2only"}
    for run in before.run_ids():
        old, new = ids_by_stage(before, run), ids_by_stage(after, run)
        if run not in changed:
            assert old == new, run
            continue
        assert old[("s0", 42)] == new[("s0", 42)] and old[("s1", 42)] == new[("s1", 42)], run
        assert old[("s2", 42)][0] != new[("s2", 42)][0] and old[("s2", 42)][1] != new[("s2", 42)][1], run


def test_stage_name_is_not_in_the_hash_so_an_s2_only_run_shares_the_s1_of_A_on_D(proj):
    write_run(proj, "s2only-A.yaml", "parent: D\nknob: stages.s2.reward=A\n")
    plan = Plan.load(proj)
    assert ids_by_stage(plan, "s2only-A")[("s2", 42)] == ids_by_stage(plan, "A-on-D")[("s1", 42)]


def test_resources_do_not_change_stage_ids(proj):
    write_run(proj, "bigmem.yaml", "parent: D\nknob: model.resources.mem_mb=16000\n")
    plan = Plan.load(proj)
    assert ids_by_stage(plan, "bigmem") == ids_by_stage(plan, "D")
    sid = plan.run_stages("bigmem")[0].eval_stage
    assert plan.stages[sid].resources["mem_mb"] in (4000, 16000)


def test_local_weights_replace_pretrain_with_a_weights_source_and_ask_for_a_gpu(proj):
    write_run(proj, "llama.yaml", "parent: base\nknob: model=llama31_8b\n")
    plan = Plan.load(proj)
    s0 = plan.run_stages("llama")[0].model_stage
    assert s0.startswith("weights-")
    assert plan.run_chain("llama")[0] == s0
    assert not any(plan.stages[s].kind == "pretrain" for s in plan.run_chain("llama"))
    assert plan.stages[s0].resources["gpu"] == 1 and plan.stages[s0].resources["mem_mb"] == 64000


def test_each_stage_gets_exactly_its_config_slice():
    plan = Plan.load(REPO)
    keys = {"pretrain": {"world", "model", "pretrain"}, "distill": {"world", "model", "distill"},
            "train": {"world", "model", "elicit", "stage", "seed"},
            "eval": {"world", "model", "elicit", "eval", "seed"}}
    for st in plan.stages.values():
        assert set(st.cfg) == keys[st.kind], st.id
    roles = {"pretrain": set(), "distill": {"base_model"}, "train": {"start_model", "judge_model"},
             "eval": {"model", "judge_model"}}
    for st in plan.stages.values():
        assert set(st.inputs) == roles[st.kind]


def test_judge_is_the_runs_s0_model():
    plan = Plan.load(REPO)
    rows = plan.run_stages("filter-s2only")
    s0 = rows[0].model_stage
    for r in rows:
        assert plan.stages[r.eval_stage].inputs["judge_model"] == s0
        if r.stage != "s0":
            assert plan.stages[r.model_stage].inputs["judge_model"] == s0


def test_planning_the_campaign_takes_under_two_seconds():
    t = time.perf_counter()
    Plan.load(REPO)
    assert time.perf_counter() - t < 2.0
