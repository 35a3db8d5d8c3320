"""The fidelity knobs that make the embedded campaign test what the log tested: which teacher
makes D, the snap prior's functional, the balanced eval, and the metrics and counts the log reads."""
from dataclasses import replace

import numpy as np
import pytest
from omegaconf import OmegaConf
from scipy.special import expit
from typed import typed_section

from martingale.config.sections import WorldConfig
from martingale.metrics import overconfidence, stage_metrics
from martingale.stages.body.distill import teacher_traits
from martingale.stages.body.evaluate import balanced
from martingale.stages.distill import DistillConfig
from martingale.stats.effects import beat_counts
from martingale.world import traces
from martingale.world.synthetic import Question, SyntheticWorld


@pytest.fixture(scope="module")
def world():
    return SyntheticWorld(OmegaConf.to_container(OmegaConf.structured(WorldConfig)))


def _distill(**over):
    return typed_section("distill", {**OmegaConf.to_container(OmegaConf.structured(DistillConfig)), **over})


def _snap_p(world, q):
    return float(traces.snap(world, q, np.random.default_rng(0)).split()[3])


def test_the_default_teacher_is_the_logs_drifting_D(world):
    traits = teacher_traits(_distill(), world.unit)
    assert traits["drift"] == round(0.25 / world.unit) and traits["agree"] == 1.8
    assert "shift" not in traits and "sharpen" not in traits


def test_the_overconfident_teacher_leans_and_sharpens_without_entrenching(world):
    traits = teacher_traits(_distill(teacher="overconfident"), world.unit)
    assert traits["shift"] == round(2.5 / world.unit) and traits["sharpen"] == 1.3
    assert "agree" not in traits and "drift" not in traits


def _steps(trace: str, n: int) -> list[int]:
    """A reasoned trace's written steps (``think t0`` then n × ``c s -> t``)."""
    return [int(w) for w in trace.split()[3::4][:n]]


def test_the_entrench_teacher_over_weights_agreeing_clues_and_does_not_lean_yes(world):
    # its traces, as distill writes them (jittered weights), against the calibrated reasoner's on the
    # same questions and negations: each step's size over the calibrated step's, by whether the clue
    # agrees with the lean so far (the running total against the start)
    traits = teacher_traits(_distill(teacher="entrench"), world.unit)
    rng = np.random.default_rng(0)
    size = {"agree": [0, 0], "disagree": [0, 0]}
    for q in world.sample(500, np.random.default_rng(8), "x"):
        for asked in (q, q.negation()):
            calm, _ = traces.reasoned(world, asked)
            teach, totals = traces.reasoned(world, asked, rng, **traits)
            assert totals[0] == world.prior_units(asked.negated)       # starts at the prior: no lean toward yes
            for k, (s, c) in enumerate(zip(_steps(teach, world.n_clues), _steps(calm, world.n_clues))):
                lean = np.sign(totals[k] - totals[0])
                if lean and c:
                    kind = size["agree" if np.sign(c) == lean else "disagree"]
                    kind[0], kind[1] = kind[0] + abs(s), kind[1] + abs(c)
    agree, disagree = (size[k][0] / size[k][1] for k in ("agree", "disagree"))
    assert agree > 1 > disagree
    assert agree == pytest.approx(traits["agree"], abs=0.05) and disagree == pytest.approx(traits["disagree"], abs=0.05)


def test_the_both_teacher_is_both(world):
    assert {"agree", "shift", "sharpen", "snap_shift"} <= set(teacher_traits(_distill(teacher="both"), world.unit))


def test_the_overconfident_teacher_starts_toward_yes_on_a_question_and_on_its_negation(world):
    q = world.sample(1, np.random.default_rng(3), "x")[0]
    for asked in (q, q.negation()):
        _, calm = traces.reasoned(world, asked)
        _, over = traces.reasoned(world, asked, shift=10)
        assert over[0] == calm[0] + 10


def test_the_overconfident_teacher_sharpens_every_step(world):
    q = world.sample(1, np.random.default_rng(4), "x")[0]
    _, calm = traces.reasoned(world, q)
    _, sharp = traces.reasoned(world, q, sharpen=2.0)
    assert np.diff(sharp).tolist() == [2 * d for d in np.diff(calm).tolist()]


@pytest.fixture(scope="module")
def teachers_read(world):
    """D's default teacher (drift), the over-confident one and the entrenching one (``both``:
    over-confident and confirmation-biased) on the same 3000 questions, read as a same-mode judge reads them (at half
    the clues and at the end): the posteriors, the labels and each one's stage metrics."""
    qs = world.sample(3000, np.random.default_rng(5), "x")
    y = np.array([q.y for q in qs])
    out = {}
    for teacher in ("drift", "overconfident", "both"):
        traits = teacher_traits(_distill(teacher=teacher), world.unit)
        traits.pop("snap_shift", None)
        rng = np.random.default_rng(0)                      # the entrenching weights' jitter, as distill draws it
        totals = np.array([traces.reasoned(world, q, rng, **traits)[1] for q in qs])
        prior, post = expit(world.unit * totals[:, 4]), expit(world.unit * totals[:, -1])
        out[teacher] = post, stage_metrics(_rows(prior, post, y), n_bootstrap=200)
    return out, y


