"""What a model is asked: the embedded format for the embedded model, the log's English prompts
(conf/prompts/log.yaml) for chat models, rendered from a question's fields and the tokenizer's
chat template; a judge sees the trace cut at the read's fraction with every stated P hidden."""
from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from martingale.beliefs.prompts import Prompts, cut_words
from martingale.world import traces
from martingale.world.synthetic import Question

from projcopy import REPO

LOG = OmegaConf.to_container(OmegaConf.load(REPO / "conf/prompts/log.yaml"))
PLAIN = {**LOG, "chat": False}
REAL = Question("q7", (), 1, text="Polls tighten.", question="Will A win the election?",
                criteria="Official results.", option="")


def test_the_embedded_set_asks_in_the_embedded_models_own_format():
    q = Question("ho1", (3, 5), 0)
    ask = Prompts({"name": "embedded"})
    assert ask.reasoned(q) == traces.prompt(q) + " think" == "Q c3 c5 ? think"
    assert ask.snap(q) == "Q c3 c5 ? snap"
    trace = "think -3 c3 +2 -> -1 c5 -4 -> -5 P = 0.08 end"
    assert ask.judge(q, trace, 1, 2) == traces.read_query(q, trace, 1)
    assert ask.trace_tokens(2) == 14 and ask.reasoned_text("x") == "think x"


def test_the_log_prompts_carry_the_question_its_background_and_the_option():
    ask = Prompts(PLAIN)
    text = ask.reasoned(REAL)
    assert text.startswith("Will A win the election?") and "Polls tighten." in text
    assert "Resolution criteria: Official results." in text
    assert "whether the resolution will be Yes" in text and text.endswith("P = X")
    assert "In one or two sentences only" in ask.snap(REAL)


def test_a_negated_question_asks_for_the_option_not_happening():
    assert "whether the resolution will be NOT Yes" in Prompts(PLAIN).reasoned(REAL.negation())


def test_the_judge_sees_the_trace_cut_at_the_reads_fraction_with_probabilities_hidden():
    trace = "one two three four P = 0.9 end"
    query = Prompts(PLAIN).judge(REAL, trace, 1, 2)
    assert "Reasoning so far:\none two three four\n" in query
    full = Prompts(PLAIN).judge(REAL, trace, 2, 2)
    assert "P = ?" in full and "0.9" not in full
    assert "Output ONLY a number 0-1." in full
    assert cut_words("a b c d", 0.25) == "a" and cut_words("", 0.5) == ""


def test_a_chat_model_is_asked_through_its_tokenizers_chat_template(untrained_model):
    from martingale.model.load import load
    _, tok = load(untrained_model)
    tok.chat_template = "{% for m in messages %}<|user|> {{ m['content'] }}{% endfor %}<|assistant|>"
    text = Prompts(LOG, tok).reasoned(REAL)
    assert text.startswith("<|user|> Will A win the election?") and text.endswith("<|assistant|>")


def test_chat_prompts_for_a_tokenizer_without_a_chat_template_fail_in_one_line(untrained_model):
    from martingale.model.load import load
    _, tok = load(untrained_model)
    with pytest.raises(ValueError, match=r"^prompts\.chat: .* has none \(set prompts\.chat=false\)$"):
        Prompts(LOG, tok).reasoned(REAL)


def test_a_judge_answer_is_read_as_the_number_it_was_told_to_output():
    assert Prompts(PLAIN).read_answer(" 0.35") == 0.35
    assert Prompts(PLAIN).read_answer("I think 0.35") is None
    assert Prompts({"name": "embedded"}).read_answer("0.35 end") == 0.35


def test_a_template_field_the_prompts_do_not_have_is_refused_at_check():
    from martingale.config.schema import domains
    assert domains()["prompts.judge"].problem(LOG["judge"]) is None
    assert "unknown field {answer}" in domains()["prompts.reasoned"].problem("Say {answer}")
    assert "unknown field {trace}" in domains()["prompts.reasoned"].problem("Read {trace}")


def test_a_rollout_with_the_log_prompts_asks_the_model_the_rendered_prompts(default_cfg, untrained_model):
    """The log's prompts go to the model as rendered (the embedded model cannot answer them: every
    unparsed answer is None, never a number); the running-total columns exist only in the
    embedded format."""
    from martingale.beliefs.elicit import rollout
    from martingale.beliefs.readers import ReadContext
    from martingale.model.hf import HFBackend
    from martingale.world.synthetic import SyntheticWorld

    class Recording(HFBackend):
        asked: list[str] = []

        def sample(self, prompts, *args):
            self.asked.extend(prompts)
            return super().sample(prompts, *args)

    gen = Recording.load(untrained_model, default_cfg["model"])
    world = SyntheticWorld(default_cfg["world"])
    qs = world.splits()[1][:3]
    cfg = {**default_cfg, "prompts": {**PLAIN, "max_new_tokens": 6, "judge_max_tokens": 2}}
    ro = rollout(gen, qs, ReadContext(world=world, judge=gen, config=cfg),
                 {"mode": "samemode", "judge": "self", "cut": 0.5}, seed=0, temperature=1.0)
    assert gen.asked == [Prompts(PLAIN).reasoned(q) for q in qs]
    assert ro.trace_cut == [None] * 3 and ro.trace_last == [None] * 3
    assert all(p is None or 0 <= p <= 1 for p in ro.prior + ro.posterior + ro.stated)


def test_the_prompt_set_enters_the_ids_of_the_stages_that_ask_only(tmp_path):
    from martingale.plan import Plan

    from projcopy import make_project
    root = make_project(tmp_path / "proj", runs={"log-prompts.yaml": "parent: base\nknob: prompts=log\n"})
    plan = Plan.load(root)
    (base,), (mine,) = plan.run_stages("base"), plan.run_stages("log-prompts")
    assert mine.model_stage == base.model_stage and mine.eval_stage != base.eval_stage
    assert "prompts" not in plan.stages[base.eval_stage].cfg
    assert plan.stages[mine.eval_stage].cfg["prompts"]["name"] == "log"
