"""The plan: content ids, shared prefixes, and what a changed knob invalidates."""
from __future__ import annotations

import re

import pytest

from martingale.plan import Plan
from martingale.store import STORE, stage_dir

from projcopy import FIXTURE, proj, write_run  # noqa: F401 (proj: fixture)


def ids_by_stage(plan: Plan, run_id: str) -> dict[tuple[str, int], tuple[str, str]]:
    return {(r.stage, r.seed): (r.model_stage, r.eval_stage) for r in plan.run_stages(run_id)}


@pytest.fixture(scope="module")
def campaign() -> Plan:
    """The plan of the frozen fixture campaign (tests/fixtures/conf); read-only."""
    return Plan.load(FIXTURE)


def test_stage_ids_are_kind_dash_twelve_hex_and_live_in_the_store(campaign):
    folders: dict[str, set[str]] = {}
    for sid, st in campaign.stages.items():
        assert re.fullmatch(rf"{st.kind}-[0-9a-f]{{12}}", sid)
        assert stage_dir(sid).startswith(f"{STORE}/") and stage_dir(sid).endswith(f"/{sid}")
        folders.setdefault(st.kind, set()).add(stage_dir(sid).rsplit("/", 1)[0])
    assert all(len(f) == 1 for f in folders.values())            # one store folder per kind
    assert len(set().union(*folders.values())) == len(folders)   # and no two kinds share one


def test_every_run_shares_the_one_pretrain_stage(campaign):
    assert [s.kind for s in campaign.stages.values()].count("pretrain") == 1
    assert {campaign.run_chain(r)[0] for r in campaign.run_ids()} == \
        {s.id for s in campaign.stages.values() if s.kind == "pretrain"}


def test_all_arms_starting_from_D_share_one_distill_id_per_seed(campaign):
    plan = campaign
    d_runs = [r for r in plan.run_ids() if plan.resolved_config(r)["start"] == "D"
              and plan.resolved_config(r)["seeds"] == [42]]
    assert len(d_runs) > 1
    distills = {plan.run_stages(r)[0].model_stage for r in d_runs}
    assert len(distills) == 1 and next(iter(distills)).startswith("distill-")


def test_filter_s2only_reuses_D_s0_eval_and_the_unfiltered_BP_stage_of_judge_samemode_BP(campaign):
    mine, theirs, d = (ids_by_stage(campaign, r) for r in ("filter-s2only", "judge-samemode-BP", "D"))
    assert mine[("s0", 42)] == d[("s0", 42)]
    assert mine[("s1", 42)] == theirs[("s1", 42)]          # BP, no filter, same-mode, on D
    assert mine[("s2", 42)] != theirs[("s2", 42)]          # the s2 filter differs


def test_filter_s2only_does_not_reuse_the_filtered_s1_of_its_parent(campaign):
    mine, parent = ids_by_stage(campaign, "filter-s2only"), ids_by_stage(campaign, "filter-twostage")
    assert mine[("s1", 42)] != parent[("s1", 42)]


def test_seeds_share_pretrain_but_distill_train_and_eval_are_per_seed(campaign):
    """D is trained, so each seed distils its own: its training noise is a seed's."""
    plan = campaign
    rows = plan.run_stages("twostage-v2-k3")
    assert sorted({r.seed for r in rows}) == [41, 42, 43]
    assert len({r.model_stage for r in rows if r.stage == "s0"}) == 3
    assert all(plan.stages[r.model_stage].cfg["seed"] == r.seed for r in rows if r.stage == "s0")
    assert len({r.eval_stage for r in rows if r.stage == "s0"}) == 3
    assert len({r.model_stage for r in rows if r.stage == "s1"}) == 3
    assert len({plan.stages[s].inputs.get("model") for s in plan.run_chain("twostage-v2-k3")
                if plan.stages[s].kind == "distill"}) == 1                     # one pretrained base
    # seed 42 of the 3-seed run is exactly the single-seed parent
    assert ids_by_stage(plan, "twostage-v2-D-snap").items() <= ids_by_stage(plan, "twostage-v2-k3").items()


