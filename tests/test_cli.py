"""The martingale command: new, show, diff, check, table, status, plan."""
from __future__ import annotations

import json
import subprocess
import sys

from typer.testing import CliRunner

from martingale.cli import app

from projcopy import FIXTURE, REPO, proj, run_files, snapshot, write_eval, write_run  # noqa: F401 (proj: fixture)

runner = CliRunner()


def cli(root, *args):
    return runner.invoke(app, ["--root", str(root), *args])


def test_help_works_on_every_command():
    for cmd in ([], ["new"], ["show"], ["diff"], ["check"], ["table"], ["status"], ["plan"], ["seeds"]):
        res = runner.invoke(app, [*cmd, "--help"])
        assert res.exit_code == 0 and "Usage" in res.output, cmd


def test_new_writes_the_run_file_when_the_tree_validates(proj):
    res = cli(proj, "new", "A-on-D-lr", "--parent", "A-on-D", "--knob", "stages.s1.lr=5e-4",
              "--question", "slower?", "--claims", "C1,C2")
    assert res.exit_code == 0, res.output
    text = (proj / "conf/runs/A-on-D-lr.yaml").read_text()
    assert "parent: A-on-D" in text and "knob: stages.s1.lr=5e-4" in text and "C2" in text
    assert cli(proj, "check").output.strip() == f"{len(run_files(proj))} runs OK"   # the new one counted


def test_new_with_a_bad_knob_exits_1_and_writes_nothing(proj):
    before = snapshot(proj)
    res = cli(proj, "new", "x", "--parent", "base", "--knob", "stages.s1.lr=fast")
    assert res.exit_code == 1
    assert "conf/runs/x.yaml: stages.s1.lr:" in res.output
    assert snapshot(proj) == before


def test_new_refuses_to_overwrite_an_existing_run(proj):
    before = snapshot(proj)
    res = cli(proj, "new", "D", "--parent", "base", "--knob", "seeds=[1,2]")
    assert res.exit_code == 1 and "already exists" in res.output
    assert snapshot(proj) == before


def test_check_prints_the_number_of_runs():
    res = cli(FIXTURE, "check")
    assert res.exit_code == 0 and res.output.strip() == f"{len(run_files(FIXTURE))} runs OK"


def test_the_live_campaign_in_conf_passes_check():
    """The repository's own conf/ (whatever runs the user has added or removed) validates."""
    res = cli(REPO, "check")
    assert res.exit_code == 0, res.output
    assert res.output.strip().startswith(f"{len(run_files(REPO))} runs OK")


def test_check_validates_the_findings_file_against_the_runs_in_one_line(proj):
    """A finding whose run file was removed fails check, not only the table step at the end."""
    (proj / "conf" / "findings.yaml").write_text(
        'gone:\n  claim: C1\n  log: l\n  statement: s\n  test: {run: no-such-run, metric: ms, expect: "> 0"}\n')
    res = cli(proj, "check")
    assert res.exit_code == 1
    assert res.output.strip() == ("error: conf/findings.yaml: gone: test.run: unknown run-id 'no-such-run' "
                                  "(no conf/runs/no-such-run.yaml)")
    (proj / "conf" / "findings.yaml").write_text(
        'ok:\n  claim: C1\n  log: l\n  statement: s\n  test: {run: D, metric: ms, expect: "> 0"}\n')
    res = cli(proj, "check")
    assert res.exit_code == 0 and res.output.strip() == f"{len(run_files(proj))} runs OK, 1 findings OK"


def test_check_exits_1_with_the_one_line_error(proj):
    write_run(proj, "x.yaml", "parent: base\nknob: stages.s1.reward=A stages.s2.reward=A\n")
    res = cli(proj, "check")
    assert res.exit_code == 1
    assert res.output.strip().startswith("error: conf/runs/x.yaml: knob: more than one override")
    assert len(res.output.strip().splitlines()) == 1


def test_show_prints_lineage_overrides_and_resolved_config():
    res = cli(FIXTURE, "show", "filter-s2only")
    assert res.exit_code == 0
    assert "reliability-topquartile" in res.output
    assert "start=D stages.s1.reward=A" in res.output
    assert "kl_beta" in res.output


def test_diff_names_the_common_ancestor_the_knobs_and_the_differing_keys():
    res = cli(FIXTURE, "diff", "filter-s2only", "judge-samemode-BP")
    assert res.exit_code == 0
    assert "common ancestor: D" in res.output
    assert "elicit=snap" in res.output and "stages.s1.filter=null" in res.output
    assert "stages.s2.filter" in res.output and "stages.s1.reward" not in res.output.split("config keys")[-1]


