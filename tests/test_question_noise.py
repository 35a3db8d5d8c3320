"""A finding over several seeds is never narrower than the question noise of its seed-averaged
estimate: from records whose seeds share their questions' noise (as every seed of a run reads the
same held-out questions), aggregated into eval.json and FINDINGS.md as a build does, the noise
scripts/question_noise.py computes by resampling the questions jointly across seeds is inside the
printed CI."""
from __future__ import annotations

import sys

import numpy as np
import pytest

from martingale.config.runs import RunTree
from martingale.metrics import stage_metrics
from martingale.records.aggregate import write_run_results
from martingale.stats.replicates import combine, se_from_ci
from martingale.store import files
from martingale.table import build_table, findings, write_table

from projcopy import REPO, proj  # noqa: F401 (proj: fixture)

sys.path.insert(0, str(REPO / "scripts"))
import question_noise  # noqa: E402

RUN, SEEDS, N = "twostage-v2-k3", [41, 42, 43], 400


def shared_question_records(seed: int) -> list[dict]:
    """One seed's records: each question's belief and its update noise are the question's, shared
    by every seed (drawn from the same stream); a little of each seed's own on top."""
    q = np.random.default_rng(7)
    belief = q.uniform(0.1, 0.9, N)
    shared = q.normal(0, 0.15, N)
    y = (q.random(N) < belief).astype(int)
    own = np.random.default_rng(seed)
    prior = np.clip(belief + own.normal(0, 0.01, N), 0.01, 0.99)
    post = np.clip(prior - 0.02 * (prior - 0.5) + shared + own.normal(0, 0.01, N), 0.0, 1.0)
    unparsed = own.random(N) < 0.05
    return [{"qid": f"ho{i:05d}", "y": int(y[i]), "prior": None if unparsed[i] else round(float(prior[i]), 6),
             "posterior": None if unparsed[i] else round(float(post[i]), 6),
             "stated": None if unparsed[i] else round(float(post[i]), 6), "bayes_end": round(float(belief[i]), 6),
             "seed": seed} for i in range(N)]


@pytest.fixture
def built(proj):  # noqa: F811
    """RUN's s0 aggregated from three seeds' records, and a finding on its MS and one on its Brier."""
    tree = RunTree.load(proj / "conf")
    evals = []
    for seed in SEEDS:
        d = proj / "store" / f"evaluate-{seed}"
        d.mkdir(parents=True)
        rows = shared_question_records(seed)
        files.write_jsonl(d / "records.jsonl", rows)
        files.write_json(d / "metrics.json", stage_metrics(rows, 300, 0.95, seed))
        evals.append({"stage": "s0", "seed": seed, "dir": d, "model_stage": f"weights-{seed:012d}",
                      "eval_stage": f"evaluate-{seed:012d}"})
    lineage = [{"run_id": s.run_id, "parent": s.parent, "knob": s.knob} for s in tree.lineage(RUN)]
    write_run_results(RUN, tree.resolved_config(RUN), lineage, evals, proj / "results" / RUN, plots=False)
    entry = '{0}:\n  claim: C1\n  log: l\n  statement: s\n  test: {{run: {1}, stage: s0, metric: {2}, expect: "{3}"}}\n'
    (proj / "conf" / "findings.yaml").write_text(entry.format("slope", RUN, "ms", "< 0")
                                                 + entry.format("calibration", RUN, "brier", "> 0"), encoding="utf-8")
    write_table(proj)
    return proj


def test_eval_json_holds_the_seeds_question_covariance_from_their_records(built):
    crossed = files.read_json(built / "results" / RUN / "eval.json")["stages"]["s0"]["crossed"]
    cov = np.array(crossed["ms"]["cov"])
    assert crossed["ms"]["n_questions"] == N and cov.shape == (3, 3)
    assert cov[0, 1] > 0.8 * cov[0, 0]          # the questions' noise is the seeds' shared noise


def test_no_finding_over_seeds_prints_a_ci_under_the_question_noise_of_its_seed_average(built, capsys):
    assert question_noise.main([str(built), "--resamples", "400"]) == 0, capsys.readouterr().out
    out = capsys.readouterr().out
    assert "0 finding(s) over several seeds with a CI under" in out


def test_random_effects_over_the_seeds_own_cis_would_print_a_ci_far_under_it(built):
    """What FINDINGS.md printed before: the seeds agree (they read the same questions), so combining
    their own CIs as independent draws shrinks the interval below the questions' noise."""
    found, results, _ = findings.evaluate(built, build_table(built))
    f = next(x for x in found if x.id == "slope")
    r = results[f.id]
    old = combine([v for _, v, _ in r.samples], [se_from_ci(ci) for _, _, ci in r.samples])
    noise = question_noise.question_noise(built, f, r, 400)
    assert (old.ci[1] - old.ci[0]) / 2 < 0.5 * noise <= (r.combined.ci[1] - r.combined.ci[0]) / 2
