"""The fidelity knobs that make the embedded campaign test what the log tested: which teacher
makes D, the snap prior's functional, the balanced eval, and the metrics and counts the log reads."""
import numpy as np
import pytest
from omegaconf import OmegaConf
from scipy.special import expit

from martingale.config.schema import DistillConfig, WorldConfig
from martingale.effects import beat_counts
from martingale.metrics import overconfidence, stage_metrics
from martingale.stages.distill import teacher_traits
from martingale.stages.evaluate import balanced
from martingale.world import traces
from martingale.world.synthetic import Question, SyntheticWorld


@pytest.fixture(scope="module")
def world():
    return SyntheticWorld(OmegaConf.to_container(OmegaConf.structured(WorldConfig)))


def _distill(**over):
    return {**OmegaConf.to_container(OmegaConf.structured(DistillConfig)), **over}


def _snap_p(world, q):
    return float(traces.snap(world, q, np.random.default_rng(0)).split()[3])


def test_the_default_teacher_is_the_logs_overconfident_D(world):
    traits = teacher_traits(_distill(), world.unit)
    assert traits["shift"] == round(2.5 / world.unit) and traits["sharpen"] == 1.3
    assert "agree" not in traits


def test_the_entrench_teacher_over_weights_agreeing_clues_and_does_not_lean_yes(world):
    traits = teacher_traits(_distill(teacher="entrench"), world.unit)
    assert (traits["agree"], traits["disagree"]) == (1.8, 0.5) and "shift" not in traits


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


def test_the_overconfident_teachers_beliefs_are_well_above_the_base_rate_with_ms_near_zero(world):
    # the teacher D is distilled from, read as a same-mode judge reads it: at half the clues and at the end
    qs = world.sample(3000, np.random.default_rng(5), "x")
    traits = teacher_traits(_distill(), world.unit)
    traits.pop("snap_shift")
    totals = np.array([traces.reasoned(world, q, **traits)[1] for q in qs])
    prior, post = expit(world.unit * totals[:, 4]), expit(world.unit * totals[:, -1])
    y = np.array([q.y for q in qs])
    assert overconfidence(post, y) > 0.25
    lo, hi = stage_metrics(_rows(prior, post, y), n_bootstrap=200)["ms_ci"]
    assert lo < 0.05 and hi > -0.05


def test_the_snap_prior_reads_only_the_first_snap_clues(world):
    w = SyntheticWorld({**world.cfg, "snap_noise": 0.0})
    assert w.snap_clues == 4
    q = Question("q", (0, 1, 2, 3, 4, 5, 6, 7), 1)
    other = Question("q", (0, 1, 2, 3, 9, 9, 9, 9), 1)
    assert _snap_p(w, q) == _snap_p(w, other)


def test_snap_gain_scales_the_guts_jump(world):
    q = next(q for q in world.sample(200, np.random.default_rng(6), "x")
             if sum(np.sign(world.llr[c]) for c in q.clues[:4]) >= 2)
    calm = SyntheticWorld({**world.cfg, "snap_noise": 0.0, "snap_gain": 1.0})
    jumpy = SyntheticWorld({**world.cfg, "snap_noise": 0.0, "snap_gain": 3.0})
    assert _snap_p(jumpy, q) > _snap_p(calm, q) > world.base_rate


def test_snap_shift_leans_the_gut_toward_yes(world):
    w = SyntheticWorld({**world.cfg, "snap_noise": 0.0})
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
    assert counts["beats_natural_base"] == "2/3" and counts["full_deflation"] == "1/3"
    assert "beats_natural_base" not in beat_counts(seeds, None)
