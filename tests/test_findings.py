"""FINDINGS.md: each finding of conf/findings.yaml with its number, CI and a verdict by the stated
rule; a bad findings file fails in one line and writes nothing."""
from __future__ import annotations

import math
from pathlib import Path

import pytest

from martingale.config.runs import RunTree
from martingale.table import TableError, findings, write_table

from projcopy import FIXTURE, REPO, proj, snapshot, write_eval  # noqa: F401 (proj: fixture)


def finding(root: Path, run: str = "D", metric: str = "ms", expect: str = "> 0", stage: str = "s0",
            fid: str = "D-entrenches", margin: float | None = None, extra: str = "") -> None:
    m = f", margin: {margin}" if margin is not None else ""
    (root / "conf" / "findings.yaml").write_text(
        f'{fid}:\n  claim: C1\n  log: "2026-05-21 — D (B-distill)"\n'
        f'  statement: "D\'s same-mode MS > 0"\n'
        f'  test: {{run: {run}, stage: {stage}, metric: {metric}, expect: "{expect}"{m}}}\n' + extra, encoding="utf-8")


def summary_row(root: Path, fid: str = "D-entrenches") -> list[str]:
    """The cells of the finding's summary row, the table written first."""
    write_table(root)
    md = (root / "FINDINGS.md").read_text(encoding="utf-8")
    row = next(ln for ln in md.splitlines() if ln.startswith(f"| {fid} |"))
    return [cell.strip() for cell in row.split("|")[1:-1]]


def verdict(root: Path, fid: str = "D-entrenches") -> str:
    """The verdict cell of the finding's summary row."""
    return summary_row(root, fid)[-1]


def trained(stages: list[str], seeds: list[int], kind: str = "train") -> dict:
    """eval.json's provenance saying each stage's model came out of ``kind``."""
    return {"provenance": {st: {str(s): {"model_stage": f"{kind}-{s:012d}", "eval_stage": f"evaluate-{s:012d}"}
                                for s in seeds} for st in stages}}


@pytest.mark.parametrize("value, ci, expected", [(0.12, [0.05, 0.2], "reproduced"),
                                                 (-0.1, [-0.2, -0.02], "not reproduced"),
                                                 (0.0, [-0.1, 0.1], "inconclusive")])
def test_greater_than_zero_verdict_follows_the_ci(proj, value, ci, expected):
    finding(proj)
    write_eval(proj, "D", {"s0": {"ms": value, "ms_ci": ci}})
    assert verdict(proj) == expected


@pytest.mark.parametrize("value, ci, expected", [(-0.12, [-0.2, -0.05], "reproduced"),
                                                 (0.1, [0.02, 0.2], "not reproduced"),
                                                 (0.0, [-0.1, 0.1], "inconclusive")])
def test_less_than_zero_verdict_mirrors_greater_than_zero(proj, value, ci, expected):
    finding(proj, expect="< 0")
    write_eval(proj, "D", {"s0": {"ms": value, "ms_ci": ci}})
    assert verdict(proj) == expected


@pytest.mark.parametrize("value, ci, expected", [(0.0, [-0.05, 0.05], "reproduced"),
                                                 (0.05, [-0.05, 0.15], "inconclusive"),
                                                 (0.2, [0.12, 0.3], "not reproduced"),
                                                 (0.0, [-0.3, 0.3], "inconclusive")])
def test_a_null_is_reproduced_only_when_its_ci_lies_inside_its_margin(proj, value, ci, expected):
    """Equivalence, not a CI that happens to cover 0: the last case covers 0 and is wider than
    the margin, so it cannot reproduce the null (today's rule would have)."""
    finding(proj, expect="= 0", margin=0.1)
    write_eval(proj, "D", {"s0": {"ms": value, "ms_ci": ci}})
    assert verdict(proj) == expected


