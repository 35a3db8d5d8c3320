"""The knob's paired effect: child − parent per stage on the same questions, the robustness battery
checked against scipy's own tests, degenerate pairs explained, replicates counted, and the aggregate
writing it all into eval.json (and the table's headline)."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from martingale.metrics import MetricError, stage_metrics
from martingale.records.aggregate import forest_rows, write_run_results
from martingale.stats.effects import (
    EffectError,
    brier_effect,
    ms_effect,
    pair_records,
    paired_effect,
    replicate_summary,
)
from martingale.stats.seeds import seed_blocks
from martingale.store import files


def _data(n=300, seed=0, better=0.05):
    rng = np.random.default_rng(seed)
    y = (rng.random(n) < 0.4).astype(int)
    parent = np.clip(0.4 + 0.3 * (y - 0.4) + rng.normal(0, 0.25, n), 0, 1)
    child = np.clip(parent + better * np.where(y == 1, 1, -1) + rng.normal(0, 0.05, n), 0, 1)
    return y, child, parent


def test_brier_effect_matches_scipy_and_hand_computation():
    y, c, p = _data()
    e = brier_effect(y, c, p, n_bootstrap=500, seed=0)
    lc, lp = (y - c) ** 2, (y - p) ** 2
    assert e["delta"] == pytest.approx(np.mean(lc - lp)) and e["delta"] < 0
    assert e["child"] == pytest.approx(lc.mean()) and e["parent"] == pytest.approx(lp.mean())
    t = stats.ttest_1samp(lc - lp, 0.0)          # paired t = one-sample t on the differences
    assert e["t"] == pytest.approx(t.statistic) and e["p_t"] == pytest.approx(t.pvalue)
    w = stats.wilcoxon(lc - lp)                   # Wilcoxon signed-rank on the differences
    assert e["wilcoxon"] == pytest.approx(w.statistic) and e["p_wilcoxon"] == pytest.approx(w.pvalue)
    assert e["share_child_wins"] == pytest.approx(np.mean(lc < lp))
    assert e["share_ties"] == pytest.approx(np.mean(lc == lp))
    lo, hi = e["ci"]
    assert lo < e["delta"] < hi < 0
    # the CI is scipy's paired bootstrap of the mean difference, seeded
    ref = stats.bootstrap((lc - lp,), np.mean, n_resamples=500, method="percentile",
                          rng=np.random.default_rng(0)).confidence_interval
    assert (lo, hi) == pytest.approx((ref.low, ref.high), abs=2e-3)
    assert e["undefined"] == {} and e["n"] == len(y)


def test_no_effect_gives_large_p_and_a_ci_covering_zero():
    y, _, p = _data(seed=1)
    c = np.clip(p + np.random.default_rng(5).normal(0, 0.05, len(p)), 0, 1)
    e = brier_effect(y, c, p, n_bootstrap=500)
    assert e["ci"][0] < 0 < e["ci"][1] and e["p_t"] > 0.05


def test_identical_child_and_parent_give_zero_with_the_tests_explained():
    y, _, p = _data()
    e = brier_effect(y, p, p)
    assert e["delta"] == 0 and e["ci"] == [0.0, 0.0] and e["share_ties"] == 1.0
    assert math.isnan(e["p_t"]) and math.isnan(e["p_wilcoxon"])
    assert "every paired difference is 0" in e["undefined"]["p_t"]
    prior = np.linspace(0.1, 0.9, 30)
    m = ms_effect(prior, prior, prior, prior)
    assert m["delta"] == 0 and m["ci"] == [0.0, 0.0] and math.isnan(m["p_perm"])
    assert "same beliefs" in m["undefined"]["p_perm"]


@pytest.mark.parametrize("call, match", [
    (lambda: brier_effect([1, 0], [0.5, 0.5], [0.4, 0.4]), "at least 3 paired"),
    (lambda: brier_effect([1, 0, 1], [0.5, np.nan, 0.5], [0.4, 0.4, 0.4]), "NaN"),
    (lambda: brier_effect([1, 0, 1], [0.5, 0.5], [0.4, 0.4, 0.4]), "paired"),
    (lambda: ms_effect([0.5] * 5, [0.1, 0.2, 0.3, 0.4, 0.5], np.linspace(0, 1, 5), np.linspace(0, 1, 5)),
     "constant child prior"),
])
def test_effects_of_degenerate_pairs_raise_clear_errors(call, match):
    with pytest.raises(MetricError, match=match):
        call()


def test_too_few_pairs_for_an_interval_is_a_nan_with_its_reason():
    e = brier_effect([1, 0, 1, 0], [0.9, 0.1, 0.8, 0.3], [0.6, 0.4, 0.5, 0.5])
    assert all(math.isnan(v) for v in e["ci"]) and "too few" in e["undefined"]["ci"]
    assert not math.isnan(e["p_t"])


def _ms_pair(n=400, seed=0, entrench=0.4):
    rng = np.random.default_rng(seed)
    prior = rng.uniform(0.05, 0.95, n)
    y = rng.random(n) < prior
    post_p = np.clip(prior + entrench * (prior - 0.5) + rng.normal(0, 0.05, n), 0, 1)     # parent entrenches
    post_c = np.clip(prior + 0.3 * (y - prior) + rng.normal(0, 0.05, n), 0, 1)            # child: martingale
    return prior, post_c, prior, post_p


def test_ms_effect_is_the_difference_of_the_scipy_slopes_with_a_permutation_p():
    a = _ms_pair()
    m = ms_effect(*a, n_bootstrap=400, seed=0)
    s = lambda pr, po: stats.linregress(pr - 0.5, po - pr).slope  # noqa: E731
    assert m["delta"] == pytest.approx(s(a[0], a[1]) - s(a[2], a[3]))
    assert m["ci"][0] < m["delta"] < m["ci"][1] < 0
    assert m["p_perm"] < 0.01


def test_swapping_child_and_parent_mirrors_the_effect_exactly():
    a = _ms_pair(n=120, seed=3)
    fwd, back = ms_effect(*a, n_bootstrap=200, seed=7), ms_effect(a[2], a[3], a[0], a[1], n_bootstrap=200, seed=7)
    assert back["delta"] == pytest.approx(-fwd["delta"])
    assert back["ci"] == pytest.approx([-fwd["ci"][1], -fwd["ci"][0]])
    y, c, p = _data(n=120)
    f, b = brier_effect(y, c, p, 200, seed=7), brier_effect(y, p, c, 200, seed=7)
    assert b["ci"] == pytest.approx([-f["ci"][1], -f["ci"][0]]) and b["p_t"] == pytest.approx(f["p_t"])
    assert b["p_wilcoxon"] == pytest.approx(f["p_wilcoxon"])


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 2 ** 32 - 1), st.integers(12, 60))
def test_paired_t_and_wilcoxon_are_scipys_on_random_pairs(seed, n):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, n)
    c, p = rng.random(n), rng.random(n)
    e = brier_effect(y, c, p, n_bootstrap=50, seed=0)
    lc, lp = (y - c) ** 2, (y - p) ** 2
    assert e["p_t"] == pytest.approx(stats.ttest_rel(lc, lp).pvalue)
    assert e["p_wilcoxon"] == pytest.approx(stats.wilcoxon(lc, lp).pvalue)
    assert e["ci"][0] <= e["delta"] <= e["ci"][1]


# ------------------------------------------------------------------------------- pairing records
def _rows(p, y, qids=None, bayes=None):
    qids = qids or [f"ho{i:05d}" for i in range(len(p))]
    return [{"qid": q, "y": int(yi), "stated": pi, "prior": pi, "posterior": pi,
             "bayes_end": None if bayes is None else bayes[i]} for i, (q, pi, yi) in enumerate(zip(qids, p, y))]


def test_records_pair_by_qid_in_the_childs_order_and_skip_unmatched():
    child = _rows([0.1, 0.2, 0.3], [0, 1, 0], ["a", "b", "c"])
    parent = _rows([0.9, 0.7], [1, 0], ["b", "a"])
    c, p = pair_records(child, parent)
    assert [r["qid"] for r in c] == [r["qid"] for r in p] == ["a", "b"]


@pytest.mark.parametrize("parent, match", [
    (_rows([0.1, 0.2], [1, 1], ["a", "b"]), "resolves y=0 for the child but y=1"),
    (_rows([0.1, 0.2], [0, 1], ["a", "b"], bayes=[0.3, 0.9]), "different evidence"),
    (_rows([0.1, 0.2], [0, 0], ["a", "a"]), "repeat qid"),
])
def test_records_of_different_questions_do_not_pair(parent, match):
    child = _rows([0.1, 0.2], [0, 1], ["a", "b"], bayes=[0.3, 0.4])
    with pytest.raises(EffectError, match=match):
        pair_records(child, parent)


def test_paired_effect_uses_only_questions_both_parsed_and_explains_missing_parts():
    y, c, p = _data(n=40)
    child = _rows(list(c), y)
    parent = _rows(list(p), y)
    child[0]["stated"] = None
    for r in child:
        r["prior"] = 0.5                       # constant prior: ΔMS undefined
    e = paired_effect(child, parent, n_bootstrap=100)
    assert e["n_paired"] == 40 and e["brier"]["n"] == 39
    assert "constant child prior" in e["undefined"]["ms"]
    # the block keeps its shape: every number NaN, with the reason, never a silent number
    assert math.isnan(e["ms"]["delta"]) and all(math.isnan(v) for v in e["ms"]["ci"])
    assert "constant child prior" in e["ms"]["undefined"]["p_perm"] and e["ms"]["n"] == 40


def test_replicate_summary_counts_seeds_that_beat_the_parent():
    per_seed = {41: {"brier": {"delta": -0.02, "ci": [-0.03, -0.01]}, "ms": {"delta": 0.01}},
                42: {"brier": {"delta": -0.01, "ci": [-0.02, 0.005]}, "ms": {"delta": -0.01}},
                43: {"brier": {"delta": 0.01, "ci": [0.0, 0.02]}, "ms": {"delta": 0.0}},
                44: {"brier": {"delta": float("nan"), "ci": [float("nan")] * 2}, "ms": None}}
    s = replicate_summary(per_seed)
    assert s["beats_parent"] == {"k": 2, "n": 3} and s["beats_parent_ci"] == {"k": 1, "n": 3}
    assert s["brier_delta"]["per_seed"] == [-0.02, -0.01, 0.01, None]
    complete = replicate_summary({k: v for k, v in per_seed.items() if k != 44})["brier_delta"]
    assert complete["mean"] == pytest.approx(-0.02 / 3)
    assert complete["sd"] == pytest.approx(np.std([-0.02, -0.01, 0.01], ddof=1))


def test_a_seed_without_a_value_makes_the_spread_over_seeds_nan_in_effects_and_in_the_aggregate():
    """One rule (stats.seeds.seed_spread): a mean over the seeds that happened to give a value would
    pass for the run's; the seed's None stays in per_seed, the counts say how many were known."""
    from martingale.stats.seeds import combine_seeds
    per_seed = {41: {"brier": {"delta": -0.02}, "ms": {"delta": 0.01}},
                42: {"brier": {"delta": float("nan")}, "ms": {"delta": 0.0}}}
    effect = replicate_summary(per_seed)["brier_delta"]
    metric = combine_seeds({41: {"brier": 0.2}, 42: {"brier": float("nan")}})["brier"]
    for spread in (effect, metric):
        assert math.isnan(spread["mean"]) and math.isnan(spread["sd"])
    assert effect["per_seed"] == [-0.02, None] and metric["per_seed"] == [0.2, None]


# ------------------------------------------------------------------------------- the aggregate
def _eval(path, seed, shift, entrench, n=80, eval_stage=None):
    rng = np.random.default_rng([seed, int(100 * shift) + 50, int(100 * entrench)])
    qr = np.random.default_rng(0)                     # the questions: the same for every eval
    y = (qr.random(n) < 0.35).astype(int)
    bayes = np.clip(0.35 + 0.5 * (y - 0.35) + qr.normal(0, 0.15, n), 0.01, 0.99)
    prior = np.clip(bayes + rng.normal(0, 0.1, n), 0, 1)
    post = np.clip(prior + entrench * (prior - 0.5) + rng.normal(0, 0.05, n) + shift * (y - prior), 0, 1)
    recs = [{"qid": f"ho{i:05d}", "y": int(y[i]), "seed": seed, "prior": float(prior[i]),
             "posterior": float(post[i]), "stated": float(post[i]), "trace_cut": float(prior[i]),
             "trace_last": float(post[i]), "bayes_end": float(bayes[i]), "completion": "think"} for i in range(n)]
    path.mkdir(parents=True)
    files.write_jsonl(path / "records.jsonl", recs)
    files.write_json(path / "metrics.json", stage_metrics(recs, 100, 0.95, seed))
    return path


STAGES_PARENT = {"s0": (0.0, 0.0), "s1": (0.0, 0.3), "s2": (0.0, 0.6)}
STAGES_CHILD = {"s0": (0.0, 0.0), "s1": (0.3, 0.0), "s2": (0.5, 0.0)}


def _evals(root, who, stages, seeds):
    out = []
    for seed in seeds:
        for stage, (shift, ent) in stages.items():
            eid = "eval-s0" if stage == "s0" else f"eval-{who}-{stage}"
            d = _eval(root / f"{who}-{stage}-{seed}", seed, shift, ent)
            out.append({"stage": stage, "seed": seed, "dir": d, "model_stage": f"m-{who}-{stage}",
                        "eval_stage": f"{eid}-{seed}"})
    return out


LINEAGE = [{"run_id": "filter-twostage", "parent": None, "knob": None},
           {"run_id": "filter-s2only", "parent": "filter-twostage", "knob": "stages.s1.filter=null"}]
CFG = {"eval": {"n_bootstrap": 100, "ci": 0.95}}


@pytest.mark.slow
def test_aggregate_writes_the_knobs_effect_per_stage_and_the_headline(tmp_path):
    child, parent = _evals(tmp_path, "c", STAGES_CHILD, [42]), _evals(tmp_path, "p", STAGES_PARENT, [42])
    out = tmp_path / "results/filter-s2only"
    result = write_run_results("filter-s2only", CFG, LINEAGE, child, out, parent_evals=parent)
    ev = json.loads((out / "eval.json").read_text())
    assert ev == json.loads(files.canonical_json(result))
    s0, s2 = (seed_blocks(ev["stages"][s]["effect"])[0][1] for s in ("s0", "s2"))   # the one seed's blocks
    assert s0["same_eval_stage"] and s0["brier"]["delta"] == 0 and s0["brier"]["p_t"] is None
    assert "every paired difference is 0" in s0["brier"]["undefined"]["p_t"]
    for key in ("delta", "ci", "p_t", "p_wilcoxon", "t", "wilcoxon", "share_child_wins", "n"):
        assert s2["brier"][key] is not None, key
    assert s2["brier"]["delta"] < 0 and s2["brier"]["ci"][1] < 0 and s2["n_paired"] == 80
    assert s2["ms"]["delta"] < 0 and 0 < s2["ms"]["p_perm"] <= 1 and s2["ms"]["ci"][0] < s2["ms"]["delta"]
    head = ev["effect"]
    assert head["parent"] == "filter-twostage" and head["knob"] == "stages.s1.filter=null"
    assert head["headline"]["stage"] == "s2" and head["headline"]["brier_delta"] == s2["brier"]["delta"]
    assert ev["stages"]["s2"]["counts"]["beats_parent"] == {"k": 1, "n": 1}
    from martingale.records.plots import PLOTS
    assert sorted(p.name for p in (out / "plots").iterdir()) == sorted(f"{n}.png" for n in PLOTS)


@pytest.mark.slow
def test_aggregate_is_byte_identical_when_run_twice(tmp_path):
    child, parent = _evals(tmp_path, "c", STAGES_CHILD, [42]), _evals(tmp_path, "p", STAGES_PARENT, [42])
    a, b = tmp_path / "a", tmp_path / "b"
    write_run_results("filter-s2only", CFG, LINEAGE, child, a, parent_evals=parent)
    write_run_results("filter-s2only", CFG, LINEAGE, child, b, parent_evals=parent)
    for rel in ("eval.json", "records.jsonl", "plots/effect_forest.png", "plots/delta_vs_prior.png"):
        assert (a / rel).read_bytes() == (b / rel).read_bytes(), rel


@pytest.mark.slow
def test_replicates_get_per_seed_effects_the_spread_and_counts(tmp_path):
    child = _evals(tmp_path, "c", STAGES_CHILD, [41, 42, 43])
    parent = _evals(tmp_path, "p", STAGES_PARENT, [42])           # a seeds knob: the parent has one seed
    result = write_run_results("k3", CFG, LINEAGE[:1] + [{"run_id": "k3", "parent": "filter-twostage",
                                                         "knob": "seeds=[41,42,43]"}],
                               child, tmp_path / "out", parent_evals=parent, plots=False)
    eff = result["stages"]["s2"]["effect"]
    assert sorted(eff["per_seed"]) == ["41", "42", "43"] and eff["seeds"] == [41, 42, 43]
    assert {b["parent_seed"] for b in eff["per_seed"].values()} == {42}
    assert eff["beats_parent"] == {"k": 3, "n": 3} and len(eff["brier_delta"]["per_seed"]) == 3
    assert result["stages"]["s2"]["counts"]["beats_parent"] == {"k": 3, "n": 3}
    assert result["effect"]["headline"]["beats_parent"] == {"k": 3, "n": 3}
    assert result["stages"]["s2"]["counts"]["beats_start"]["n"] == 3


def test_a_knob_that_adds_a_stage_is_headlined_by_its_final_stage_against_the_parents_final(tmp_path):
    child = _evals(tmp_path, "c", STAGES_CHILD, [42])
    parent = _evals(tmp_path, "p", {"s0": (0.0, 0.0), "s1": (0.0, 0.3)}, [42])
    result = write_run_results("x", CFG, LINEAGE, child, tmp_path / "out", parent_evals=parent, plots=False)
    assert "effect" not in result["stages"]["s2"]          # the parent has no s2 to pair stage by stage
    final, head = result["effect"]["final"], result["effect"]["headline"]
    assert (final["stage"], final["parent_stage"]) == ("s2", "s1") and not final["same_eval_stage"]
    assert result["effect"]["compares"] == head["compares"] == "s2 vs parent s1"
    assert head["brier_delta"] == seed_blocks(final)[0][1]["brier"]["delta"] < 0 and head["brier_ci"][1] < 0
    assert 0 <= head["p_t"] <= 1 and 0 <= head["p_wilcoxon"] <= 1 and head["ms_ci"][0] < head["ms_delta"]
    assert result["stages"]["s2"]["counts"]["beats_parent"] == {"k": 1, "n": 1}


def test_the_headline_is_never_a_shared_eval(tmp_path):
    child = _evals(tmp_path, "p", STAGES_PARENT, [42])[:1]   # the parent's own s0 eval: Δ ≡ 0
    parent = _evals(tmp_path / "parent", "p", STAGES_PARENT, [42])[:1]
    result = write_run_results("x", CFG, LINEAGE, child, tmp_path / "out", parent_evals=parent, plots=False)
    assert result["effect"]["final"]["same_eval_stage"] and result["effect"]["headline"] is None


def test_an_undefined_final_effect_is_no_headline_on_one_seed_or_several():
    from martingale.records.aggregate import headline
    from martingale.stats.effects import replicate_summary, undefined_effect
    from martingale.stats.seeds import with_seed_blocks
    label = {"stage": "s1", "parent_stage": "s0", "same_eval_stage": False}
    for seeds in ([42], [41, 42, 43]):
        blocks = {s: {**undefined_effect("no question pairs"), **label} for s in seeds}
        assert headline(with_seed_blocks(blocks, **label, **replicate_summary(blocks))) is None, seeds


def test_the_effect_forest_shows_final_vs_final_first():
    effects = {"s0": {"stage": "s0"}, "s1": {"stage": "s1"}}
    final = {"stage": "s2", "parent_stage": "s1"}
    assert list(forest_rows(effects, final)) == ["s2 vs parent s1", "s0", "s1"]
    assert list(forest_rows(effects, {"stage": "s1", "parent_stage": "s1"})) == ["s1 vs parent s1", "s0"]


def test_a_root_run_has_no_effect(tmp_path):
    child = _evals(tmp_path, "c", STAGES_CHILD, [42])
    result = write_run_results("base", CFG, LINEAGE[:1], child, tmp_path / "out")
    assert result["effect"] is None and "effect" not in result["stages"]["s1"]
    assert (tmp_path / "out/plots/effect_forest.png").exists()