def test_show_of_an_unknown_run_exits_1():
    res = cli(FIXTURE, "show", "nope")
    assert res.exit_code == 1 and "unknown run 'nope'" in res.output


def test_plan_prints_distinct_stages_against_the_naive_sum():
    from martingale.plan import Plan
    plan = Plan.load(FIXTURE)
    runs = plan.active_run_ids()
    res = cli(FIXTURE, "plan")
    assert res.exit_code == 0
    assert (f"{len(runs)} runs: {len(plan.stages_for(runs))} distinct stages "
            f"(naive per-run chains: {plan.naive_count(runs)})") in res.output


def test_table_writes_runs_json_runs_md_and_runs_html(proj):
    res = cli(proj, "table")
    assert res.exit_code == 0
    assert all((proj / name).exists() and name in res.output for name in ("runs.json", "RUNS.md", "runs.html"))


def test_status_prints_the_tree_with_states_and_the_runs_whose_parent_is_done_and_needs_met(proj, monkeypatch):
    from martingale.plan import Plan
    from martingale.plan.needs import unmet
    monkeypatch.delenv("DEEPSEEK_API_KEY", raising=False)
    write_run(proj, "deepseek.yaml", "parent: null\nknob: setup=deepseek_c2\n")
    (proj / "data").symlink_to(REPO / "data")
    plan = Plan.load(proj)
    ready = sorted(r for r in plan.run_ids() if plan.tree.specs[r].parent in (None, "D")   # roots, D's children
                   and not unmet(plan.run_needs(r), proj))
    write_eval(proj, "D", {"s0": {"brier": 0.18, "ms": 0.11}})
    res = cli(proj, "status")
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert any("└── D  done  start=D  Brier 0.1800" in ln for ln in lines)
    assert "base" in ready and "A-on-D" in ready and "D" not in ready and "deepseek" not in ready
    assert any("deepseek  queued  setup=deepseek_c2  needs an API key in $DEEPSEEK_API_KEY" in ln for ln in lines)
    assert f"can launch now: {len(ready)} (parent done, needs met)" in res.output
    assert " ".join(f"results/{r}/eval.json" for r in ready) in res.output