def test_a_null_whose_estimate_lies_outside_its_margin_needs_seeds_to_refute_it_not_more_than_100(proj):
    """Seeds to decide count toward either verdict: three seeds well past the margin already lie
    wholly outside it ("not reproduced"), so they are enough, where "> 100" would say no number of
    seeds could decide it."""
    finding(proj, run="twostage-v2-k3", expect="= 0", margin=0.1)
    seeds_eval(proj, [[-0.5, -0.3], [-0.55, -0.35], [-0.45, -0.25]], **trained(["s0"], [41, 42, 43]))
    *_, seeds_to_decide, verdict_cell = summary_row(proj)
    assert verdict_cell == "not reproduced (3 seeds)"
    assert seeds_to_decide == "3"


def test_a_trained_finding_on_one_seed_is_provisional_never_decided(proj):
    finding(proj)
    write_eval(proj, "D", {"s0": {"ms": 0.3, "ms_ci": [0.25, 0.35]}}, **trained(["s0"], [42], "distill"))
    assert verdict(proj) == "provisional (1 seed)"
    md = (proj / "FINDINGS.md").read_text()
    assert "seeds to decide: ≥ 2" in md and "1 provisional" in md


def test_a_trained_finding_on_three_seeds_is_decided_on_their_combined_ci(proj):
    finding(proj, run="twostage-v2-k3", expect="< 0")
    seeds_eval(proj, [[-0.5, -0.1], [-0.6, -0.2], [-0.7, -0.3]], **trained(["s0"], [41, 42, 43]))
    assert verdict(proj) == "reproduced (3 seeds)"
    md = (proj / "FINDINGS.md").read_text()
    assert "| -0.400 [" in md and "(trained)" in md and "sd: seeds" in md


def test_seeds_that_agree_because_they_share_their_questions_are_not_decided_beyond_the_questions(proj):
    """Three seeds at −0.016 ± 0.001 whose records say their question errors are one (eval.json's
    ``crossed``: a covariance of ±0.024 shared by every seed): the interval holds the questions'
    noise, so a slope whose every seed's CI covers 0 is not decided by their agreement."""
    finding(proj, run="twostage-v2-k3", expect="< 0")
    seeds_eval(proj, [[-0.065, 0.031], [-0.064, 0.032], [-0.062, 0.034]],
               crossed={"ms": {"cov": [[0.024 ** 2] * 3] * 3, "n_questions": 1000}})
    assert verdict(proj) == "inconclusive (3 seeds)"
    md = (proj / "FINDINGS.md").read_text()
    assert "questions shared 0.024, own 0.000 (1000 questions); seeds to decide: > 100" in md
    assert "held-out questions to decide: " in md


def test_a_decided_verdict_whose_q_misses_the_false_discovery_level_is_inconclusive(proj):
    """Three findings tested together: a clear one (p ≈ 0), one whose CI just excludes 0 (p ≈ 0.046)
    and a null result (p ≈ 1). Alone the edge would be reproduced; BH over three gives it
    q = 0.046·3/2 ≈ 0.07 > 0.05, so it is inconclusive."""
    entries = "".join(
        f'{fid}:\n  claim: C1\n  log: l\n  statement: s\n  test: {{run: D, stage: s0, metric: {metric}, expect: "> 0"}}\n'
        for fid, metric in (("clear", "ms"), ("edge", "brier"), ("nothing", "delta_brier")))
    (proj / "conf" / "findings.yaml").write_text(entries, encoding="utf-8")
    write_eval(proj, "D", {"s0": {"ms": 0.3, "ms_ci": [0.25, 0.35], "brier": 0.02, "brier_ci": [0.0004, 0.0396],
                                  "delta_brier": 0.0, "delta_brier_ci": [-0.02, 0.02]}})
    assert verdict(proj, "clear") == "reproduced"
    assert verdict(proj, "edge") == "inconclusive (q 0.068 > 0.05)"
    assert verdict(proj, "nothing") == "inconclusive"


def seeds_eval(root: Path, cis: list[list[float]], crossed: dict | None = None, **extra) -> None:
    values = [sum(c) / 2 for c in cis]
    write_eval(root, "twostage-v2-k3", {"s0": {"seeds": [41, 42, 43],
                                               "ms": {"mean": sum(values) / 3, "sd": 0.1, "per_seed": values},
                                               "ms_ci": {"per_seed": cis}, **({"crossed": crossed} if crossed else {})}},
               **extra)


