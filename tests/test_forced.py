"""The forced-answer read (beliefs/forced.py): P from the next-token distribution after a fixed
prefix, valid tokens only, floored by their mass; both reads side by side in a stage's records and
metrics, the headline read chosen by elicit.read."""
from __future__ import annotations

import math

import pytest

from martingale.beliefs.forced import TokenValues, answer_context, answer_value, read


@pytest.mark.parametrize("text, value", [
    ("P = 0.7", 0.7), ("P = 0.75", 0.75), ("P = 0.62", 0.62), ("0.7", 0.7), ("P =0.3", 0.3), ("P = 1", 1.0)])
def test_a_prefix_and_token_that_state_one_number_are_that_number(text, value):
    assert answer_value(text) == value


@pytest.mark.parametrize("text", ["P = 0. 7", "P = 0.7x", "P = 0..7", "P = 0.\n", "P = 0.-", "P = 1.5", "0.7 ", "P = 0.7."])
def test_anything_but_one_well_formed_number_is_no_answer(text):
    assert answer_value(text) is None


class _Digits:
    """A tokenizer of single characters (id = code point): what decoding prefix + token adds is that character."""

    def __call__(self, text, add_special_tokens=False):
        return {"input_ids": [ord(c) for c in text]}

    def decode(self, ids):
        return "".join(chr(i) for i in ids)


def test_the_digits_after_the_prefix_are_the_answers_and_nothing_else_is():
    values = TokenValues(_Digits(), "P = 0.")
    assert [values(ord(str(d))) for d in range(10)] == [d / 10 for d in range(10)]
    assert values(ord(" ")) is None and values(ord(".")) is None and values(ord("x")) is None


def test_the_read_is_the_mass_weighted_mean_of_the_valid_answers():
    values = TokenValues(_Digits(), "P = 0.")
    top = {ord("7"): math.log(0.6), ord("3"): math.log(0.2), ord(" "): math.log(0.2)}
    p, mass = read(top, values, min_mass=0.5)
    assert mass == pytest.approx(0.8) and p == pytest.approx((0.6 * 0.7 + 0.2 * 0.3) / 0.8)


def test_a_read_whose_valid_tokens_hold_too_little_mass_is_unparsed_not_a_number():
    values = TokenValues(_Digits(), "P = 0.")
    p, mass = read({ord("7"): math.log(0.3), ord("\n"): math.log(0.7)}, values, min_mass=0.5)
    assert p is None and mass == pytest.approx(0.3)


def test_the_forced_posterior_is_read_after_the_trace_with_its_own_answer_replaced():
    assert answer_context("<prompt>", "It may rain.\nP = 0.8", embedded=False) == "<prompt>It may rain.\n"
    assert answer_context("<prompt>", "no answer at all", embedded=False) == "<prompt>no answer at all\n"
    assert answer_context("Q c1 ? think", "0 c1 +2 -> +2 P = 0.62 end", embedded=True) == "Q c1 ? think 0 c1 +2 -> +2 "


def test_the_embedded_tokenizer_reads_its_probability_words_after_p_equals(untrained_model):
    from martingale.model.load import load
    _, tok = load(untrained_model)
    values = TokenValues(tok, "P =")
    assert values(tok.convert_tokens_to_ids("0.62")) == 0.62
    assert values(tok.convert_tokens_to_ids("end")) is None and values(tok.convert_tokens_to_ids("c3")) is None


def test_next_token_log_probs_do_not_depend_on_the_batching(untrained_model, default_cfg):
    from martingale.model.generate import next_token_logprobs
    from martingale.model.hf import HFBackend
    gen = HFBackend.load(untrained_model, default_cfg["model"])
    texts = ["Q c1 c2 ? think 0 c1", "Q c3 ? snap P =", "Q not c4 c5 c6 c7 ? think 0 c4 +1 -> +1 P ="]
    one = [next_token_logprobs(gen.model, gen.tokenizer, [t], 5)[0] for t in texts]
    batched = next_token_logprobs(gen.model, gen.tokenizer, texts, 5, batch_size=8)
    for a, b in zip(one, batched):
        assert list(a) == list(b) and all(abs(a[k] - b[k]) < 1e-5 for k in a)