def test_cli_start_up_does_not_import_torch_or_transformers():
    code = ("import sys, martingale.cli, martingale.plan, martingale.table; "
            "bad = [m for m in ('torch', 'transformers', 'peft', 'trl') if m in sys.modules]; "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_figure_modes_draws_the_two_agent_runs_with_results_and_refuses_a_path_outside(proj):
    stage = {"mode": "syc", "ms": 0.4, "ms_ci": [0.2, 0.6], "p_by_turn": {"lean_yes": [0.65, 0.7, 0.8]}}
    write_eval(proj, "base", {"s0": {"ms": 0.01, "ms_ci": [-0.1, 0.1]}}, stage_order=["s0"])   # single-agent: left out
    write_eval(proj, "D", {"s0": stage}, stage_order=["s0"])
    res = cli(proj, "figure", "modes")
    assert res.exit_code == 0, res.output
    png = proj / "results" / "episodes_by_mode.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    res = cli(proj, "figure", "modes", "--out", "../outside.png")
    assert res.exit_code == 1 and "leaves the project" in res.output
    assert not (proj.parent / "outside.png").exists()


def test_figure_modes_refuses_an_eval_json_of_an_older_shape_in_one_line(proj):
    write_eval(proj, "D", {"s0": {"mode": "syc", "ms": 0.4, "ms_ci": [0.2, 0.6]}}, stage_order=["s0"])
    path = proj / "results" / "D" / "eval.json"
    old = json.loads(path.read_text())
    del old["stage_order"]
    path.write_text(json.dumps(old))
    res = cli(proj, "figure", "modes")
    assert res.exit_code == 1 and "results/D/eval.json" in res.output and len(res.output.strip().splitlines()) == 1
    assert not (proj / "results" / "episodes_by_mode.png").exists()


def test_figure_modes_draws_a_several_seed_run(proj):
    # several seeds: aggregate writes every metric as {mean, sd, per_seed} (stats.seeds.combine_seeds)
    stage = {"seeds": [41, 42], "mode": {"per_seed": ["syc", "syc"]},
             "ms": {"mean": 0.4, "sd": 0.1, "per_seed": [0.3, 0.5]}, "ms_ci": {"per_seed": [[0.1, 0.5], [0.3, 0.7]]},
             "p_by_turn": {"per_seed": [{"lean_yes": [0.65, 0.7]}, {"lean_no": [0.35, 0.3]}]}}
    write_eval(proj, "D", {"s0": stage}, stage_order=["s0"])
    res = cli(proj, "figure", "modes")
    assert res.exit_code == 0, res.output
    assert (proj / "results" / "episodes_by_mode.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_check_refuses_a_bad_claims_file_in_one_line(proj):
    (proj / "conf" / "claims.yaml").write_text("- C1\n- C2\n")
    res = cli(proj, "check")
    assert res.exit_code == 1
    assert res.output.strip() == "error: conf/claims.yaml: expected a mapping claim → statement"


def _d_finding(root, run: str = "D", metric: str = "ms") -> None:
    (root / "conf/findings.yaml").write_text(
        f'D-entrenches:\n  claim: C1\n  log: l\n  statement: s\n  test: {{run: {run}, stage: s0, metric: {metric}, '
        'expect: "> 0"}\n', encoding="utf-8")


def _provenance(stages: list[str], seeds: list[int], kind: str) -> dict:
    return {"provenance": {st: {str(s): {"model_stage": f"{kind}-{s:012d}", "eval_stage": "e"} for s in seeds}
                           for st in stages}}


def test_seeds_shows_each_seed_the_combined_ci_and_the_seeds_a_finding_needs(proj):
    _d_finding(proj, run="twostage-v2-k3")
    values, cis = [0.02, 0.06, 0.04], [[-0.01, 0.05], [0.03, 0.09], [0.01, 0.07]]
    write_eval(proj, "twostage-v2-k3", {"s0": {"seeds": [41, 42, 43], "ms": {"mean": 0.04, "sd": 0.02, "per_seed": values},
                                               "ms_ci": {"per_seed": cis}}},
               **_provenance(["s0"], [41, 42, 43], "distill"))
    res = cli(proj, "seeds", "D-entrenches")
    assert res.exit_code == 0, res.output
    assert "trained: each seed" in res.output and "+0.060 [+0.030, +0.090]" in res.output
    assert "combined (3 seeds): +0.040 [" in res.output and "sd: seeds" in res.output
    needed = int(res.output.split("to decide at this estimate: ")[1].split(" seeds")[0])
    assert needed >= 3 and "h a seed" in res.output and "no redraw (no records" in res.output


def test_seeds_prices_more_held_out_questions_where_the_seeds_share_their_question_noise(proj):
    """Seeds that agree, with a question covariance in eval.json wholly shared: more seeds cannot
    narrow it, more held-out questions (a redraw: the evaluations only) can."""
    _d_finding(proj, run="twostage-v2-k3")
    values, cis = [0.03, 0.031, 0.029], [[-0.01, 0.07], [-0.009, 0.071], [-0.011, 0.069]]
    write_eval(proj, "twostage-v2-k3", {"s0": {"seeds": [41, 42, 43], "ms": {"mean": 0.03, "sd": 0.001, "per_seed": values},
                                               "ms_ci": {"per_seed": cis},
                                               "crossed": {"ms": {"cov": [[0.02 ** 2] * 3] * 3, "n_questions": 1000}}}},
               **_provenance(["s0"], [41, 42, 43], "distill"))
    res = cli(proj, "seeds", "D-entrenches")
    assert res.exit_code == 0, res.output
    assert "questions shared 0.020" in res.output and "(1000 questions)" in res.output
    assert "no number of seeds up to 100" in res.output and "cheaper: questions" in res.output
    status = cli(proj, "status")
    assert "open findings (1 inconclusive" in status.output and "D-entrenches:" in status.output


def test_seeds_of_an_unknown_finding_is_one_line_and_exit_1(proj):
    _d_finding(proj)
    res = cli(proj, "seeds", "nope")
    assert res.exit_code == 1 and "no finding 'nope'" in res.output


def test_status_lists_provisional_findings_with_what_three_seeds_would_cost(proj):
    _d_finding(proj)
    write_eval(proj, "D", {"s0": {"brier": 0.18, "ms": 0.11, "ms_ci": [0.05, 0.17]}},
               **_provenance(["s0"], [42], "distill"))
    res = cli(proj, "status")
    assert res.exit_code == 0, res.output
    assert "provisional findings (1: a trained finding needs 3 seeds):" in res.output
    assert "D-entrenches: D, 1 seed; 2 more ≈" in res.output and "martingale seeds D-entrenches" in res.output