@pytest.mark.parametrize("expect, count, expected", [
    ("all", "3/3", "reproduced"), ("all", "2/3", "inconclusive"), ("all", "0/3", "not reproduced"),
    ("none", "0/3", "reproduced"), ("none", "3/3", "not reproduced"),
    ("some", "1/5", "reproduced"), ("some", "0/5", "not reproduced"), ("some", "5/5", "not reproduced")])
def test_a_seed_count_finding_reads_k_of_n_by_its_own_rule(proj, expect, count, expected):
    finding(proj, metric="counts.beats_natural_base", expect=expect)
    k, n = map(int, count.split("/"))
    write_eval(proj, "D", {"s0": {"ms": 0.1, "counts": {"beats_natural_base": {"k": k, "n": n}}}})
    assert verdict(proj) == expected
    assert f"| {count} seeds |" in (proj / "FINDINGS.md").read_text(encoding="utf-8")


def test_a_seed_count_the_eval_does_not_have_is_no_result_yet(proj):
    finding(proj, metric="counts.full_deflation", expect="all")
    write_eval(proj, "D", {"s0": {"ms": 0.1, "counts": {}}})
    assert verdict(proj).startswith("no result yet")


def test_a_queued_run_has_no_result_yet_with_its_state(proj):
    finding(proj)
    assert verdict(proj) == "no result yet (D is queued)"


@pytest.mark.parametrize("ci", [[math.nan, 0.2], [None, None], None])
def test_a_missing_or_nan_ci_is_no_result_yet(proj, ci):
    finding(proj, metric="delta_brier")          # not a runs.json headline metric: NaN may stay
    write_eval(proj, "D", {"s0": {"delta_brier": 0.1, **({"delta_brier_ci": ci} if ci is not None else {})}})
    assert verdict(proj).startswith("no result yet")


def test_effect_metric_reads_the_paired_effect_of_the_final_stage_against_the_parent(proj):
    finding(proj, run="A-on-D", metric="effect.brier", expect="< 0", stage="final")
    effect = {"final": {"stage": "s1", "parent_stage": "s0", "brier": {"delta": -0.05, "ci": [-0.08, -0.02]},
                        "ms": {"delta": 0.01, "ci": [-0.1, 0.1]}}}
    write_eval(proj, "A-on-D", {"s0": {}, "s1": {}}, stage_order=["s0", "s1"], effect=effect)
    assert verdict(proj) == "reproduced"
    assert "stage final (s1), s1 vs parent s0, `effect.brier` < 0" in (proj / "FINDINGS.md").read_text()


def test_untrained_seeds_that_agree_are_decided_on_their_combined_ci(proj):
    finding(proj, run="twostage-v2-k3", expect="< 0")
    seeds_eval(proj, [[-0.5, -0.1], [-0.6, -0.2], [-0.7, -0.3]])
    assert verdict(proj) == "reproduced (3 seeds)"


def test_seeds_that_disagree_are_inconclusive_and_each_seed_is_listed(proj):
    finding(proj, run="twostage-v2-k3", expect="< 0")
    seeds_eval(proj, [[-0.5, -0.1], [-0.6, 0.1], [0.1, 0.3]])
    assert verdict(proj) == "inconclusive (3 seeds)"
    assert "  - seed 43: +0.200 [+0.100, +0.300]" in (proj / "FINDINGS.md").read_text()


ENTRY = 'x:\n  claim: C1\n  log: l\n  statement: s\n  test: {{run: {0}, metric: "{1}", expect: "{2}"}}\n'