def _forced_cfg(default_cfg, read: str) -> dict:
    prompts = {"name": "embedded", "forced_prefix": "P =", "judge_forced_prefix": "", "forced_min_mass": 1e-9}
    return {**default_cfg, "prompts": prompts, "elicit": {**default_cfg["elicit"], "mode": "snap", "read": read}}


@pytest.mark.parametrize("read_name", ["verbal", "forced"])
def test_a_rollout_keeps_both_reads_and_heads_with_the_one_elicit_read_names(untrained_model, default_cfg, read_name):
    from martingale.beliefs.elicit import rollout
    from martingale.beliefs.readers import ReadContext
    from martingale.model.hf import HFBackend
    from martingale.world.synthetic import SyntheticWorld
    cfg = _forced_cfg(default_cfg, read_name)
    gen = HFBackend.load(untrained_model, cfg["model"])
    world = SyntheticWorld(cfg["world"])
    qs = world.splits()[1][:6]
    ro = rollout(gen, qs, ReadContext(world=world, judge=gen, config=cfg), cfg["elicit"], seed=0, temperature=1.0)
    assert set(ro.reads) == {f"{c}_{r}" for c in ("prior", "posterior", "stated")
                             for r in ("verbal", "forced", "forced_mass")}
    assert ro.stated == ro.reads[f"stated_{read_name}"] and ro.prior == ro.reads[f"prior_{read_name}"]
    assert all(m is None or 0.0 <= m <= 1.0 for m in ro.reads["stated_forced_mass"])
    forced = [p for p in ro.reads["stated_forced"] if p is not None]
    assert forced and all(0.0 <= p <= 1.0 for p in forced)


def test_stage_metrics_put_the_verbal_and_forced_reads_side_by_side():
    from martingale.metrics import stage_metrics
    rows = []
    for i in range(12):
        p = 0.2 + 0.05 * i
        rows.append({"qid": str(i), "y": i % 2, "prior": p, "posterior": min(1, p + 0.05), "stated": min(1, p + 0.05),
                     "prior_verbal": None, "posterior_verbal": p if i < 3 else None, "stated_verbal": p if i < 3 else None,
                     "prior_forced": p, "posterior_forced": min(1, p + 0.05), "stated_forced": min(1, p + 0.05),
                     "prior_forced_mass": 0.9, "posterior_forced_mass": 0.8, "stated_forced_mass": 0.8,
                     "bayes_end": None})
    m = stage_metrics(rows, n_bootstrap=50)
    assert m["verbal_parse_rate"] == pytest.approx(3 / 12) and m["forced_parse_rate"] == 1.0
    assert m["forced_brier"] == pytest.approx(m["brier"]) and m["forced_ms"] == pytest.approx(m["ms"])
    assert m["n_read_pairs"] == 3 and m["read_coherence"] == pytest.approx(0.05)
    assert m["forced_mass"] == pytest.approx(0.8) and m["forced_prior_mass"] == pytest.approx(0.9)
    assert math.isnan(m["verbal_ms"])


def test_a_forced_snap_prior_with_prior_draws_is_refused_naming_eval_prior_draws():
    """The forced snap prior is one deterministic read: no draws to de-attenuate."""
    from martingale.config.compose import ComposeError, Composer

    from projcopy import FIXTURE
    forced_snap = ["prompts=log", "elicit.mode=snap", "elicit.read=forced"]
    composer = Composer(FIXTURE / "conf")
    assert composer.compose(forced_snap)["eval"]["prior_draws"] == 0
    with pytest.raises(ComposeError, match=r"^eval\.prior_draws: the forced snap prior is one deterministic read"):
        composer.compose([*forced_snap, "eval.prior_draws=4"])
