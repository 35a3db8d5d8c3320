"""The miscalibrated natural base (pretrain.teacher=miscalibrated): its teacher leans, sharpens and
misreads clues as the knob says, it is worse than the base-rate constant, and while calibrated its
keys are in no stage id or run identity."""
from __future__ import annotations

import numpy as np
import pytest
from omegaconf import OmegaConf
from typed import typed_section

from martingale.config.compose import ComposeError, Composer
from martingale.config.sections import WorldConfig
from martingale.plan import Plan, config_hash, stage_slice
from martingale.stages import kinds
from martingale.stages.body.pretrain import mixture, teacher_traits
from martingale.world import traces
from martingale.world.synthetic import SyntheticWorld

from projcopy import FIXTURE, make_project

MISCAL = ["pretrain.teacher=miscalibrated"]


@pytest.fixture(scope="module")
def world():
    return SyntheticWorld(OmegaConf.to_container(OmegaConf.structured(WorldConfig)))


def test_a_calibrated_trace_draws_nothing_from_the_rng(world):
    """misread = 0 makes no draw: every calibrated trace (and so the base's bytes) stays as it was."""
    q = world.sample(1, np.random.default_rng(0), "x")[0]
    rng = np.random.default_rng(1)
    before = rng.bit_generator.state
    traces.reasoned(world, q, rng)
    assert rng.bit_generator.state == before


def test_the_misreading_teacher_flips_a_clues_direction_at_its_rate(world):
    qs = world.sample(2000, np.random.default_rng(2), "x")
    rng, flips, clues = np.random.default_rng(3), 0, 0
    for q in qs:
        _, totals = traces.reasoned(world, q, rng, misread=0.3)
        steps = np.diff(totals)
        truth = np.array([world.step_units(c, q.negated) for c in q.clues])
        moving = truth != 0
        flips += int(np.sum(np.sign(steps[moving]) == -np.sign(truth[moving])))
        clues += int(moving.sum())
    assert flips / clues == pytest.approx(0.3, abs=0.02)


def test_the_miscalibrated_teacher_is_worse_than_the_constant_and_leans_above_the_base_rate(world):
    """The level the knob's defaults were set to, from the log's Llama base (0.2546 vs 0.211 and
    mean belief ≈ +0.1 above the base rate): the teacher's own final beliefs on held-out questions."""
    p = typed_section("pretrain", Composer(FIXTURE / "conf").compose(MISCAL)["pretrain"])
    t = teacher_traits(p, world.unit)
    _, held = world.splits()
    rng = np.random.default_rng(4)
    y = np.array([q.y for q in held], float)
    belief = np.array([traces.units_to_p(traces.reasoned(world, q, rng, shift=t["shift"], sharpen=t["sharpen"],
                                                         misread=t["misread"])[1][-1], world.unit) for q in held])
    constant = y.mean() * (1 - y.mean())
    assert np.mean((y - belief) ** 2) > constant and 0.05 < belief.mean() - y.mean() < 0.2


def test_the_calibrated_base_has_no_teacher_traits_and_its_mixture_is_the_bayes_reasoners(world):
    p = typed_section("pretrain", Composer(FIXTURE / "conf").compose([])["pretrain"])
    assert teacher_traits(p, world.unit) is None
    a = mixture(world, np.random.default_rng(5), 50, p, None)
    b = mixture(world, np.random.default_rng(5), 50, p, teacher_traits(p, world.unit))
    assert a == b


def test_a_calibrated_pretrain_has_the_teacher_keys_in_no_id_and_a_miscalibrated_one_does():
    calibrated = Composer(FIXTURE / "conf").compose([])
    miscal = Composer(FIXTURE / "conf").compose(MISCAL)
    pretrain = kinds()["pretrain"]
    assert "teacher" not in stage_slice(pretrain, calibrated)["pretrain"]
    assert stage_slice(pretrain, miscal)["pretrain"]["misread"] == 0.3
    assert config_hash(calibrated) != config_hash(miscal)


def test_a_miscalibrated_base_run_plans_its_own_pretrain_and_leaves_the_others_ids(tmp_path):
    proj = make_project(tmp_path / "p", runs={"base-miscal.yaml": "parent: base\nknob: pretrain.teacher=miscalibrated\n"})
    before = Plan.load(FIXTURE)
    after = Plan.load(proj)
    assert set(before.stages) < set(after.stages)
    assert {after.stages[s].kind for s in set(after.stages) - set(before.stages)} >= {"pretrain"}


@pytest.mark.parametrize("knob, key", [("pretrain.teacher=noisy", "pretrain.teacher"),
                                       ("pretrain.misread=0.5", "pretrain.misread"),
                                       ("pretrain.sharpen=0", "pretrain.sharpen")])
def test_check_refuses_a_bad_teacher_value_naming_the_key(knob, key):
    with pytest.raises(ComposeError) as e:
        Composer(FIXTURE / "conf").compose([knob])
    assert e.value.key == key


def test_the_drifting_teachers_lean_grows_along_its_trace_and_is_in_no_other_d_id(world):
    """distill.teacher=drift (the default, the log's D): every step moves yes_drift toward yes, so
    its mean update is toward yes; another teacher's D has no yes_drift in its id."""
    from martingale.stages.body.distill import teacher_traits as d_traits
    cfg = Composer(FIXTURE / "conf").compose(["start=D"])
    t = d_traits(typed_section("distill", cfg["distill"]), world.unit)
    assert t["drift"] == 1 and "shift" not in t
    qs = world.sample(500, np.random.default_rng(8), "x")
    rng = np.random.default_rng(9)
    updates = [np.diff(traces.reasoned(world, q, rng, **t)[1]).mean() for q in qs]
    calibrated = [np.diff(traces.reasoned(world, q)[1]).mean() for q in qs]
    assert np.mean(updates) > np.mean(calibrated) + 0.5
    distill = kinds()["distill"]
    assert "yes_drift" not in stage_slice(distill, Composer(FIXTURE / "conf").compose(
        ["start=D", "distill.teacher=overconfident"]))["distill"]
    assert stage_slice(distill, cfg)["distill"]["yes_drift"] == 0.25


@pytest.mark.parametrize("unused", ["pretrain.misread=0.1", "pretrain.yes_shift=1.0", "distill.yes_drift=0.5"])
def test_a_teacher_key_its_teacher_does_not_use_leaves_the_run_fresh(unused):
    """Changing a calibrated base's teacher traits, or the drift of a D that does not drift, changes
    neither the run's config hash (it would turn every run stale) nor any stage id."""
    composer = Composer(FIXTURE / "conf")
    base = ["start=D", "distill.teacher=overconfident"]
    before, after = composer.compose(base), composer.compose([*base, unused])
    assert config_hash(before) == config_hash(after)
    for kind in ("pretrain", "distill"):
        assert stage_slice(kinds()[kind], before) == stage_slice(kinds()[kind], after)