@pytest.mark.parametrize("text, key", [
    ("D-entrenches: [unclosed\n", "not valid YAML"),
    ('x:\n  claim: C1\n  statement: s\n  test: {run: D, metric: ms, expect: "> 0"}\n', "x: log: missing"),
    (ENTRY.format("nope", "ms", "> 0"), "x: test.run: unknown run-id 'nope'"),
    (ENTRY.format("D", "ms", ">= 0"), "x: test.expect:"),
    (ENTRY.format("D", "ms slope", "> 0"), "x: test.metric:"),
    (ENTRY.format("D", "counts.beats_everyone", "all"), "x: test.metric:"),
    (ENTRY.format("D", "counts.full_deflation", "> 0"), "x: test.expect:"),
    (ENTRY.format("D", "ms", "> 0") + "  why: [a, list]\n", "x: why: expected a non-empty string"),
    (ENTRY.format("D", "ms", "= 0"), "x: test.margin: None: a null needs its margin"),
    (ENTRY.format("D", "ms", "> 0").replace('"> 0"}', '"> 0", margin: 0.1}'), "x: test.margin: only a null"),
    (ENTRY.format("D", "ms", "> 0") + '  why: "Brier -0.018 on the first batches"\n', "x: why: holds the figure '-0.018'"),
    (ENTRY.format("D", "ms", "> 0") + '  why: "A pays for 51% of it"\n', "x: why: holds the figure '51%'"),
    (ENTRY.format("D", "ms", "> 0") + '  why: "see {nope:s0:ms}"\n', "x: why: {nope:…} names no run"),
])
def test_a_bad_findings_file_is_one_line_naming_the_file_and_key_and_writes_nothing(proj, text, key):
    (proj / "conf" / "findings.yaml").write_text(text, encoding="utf-8")
    before = snapshot(proj)
    with pytest.raises(TableError) as e:
        write_table(proj)
    message = str(e.value)
    assert message.startswith("conf/findings.yaml: ") and key in message and "\n" not in message
    assert snapshot(proj) == before


def test_a_findings_why_is_printed_under_its_result_with_this_builds_numbers_filled_in(proj):
    finding(proj, extra='  why: "D-snap reads {D:s0:ms} on D and {D-snap:s0:brier} on D-snap, named as in A-on-D-5seeds"\n')
    write_eval(proj, "D", {"s0": {"ms": -0.1, "ms_ci": [-0.2, -0.05]}})
    write_table(proj)
    md = (proj / "FINDINGS.md").read_text(encoding="utf-8").splitlines()
    result = next(i for i, ln in enumerate(md) if ln.startswith("- Result: ") and "not reproduced" in ln)
    assert md[result + 2] == "- Why: D-snap reads -0.100 on D and – on D-snap, named as in A-on-D-5seeds"


def test_the_table_draws_the_forest_plot_beside_findings_md_and_links_it(proj):
    finding(proj)
    write_eval(proj, "D", {"s0": {"ms": 0.12, "ms_ci": [0.05, 0.2]}})
    write_table(proj)
    png = (proj / "findings-forest.png").read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 5000
    assert "![" in (proj / "FINDINGS.md").read_text() and "(findings-forest.png)" in (proj / "FINDINGS.md").read_text()
    assert 'src="findings-forest.png"' in (proj / "runs.html").read_text()
    write_table(proj)
    assert (proj / "findings-forest.png").read_bytes() == png


def test_findings_md_is_the_same_bytes_on_regeneration(proj):
    finding(proj)
    write_eval(proj, "D", {"s0": {"ms": 0.1, "ms_ci": [0.05, 0.2]}})
    write_table(proj)
    path = proj / "FINDINGS.md"
    first, mtime = path.read_bytes(), path.stat().st_mtime_ns
    write_table(proj)
    assert path.read_bytes() == first and path.stat().st_mtime_ns == mtime
    assert "Verdict rule" in first.decode()


def test_no_findings_file_still_writes_findings_md_saying_so(proj):
    assert not (FIXTURE / "conf" / "findings.yaml").exists()      # the frozen fixture stays without one
    write_table(proj)
    assert "No findings file" in (proj / "FINDINGS.md").read_text()


def test_the_repository_findings_file_names_real_runs_and_valid_tests():
    tree = RunTree.load(REPO / "conf", compose=False)
    assert findings.load(REPO, set(tree.ids()))