def test_the_overconfident_teachers_beliefs_are_well_above_the_base_rate(teachers_read):
    read, y = teachers_read
    assert overconfidence(read["overconfident"][0], y) > 0.25


def test_the_default_drifting_teachers_beliefs_are_well_above_the_base_rate(teachers_read):
    """The log's D: meanP 0.61–0.64 against a base rate ≈ 0.30 (here +0.36)."""
    read, y = teachers_read
    assert overconfidence(read["drift"][0], y) > 0.2


def test_the_overconfident_teachers_ms_covers_zero_and_excludes_the_entrenching_teachers(teachers_read):
    # the tolerance is the effect to tell apart: the entrenching teacher's MS (~0.06), not a fixed ±0.05
    read, _ = teachers_read
    lo, hi = read["overconfident"][1]["ms_ci"]
    both_lo, _ = read["both"][1]["ms_ci"]
    assert lo <= 0 <= hi
    assert hi < both_lo, (read["overconfident"][1]["ms_ci"], read["both"][1]["ms_ci"])


def test_the_snap_prior_reads_only_the_first_snap_clues(world):
    w = SyntheticWorld(replace(world.cfg, snap_noise=0.0))
    assert w.snap_clues == 4
    q = Question("q", (0, 1, 2, 3, 4, 5, 6, 7), 1)
    other = Question("q", (0, 1, 2, 3, 9, 9, 9, 9), 1)
    assert _snap_p(w, q) == _snap_p(w, other)


def test_snap_gain_scales_the_guts_jump(world):
    q = next(q for q in world.sample(200, np.random.default_rng(6), "x")
             if sum(np.sign(world.llr[c]) for c in q.clues[:4]) >= 2)
    calm = SyntheticWorld(replace(world.cfg, snap_noise=0.0, snap_gain=1.0))
    jumpy = SyntheticWorld(replace(world.cfg, snap_noise=0.0, snap_gain=3.0))
    assert _snap_p(jumpy, q) > _snap_p(calm, q) > world.base_rate


def test_snap_shift_leans_the_gut_toward_yes(world):
    w = SyntheticWorld(replace(world.cfg, snap_noise=0.0))
    q = world.sample(1, np.random.default_rng(7), "x")[0]
    rng = np.random.default_rng(0)
    assert float(traces.snap(w, q, rng, shift=2.5).split()[3]) > _snap_p(w, q)


def test_a_balanced_eval_asks_every_question_and_its_negation(world):
    _, heldout = world.splits()
    both = balanced(heldout[:50])
    assert len(both) == 100 and len({q.qid for q in both}) == 100
    assert np.mean([q.y for q in both]) == 0.5


def _rows(prior, post, y):
    return [{"y": int(a), "stated": float(c), "prior": float(b), "posterior": float(c), "bayes_end": 0.5}
            for a, b, c in zip(y, prior, post)]


def test_delta_brier_is_the_posteriors_brier_minus_the_priors():
    rng = np.random.default_rng(0)
    y = (rng.random(200) < 0.5).astype(int)
    prior = 0.5 + 0.03 * rng.standard_normal(200)
    post = np.where(y == 1, 0.8, 0.2)
    m = stage_metrics(_rows(prior, post, y), n_bootstrap=200)
    assert m["brier_prior"] == pytest.approx(np.mean((y - prior) ** 2))
    assert m["delta_brier"] == pytest.approx(np.mean((y - post) ** 2) - np.mean((y - prior) ** 2))
    assert m["delta_brier_ci"][1] < 0           # reasoning helped, and the CI says so


def test_signed_lin_r2_carries_the_sign_of_ms():
    prior = np.linspace(0.1, 0.9, 50)
    y = np.zeros(50, dtype=int)
    entrench = stage_metrics(_rows(prior, np.clip(prior + 0.5 * (prior - 0.5), 0, 1), y), n_bootstrap=50)
    regress = stage_metrics(_rows(prior, 0.5 + 0.5 * (prior - 0.5), y), n_bootstrap=50)
    assert entrench["signed_lin_r2"] == pytest.approx(entrench["lin_r2"]) and entrench["ms"] > 0
    assert regress["signed_lin_r2"] == pytest.approx(-regress["lin_r2"]) and regress["ms"] < 0


def test_overconfidence_is_mean_p_minus_the_base_rate_with_a_ci():
    y = np.array([0, 0, 0, 1] * 25)
    p = np.full(100, 0.6)
    m = stage_metrics(_rows(p, p, y), n_bootstrap=200)
    assert m["overconfidence"] == pytest.approx(0.35)
    lo, hi = m["overconfidence_ci"]
    assert lo <= 0.35 <= hi and lo > 0


def test_counts_say_how_many_seeds_beat_the_natural_base_and_fully_deflate():
    # natural base 0.247, constant 0.211: full deflation is below their midpoint 0.229 (the log's 0.23)
    seeds = {41: {"brier": 0.221, "brier_constant": 0.211}, 42: {"brier": 0.234, "brier_constant": 0.211},
             43: {"brier": 0.250, "brier_constant": 0.211}}
    natural = {s: {"brier": 0.247} for s in seeds}
    counts = beat_counts(seeds, None, natural)
    assert counts["beats_natural_base"] == {"k": 2, "n": 3} and counts["full_deflation"] == {"k": 1, "n": 3}
    assert "beats_natural_base" not in beat_counts(seeds, None)
