"""Two-agent episodes in the synthetic world (episodes/synthetic.py): the human's lean, what each
instructor mode lists first, what the human hears, and the silent-instructor guard."""
import numpy as np
import pytest

from martingale.core.errors import StageError
from martingale.episodes import synthetic as ep
from martingale.stages.body.simulate import Played, assert_spoke, check_spoken
from martingale.world.synthetic import SyntheticWorld

from projcopy import FIXTURE

SIM = {"lean": 0.65, "lean_tol": 0.05, "pool": 12}


@pytest.fixture(scope="module")
def world(default_cfg):
    return SyntheticWorld(default_cfg["world"])


@pytest.fixture(scope="module")
def episodes(world):
    _, heldout = world.splits()
    return ep.setup(world, heldout[:24], SIM, seed=3)


def test_the_human_starts_leaning_moderately_either_way_whatever_the_outcome(world, episodes):
    for e in episodes:
        target = 0.65 if e.lean > 0 else 0.35
        assert len(e.window) == world.n_clues
        assert abs(ep.window_bayes(world, e.window, e.q.negated) - target) <= 0.05 + 1e-9
    cells = {(e.lean, e.q.y): 0 for e in episodes}
    for e in episodes:
        cells[(e.lean, e.q.y)] += 1
    for y in (0, 1):   # within each outcome the leans alternate: balanced lean × outcome cells
        assert abs(cells.get((1, y), 0) - cells.get((-1, y), 0)) <= 1


def test_the_same_seed_sets_up_the_same_episodes(world, episodes):
    _, heldout = world.splits()
    again = ep.setup(world, heldout[:24], SIM, seed=3)
    assert [(e.window, e.pool, e.lean) for e in again] == [(e.window, e.pool, e.lean) for e in episodes]
    other = ep.setup(world, heldout[:24], SIM, seed=4)
    assert [e.window for e in other] != [e.window for e in episodes]


def test_the_pool_is_the_questions_own_evidence_and_more_of_its_kind(episodes):
    for e in episodes:
        assert len(e.pool) == 12 and tuple(e.pool[:len(e.q.clues)]) == e.q.clues


def _llr(world, e, slot):
    return ep.signed_llr(world, ep.clue_of(e, slot), e.q.negated)


def test_syc_lists_the_evidence_agreeing_most_with_the_humans_current_lean_first(world, episodes):
    e = episodes[0]
    for p, lean in ((0.8, 1), (0.2, -1)):
        order = ep.MODES["syc"](world, e, p, None)
        agreement = [lean * _llr(world, e, s) for s in order]
        assert agreement == sorted(agreement, reverse=True) and sorted(order) == list(range(12))


def test_truth_lists_the_evidence_pointing_most_toward_the_resolution_first(world, episodes):
    for e in episodes[:6]:
        toward = [(1 if e.q.y else -1) * _llr(world, e, s) for s in ep.MODES["truth"](world, e, 0.5, None)]
        assert toward == sorted(toward, reverse=True)


def test_maxsyc_lists_any_clue_of_the_world_not_only_the_evidence(world, episodes):
    e = episodes[0]
    order = ep.MODES["maxsyc"](world, e, 0.9, None)
    clues = [ep.clue_of(e, s) for s in order]
    assert sorted(clues) == list(range(world.n_types))
    assert clues[0] == int(np.argmax(world.llr))


def test_validate_only_echoes_the_humans_own_evidence(world, episodes):
    e = episodes[0]
    clues = [ep.clue_of(e, s) for s in ep.MODES["validate-only"](world, e, 0.9, None)]
    assert sorted(clues) == sorted(e.window) and clues[0] == max(e.window, key=lambda c: world.llr[c])


def test_neutral_lists_the_unsaid_evidence_in_a_seeded_random_order(world, episodes):
    e = episodes[0]
    a = ep.MODES["neutral"](world, e, 0.5, np.random.default_rng(1))
    b = ep.MODES["neutral"](world, e, 0.5, np.random.default_rng(1))
    assert a == b and sorted(a) == list(range(12)) and a != sorted(a)


def test_martingale_lists_first_the_evidence_that_brings_the_human_nearest_the_pools_belief(world, episodes):
    e = episodes[0]
    target = ep.window_bayes(world, e.pool, e.q.negated)
    gaps = [abs(ep.window_bayes(world, [*e.window[1:], ep.clue_of(e, s)], e.q.negated) - target)
            for s in ep.MODES["martingale"](world, e, 0.5, None)]
    assert gaps == sorted(gaps)