def test_a_seed_offset_moves_every_seed_of_every_run(proj, monkeypatch):
    """A reseed: $MARTINGALE_SEED_OFFSET (conf/config.yaml's seed_offset) adds to every run's seeds,
    so no stage of one build is a stage of the other."""
    before = Plan.load(proj)
    monkeypatch.setenv("MARTINGALE_SEED_OFFSET", "5")
    after = Plan.load(proj)
    assert sorted({r.seed for r in after.run_stages("twostage-v2-k3")}) == [46, 47, 48]
    shared = set(before.stages) & set(after.stages)
    assert {before.stages[s].kind for s in shared} <= {"pretrain", "weights"}


def test_a_runs_chain_is_its_start_model_then_per_seed_an_eval_per_stage_and_a_train_per_step(campaign):
    # ... and, from D, per seed the natural base measured the same way (from base that is its s0 eval)
    for run in campaign.run_ids():
        cfg = campaign.resolved_config(run)
        steps = sum(st.get("reward") is not None for st in cfg["stages"].values())
        from_d = cfg["start"] == "D"
        # pretrain, then per seed: distill for D, an eval and a train per step, the natural base's eval
        assert len(campaign.run_chain(run)) == 1 + len(cfg["seeds"]) * (1 + 2 * steps + 2 * from_d), run


def test_campaign_needs_fewer_distinct_stages_than_the_naive_per_run_sum(campaign):
    runs = campaign.active_run_ids()
    chains = [campaign.run_chain(r) for r in runs]
    assert campaign.naive_count(runs) == sum(len(c) for c in chains)
    assert len(campaign.stages_for(runs)) == len(set().union(*chains)) < campaign.naive_count(runs)


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


def test_each_stage_gets_exactly_its_config_slice_and_input_roles(campaign):
    # by the stage's place in a run (start model, distilled D, trained step, eval), not its kind name
    plan = campaign
    for run in plan.run_ids():
        chain, rows = plan.run_chain(run), plan.run_stages(run)
        expect = {chain[0]: ({"world", "model", "pretrain"}, set())}
        if plan.resolved_config(run)["start"] == "D":
            for r in rows:
                if r.stage == "s0":
                    expect[r.model_stage] = ({"world", "model", "distill", "seed"}, {"base_model"})
        for r in rows:
            if r.stage != "s0":
                expect[r.model_stage] = ({"world", "model", "elicit", "stage", "seed"}, {"start_model", "judge_model"})
            expect[r.eval_stage] = ({"world", "model", "elicit", "eval", "seed"}, {"model", "judge_model"})
        for e in plan.natural_evals(run):
            expect[e["eval_stage"]] = ({"world", "model", "elicit", "eval", "seed"}, {"model", "judge_model"})
        assert sorted(expect) == sorted(chain), run
        for sid, (keys, roles) in expect.items():
            assert (set(plan.stages[sid].cfg), set(plan.stages[sid].inputs)) == (keys, roles), (run, sid)


def test_the_judge_is_the_natural_model_by_default_so_base_and_D_are_read_by_one_judge(campaign):
    plan = campaign
    natural = plan.run_chain("filter-s2only")[0]
    rows = plan.run_stages("filter-s2only")
    assert rows[0].model_stage.startswith("distill-")
    for r in rows:
        assert plan.stages[r.eval_stage].inputs["judge_model"] == natural
        if r.stage != "s0":
            assert plan.stages[r.model_stage].inputs["judge_model"] == natural
    assert plan.stages[plan.run_stages("base")[0].eval_stage].inputs["judge_model"] == natural


