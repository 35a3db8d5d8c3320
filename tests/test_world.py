"""The synthetic world: seeded, disjoint splits and an exact Bayes oracle that is a martingale."""
from dataclasses import asdict, replace

import numpy as np
import pytest
from omegaconf import OmegaConf
from scipy.special import expit

from martingale.config.sections import WorldConfig
from martingale.metrics import martingale_fit
from martingale.world import traces
from martingale.world.synthetic import SyntheticWorld


@pytest.fixture(scope="module")
def world():
    return SyntheticWorld(OmegaConf.to_container(OmegaConf.structured(WorldConfig)))


def test_same_seed_gives_the_same_questions(world):
    again = SyntheticWorld(asdict(world.cfg))
    assert world.splits() == again.splits()


def test_heldout_never_repeats_a_train_question(world):
    train, heldout = world.splits()
    assert not {q.clues for q in train} & {q.clues for q in heldout}
    assert len(heldout) == world.cfg.n_heldout


def test_base_rate_matches_the_config(world):
    qs = world.sample(20000, np.random.default_rng(0), "x")
    assert np.mean([q.y for q in qs]) == pytest.approx(world.base_rate, abs=0.01)


def test_oracle_belief_is_calibrated(world):
    qs = world.sample(20000, np.random.default_rng(1), "x")
    p = np.array([world.bayes(q) for q in qs])
    y = np.array([q.y for q in qs])
    for lo, hi in [(0, .2), (.2, .5), (.5, .8), (.8, 1)]:
        m = (p >= lo) & (p < hi)
        assert abs(y[m].mean() - p[m].mean()) < 0.03


def test_oracle_updates_are_a_martingale(world):
    qs = world.sample(20000, np.random.default_rng(2), "x")
    prior = np.array([world.bayes(q, 4) for q in qs])
    post = np.array([world.bayes(q) for q in qs])
    assert abs(martingale_fit(prior, post)["ms"]) < 0.03


def test_negation_flips_the_answer_and_the_belief(world):
    q = world.sample(1, np.random.default_rng(3), "x")[0]
    n = q.negation()
    assert n.y == 1 - q.y and n.negation() == q
    assert world.bayes(n) == pytest.approx(1 - world.bayes(q))


def test_reasoning_moves_beliefs_and_they_vary(world):
    qs = world.sample(2000, np.random.default_rng(4), "x")
    start = np.array([world.bayes(q, 0) for q in qs])
    end = np.array([world.bayes(q) for q in qs])
    assert np.std(end) > 0.2 and np.mean(np.abs(end - start)) > 0.2


def test_calibrated_trace_ends_with_the_belief_of_its_running_total(world):
    q = world.sample(1, np.random.default_rng(5), "x")[0]
    text, totals = traces.reasoned(world, q)
    assert text.endswith(f"P = {expit(totals[-1] * world.unit):.2f} end")
    assert len(totals) == world.n_clues + 1


def test_biased_reasoner_entrenches(world):
    qs = world.sample(3000, np.random.default_rng(6), "x")
    rng = np.random.default_rng(7)
    cut, last = [], []
    for q in qs:
        _, t = traces.reasoned(world, q, rng, agree=1.8, disagree=0.5)
        cut.append(expit(t[4] * world.unit))
        last.append(expit(t[-1] * world.unit))
    assert martingale_fit(np.array(cut), np.array(last))["ms"] > 0.05


def test_every_word_of_every_policy_is_in_the_vocabulary(world):
    vocab = set(traces.vocabulary(world.n_types))
    rng = np.random.default_rng(8)
    for q in world.sample(200, rng, "x"):
        for n in (q, q.negation()):
            text, _ = traces.reasoned(world, n, rng, 1.8, 0.5, 0.3)
            words = traces.prompt(n).split() + text.split() + traces.snap(world, n, rng).split()
            words += " ".join(traces.read(n, text, 3, world.unit)).split()
            assert set(words) <= vocab


def test_splits_give_up_with_the_key_when_too_few_distinct_questions_exist():
    """Two clue types and two clues per question: 4 distinct questions
    3 held out beside 8
    training ones cannot be drawn disjoint, so splits() names world.n_heldout instead of looping."""
    cfg = {**OmegaConf.to_container(OmegaConf.structured(WorldConfig)), "n_clue_types": 2, "clues_per_question": 2, "n_train": 8, "n_heldout": 3}
    with pytest.raises(ValueError, match="world.n_heldout"):
        SyntheticWorld(cfg).splits()


def test_a_heldout_redraw_keeps_the_world_and_its_training_questions_and_draws_new_heldout_ones(world):
    train, heldout = world.splits()
    redrawn = SyntheticWorld(replace(world.cfg, heldout_draw=1))
    train_again, heldout_again = redrawn.splits()
    assert train_again == train and (redrawn.llr == world.llr).all()
    assert not {q.clues for q in heldout_again} & {q.clues for q in heldout}     # fresh questions …
    assert not {q.clues for q in heldout_again} & {q.clues for q in train}       # … none a training one
    assert len(heldout_again) == len(heldout)