def test_no_instructor_is_the_mode_none():
    assert ep.MODES["none"] is None


def test_the_human_hears_a_clue_forgets_its_oldest_and_the_instructor_does_not_repeat_it(world, episodes):
    e = ep.setup(world, [episodes[0].q], SIM, seed=3)[0]
    order = ep.MODES["syc"](world, e, 0.8, None)
    said = ep.clue_of(e, order[0])
    old = list(e.window)
    ep.hear(e, said, order)
    assert e.window == [*old[1:], said]
    assert order[0] not in ep.MODES["syc"](world, e, 0.8, None)


def test_an_utterance_is_heard_as_its_first_clue_word_or_as_nothing(world):
    assert ep.heard_clue("c7 +2", world.n_types) == 7
    assert ep.heard_clue("+2 c3", world.n_types) == 3
    assert ep.heard_clue("P", world.n_types) is None
    assert ep.heard_clue(f"c{world.n_types}", world.n_types) is None


def test_the_instructor_is_asked_its_candidates_and_the_humans_stated_log_odds(world, episodes):
    e = episodes[0]
    order = ep.MODES["syc"](world, e, 0.8, None)
    prompt = ep.instructor_prompt(world, e, order, 0.8)
    words = prompt.split()
    assert words[0] == "Q" and words[-2] == "think" and words[1 + world.n_clues] == "?"
    assert words[1:1 + world.n_clues] == [f"c{ep.clue_of(e, s)}" for s in order[:world.n_clues]]
    assert int(words[-1]) == round(np.log(0.8 / 0.2) / world.unit)


def test_a_negated_episode_mirrors_the_lean_and_the_belief(world, episodes):
    for e, n in zip(episodes[:6], ep.negated(episodes[:6])):
        assert n.lean == -e.lean and n.q.y == 1 - e.q.y and n.window == e.window
        assert ep.window_bayes(world, n.window, True) == pytest.approx(1 - ep.window_bayes(world, e.window, False))


def test_an_empty_or_blank_utterance_fails_the_stage_and_a_clue_passes():
    assert_spoke(["c3", "c7 +2"], 1, "simulate")
    for silent in (["c3", ""], ["   ", "c1"], ["\n"]):
        with pytest.raises(StageError, match="said nothing"):
            assert_spoke(silent, 2, "simulate")


def _said(per_episode: list[list[str]]) -> Played:
    return Played(episodes=[], human_p=[], bayes=[], utterances=per_episode, last_trace=[])


def test_a_measure_counts_a_rare_empty_utterance_and_goes_on():
    """An untrained instructor that samples its end-of-text once in 800 turns is measured, the
    silence counted (what a c2 seeds run met); the stage does not fail on it."""
    turns = [["c3", "c7", "c1", "c2"] for _ in range(200)]
    turns[72][3] = ""
    assert check_spoken([_said(turns)], 0.5) == 1
    assert check_spoken([_said([["c1"] * 4] * 3)], 0.5) == 0


def test_a_measure_fails_when_the_instructor_is_silent_in_more_turns_than_the_parse_floor_allows():
    half = [["c3", "", "", ""] for _ in range(10)]          # spoke in 1 of 4 turns: under a floor of 0.5
    with pytest.raises(StageError, match=r"^simulate: the instructor said nothing \(empty utterance\) in 30 of its "
                                         r"40 turns, more than 1 − eval.min_parse_rate 0.5 \(assert_spoke\)$"):
        check_spoken([_said(half)], 0.5)
    assert check_spoken([_said(half)], 0.0) == 30      # smoke scale (floor 0): only an all-silent turn fails


def test_the_stage_refuses_what_check_refuses_in_the_same_words():
    """One check (episodes.episode_problem) at `martingale check` and in the stage, for a slice
    handed to the stage directly."""
    from martingale.config.compose import ComposeError, Composer
    from martingale.stages.body.simulate import check_config
    cfg = Composer(FIXTURE / "conf").compose(["eval.kind=simulate"])
    cfg["simulate"]["pool"] = 3
    with pytest.raises(StageError, match=r"simulate\.pool: 3 clues < clues_per_question"):
        check_config(cfg)
    with pytest.raises(ComposeError, match=r"3 clues < clues_per_question"):
        Composer(FIXTURE / "conf").compose(["eval.kind=simulate", "simulate.pool=3"])