def test_judge_model_start_makes_the_runs_start_model_the_judge(proj):
    write_run(proj, "D-selfjudge.yaml", "parent: D\nknob: elicit.judge_model=start\n")
    plan = Plan.load(proj)
    d = plan.run_stages("D-selfjudge")[0]
    assert plan.stages[d.eval_stage].inputs["judge_model"] == d.model_stage
    assert d.eval_stage != plan.run_stages("D")[0].eval_stage


def test_judge_model_changes_no_stage_of_a_run_that_starts_from_base(proj):
    write_run(proj, "base-selfjudge.yaml", "parent: base\nknob: elicit.judge_model=start\n")
    plan = Plan.load(proj)
    assert ids_by_stage(plan, "base-selfjudge") == ids_by_stage(plan, "base")


def test_a_D_run_also_measures_the_natural_base_the_same_way_once_per_seed(campaign):
    plan = campaign
    natural = plan.natural_evals("twostage-v2-k3")
    assert [e["seed"] for e in natural] == [41, 42, 43]
    assert all(plan.stages[e["eval_stage"]].inputs["model"] == plan.run_chain("twostage-v2-k3")[0] for e in natural)
    assert [e["eval_stage"] for e in plan.natural_evals("base")] == [plan.run_stages("base")[0].eval_stage]


def test_a_run_keeps_its_config_hash_whatever_the_sections_it_does_not_use_say():
    from martingale.plan import config_hash
    tree_cfg = Plan.load(FIXTURE).resolved_config("base")
    single = config_hash(tree_cfg)
    assert config_hash({**tree_cfg, "simulate": {**tree_cfg["simulate"], "mode": "truth"},
                        "instructor": {**tree_cfg["instructor"], "iterations": 99}}) == single
    episodes = {**tree_cfg, "eval": {**tree_cfg["eval"], "kind": "simulate"}}
    assert config_hash({**episodes, "simulate": {**episodes["simulate"], "mode": "truth"}}) != config_hash(episodes)
    assert config_hash({**episodes, "instructor": {**episodes["instructor"], "iterations": 99}}) == config_hash(episodes)


def test_more_training_questions_share_bases_pretrain_and_D(proj):
    # split sizes say how many questions a run asks; pretrain and distill ask none
    write_run(proj, "A-on-D-more.yaml", "parent: A-on-D\nknob: world.n_train=2560\n")
    plan = Plan.load(proj)
    assert plan.run_chain("A-on-D-more")[:2] == plan.run_chain("A-on-D")[:2]
    assert ids_by_stage(plan, "A-on-D-more")[("s1", 42)] != ids_by_stage(plan, "A-on-D")[("s1", 42)]


def test_keys_added_at_their_defaults_leave_a_runs_stage_slices_as_they_were():
    """elicit.read=verbal, model.generate_batch / loss_batch = 0 and prompts.context_words = null
    are not in any slice (the ids of runs from before the keys existed stay as they were);
    loss_batch, once set, only in a training stage's."""
    from martingale.plan import stage_slice
    from martingale.stages import kinds
    cfg = Plan.load(FIXTURE).resolved_config("base")
    cfg["prompts"] = {**cfg["prompts"], "name": "log"}
    for kind in kinds().values():
        sl = stage_slice(kind, cfg, "s1" if kind.place == "step" else None, 0 if kind.per_seed else None)
        assert "read" not in sl.get("elicit", {}) and "context_words" not in sl.get("prompts", {}), kind.name
        assert not {"generate_batch", "loss_batch"} & set(sl.get("model", {})), kind.name
    cfg["model"] = {**cfg["model"], "generate_batch": 8, "loss_batch": 2}
    has = {k.name: set(stage_slice(k, cfg, "s1" if k.place == "step" else None, 0).get("model", {}))
           for k in kinds().values()}
    assert "loss_batch" in has["train"] and "loss_batch" not in has["evaluate"]
    assert "generate_batch" in has["evaluate"] and "generate_batch" not in has["pretrain"]


def test_a_stage_feeding_a_longer_chain_gets_a_higher_priority(campaign):
    # long chains first: pretrain → D → s1 → s2 → eval outranks the evals it feeds
    depth = campaign.chain_lengths()
    chain = campaign.run_chain("filter-s2only")
    assert depth[chain[0]] > depth[chain[1]]
    for sid, st in campaign.stages.items():
        assert depth[sid] == 1 + max((depth[d] for d, s in campaign.stages.items() if sid in s.inputs.values()),
                                     default=0)
        if st.kind == "evaluate":
            assert depth[sid] == 1


def test_a_stage_of_several_threads_outranks_as_many_one_thread_stages_together(campaign):
    # it starts only when its cores are free at once: ranked by chain length alone it waited for the end
    prio, depth = campaign.priorities(), campaign.chain_lengths()
    threads = {sid: st.resources["threads"] for sid, st in campaign.stages.items()}
    wide = [sid for sid in prio if threads[sid] > 1]
    narrow = max(prio[sid] for sid in prio if threads[sid] == 1)
    assert wide and all(prio[sid] > threads[sid] * narrow for sid in wide)
    assert all(prio[sid] == depth[sid] for sid in prio if threads[sid] == 1)
    assert all(prio[a] > prio[b] for a in wide for b in wide if threads[a] == threads[b] and depth[a] > depth[b])


def test_a_kinds_resources_are_constants_only_where_all_its_stages_agree(proj):
    write_run(proj, "llama.yaml", "parent: base\nknob: model=llama31_8b\n")
    plan, uniform = Plan.load(proj), Plan.load(FIXTURE).kind_resources("evaluate")
    assert uniform == {"threads": 1, "mem_mb": 4000, "runtime": 30, "gpu": None, "gpu_model": None,
                       "device": "auto", "nodes": None}
    mixed = plan.kind_resources("evaluate")   # llama's evals ask for a GPU and 64000: per job
    assert mixed == {"device": "auto", "nodes": None}


def test_a_training_stage_on_a_cpu_has_its_thread_count_in_its_id_and_an_eval_does_not(proj):
    # BLAS splits a gradient's sums by thread: pretrain at 1 and at 2 threads differ in their bytes
    write_run(proj, "one-thread.yaml", "parent: base\nknob: model.resources.pretrain_cpus=1\n")
    write_run(proj, "llama.yaml", "parent: base\nknob: model=llama31_8b\n")
    plan = Plan.load(proj)
    two, one = plan.run_chain("base"), plan.run_chain("one-thread")
    assert plan.stages[two[0]].cfg["model"]["threads"] == 2 and plan.stages[one[0]].cfg["model"]["threads"] == 1
    assert plan.stages[two[0]].resources["threads"] == 2                  # and it asks Snakemake for 2
    assert one[0] != two[0]
    assert all("threads" not in plan.stages[s].cfg["model"] for s in one if plan.stages[s].kind == "evaluate")
    assert all("threads" not in plan.stages[s].cfg.get("model", {}) for s in plan.run_chain("llama"))  # on GPUs


def test_a_heldout_redraw_rebuilds_every_evaluation_and_no_training_stage(proj, monkeypatch):
    """$MARTINGALE_HELDOUT_DRAW (world.heldout_draw, as conf/config.yaml reads it): fresh held-out
    questions from the same world; the stages that train keep their ids, so only evaluations rebuild."""
    with (proj / "conf" / "config.yaml").open("a", encoding="utf-8") as f:
        f.write("world: {heldout_draw: '${oc.decode:${oc.env:MARTINGALE_HELDOUT_DRAW,0}}'}\n")
    before = Plan.load(proj)
    monkeypatch.setenv("MARTINGALE_HELDOUT_DRAW", "1")
    after = Plan.load(proj)
    new = set(after.stages) - set(before.stages)
    assert new and {after.stages[s].kind for s in new} <= {"evaluate", "simulate"}
    assert {before.stages[s].kind for s in set(before.stages) - set(after.stages)} <= {"evaluate", "simulate"}
