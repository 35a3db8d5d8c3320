"""What a model is asked: the prompt set ``prompts.name`` (conf/prompts/<name>.yaml).

``embedded``: the embedded model's own format (world/traces.py): ``Q c7 c12 ... ? think`` for a
reasoned trace, ``… snap`` for a snap answer, ``… judge <trace cut at k steps> read P =`` for a read.
``log`` (and any other set): the research log's English prompts, templates in config with
``{question}``, ``{background}``, ``{resolution_criteria}``, ``{opt}`` (the option asked for) and,
for the judge, ``{trace}`` (the reasoning so far, its stated probabilities hidden); rendered
through the tokenizer's chat template where ``prompts.chat`` says so (a chat model). A same-mode read
cuts the trace at the same fraction of its words as the embedded format cuts at k of n clues.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Optional, cast

from ..world import traces as fmt
from ..world.synthetic import Question
from .api_judge import blind
from .parse import parse_p
from .section import PromptsConfig, prompts_section

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

EMBEDDED = "embedded"


def is_embedded(prompts_cfg: object) -> bool:
    """Whether the prompt set is the embedded model's own format (no chat template)."""
    return prompts_section(prompts_cfg).name == EMBEDDED


def option(q: Question) -> str:
    """The outcome a probability is asked for: the question's option ("Yes" when it names none);
    for a negation, that it does NOT happen."""
    opt = q.option or "Yes"
    return f"NOT {opt}" if q.negated else opt


def fields(q: Question, context_words: int | None = None) -> dict[str, str]:
    """A question's template fields; ``context_words`` (prompts.context_words) cuts its background
    and resolution criteria to their first n words each (a CPU's prompt budget)."""
    def cut(text: str | None) -> str:
        return " ".join((text or "").split()[:context_words]) if context_words else (text or "")
    return {"question": q.question or fmt.prompt(q), "background": cut(q.text),
            "resolution_criteria": cut(q.criteria), "opt": option(q)}


def cut_words(trace: str, fraction: float) -> str:
    """The first ``fraction`` of a trace's words (at least one word where it has any)."""
    words = trace.split()
    n = max(1 if words else 0, int(round(fraction * len(words))))
    return " ".join(words[:n])


class Prompts:
    """Renders the reasoned, snap and judge prompts of one prompt set for one tokenizer."""

    def __init__(self, prompts_cfg: object, tokenizer: Optional[PreTrainedTokenizerBase] = None):
        self.cfg: PromptsConfig = prompts_section(prompts_cfg)
        self.tokenizer = tokenizer
        self.embedded = self.cfg.name == EMBEDDED

    def fields(self, q: Question) -> dict[str, str]:
        return fields(q, self.cfg.context_words)

    def _render(self, template: str, values: dict[str, str]) -> str:
        text = template.format(**values)
        if not self.cfg.chat:
            return text
        if self.tokenizer is None or not getattr(self.tokenizer, "chat_template", None):
            raise ValueError(f"prompts.chat: the {self.cfg.name} prompts ask for a chat template "
                             "and this model's tokenizer has none (set prompts.chat=false)")
        return cast(str, self.tokenizer.apply_chat_template([{"role": "user", "content": text}],
                                                            add_generation_prompt=True, tokenize=False))

    # -- lengths, and the completion text as read (the embedded format's first word is in the prompt)
    def trace_tokens(self, n_steps: int) -> int:
        return 4 * n_steps + 6 if self.embedded else int(self.cfg.max_new_tokens)

    def snap_tokens(self) -> int:
        return 4 if self.embedded else int(self.cfg.snap_max_tokens)

    def judge_tokens(self) -> int:
        return 1 if self.embedded else int(self.cfg.judge_max_tokens)

    @property
    def forced_prefix(self) -> str:
        """The answer's forced-read prefix ("" = the prompt set reads no forced answer)."""
        return str(self.cfg.forced_prefix or "")

    @property
    def judge_forced_prefix(self) -> str:
        return str(self.cfg.judge_forced_prefix or "")

    @property
    def forced_min_mass(self) -> float:
        return float(self.cfg.forced_min_mass)

    def reasoned_text(self, completion: str) -> str:
        return "think " + completion if self.embedded else completion

    def snap_text(self, completion: str) -> str:
        return "snap " + completion if self.embedded else completion

    def read_answer(self, answer: str) -> float | None:
        """A judge's answer as a probability: the embedded judge continues ``read P =``; a
        template judge was told to output only a number."""
        return parse_p("P = " + answer.strip()) if self.embedded else parse_p(answer, bare=True)

    # -- prompts
    def reasoned(self, q: Question) -> str:
        if self.embedded:
            return fmt.prompt(q) + " think"
        return self._render(self.cfg.reasoned, self.fields(q))

    def snap(self, q: Question) -> str:
        if self.embedded:
            return fmt.prompt(q) + " snap"
        return self._render(self.cfg.snap, self.fields(q))

    def snap_within(self, q: Question, max_tokens: int) -> str:
        """The snap prompt with the question's background cut to the most words that keep it within
        ``max_tokens`` tokens (a load test's prompts of a chosen length: tests, bench)."""
        from dataclasses import replace

        tokenizer = self.tokenizer
        if tokenizer is None:
            raise ValueError("snap_within counts tokens: it needs the tokenizer")

        def length(words: list[str]) -> int:
            text = self.snap(replace(q, text=" ".join(words)))
            return len(tokenizer(text, add_special_tokens=False)["input_ids"])

        words = (q.text or "").split()
        lo, hi = 0, len(words)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if length(words[:mid]) <= max_tokens:
                lo = mid
            else:
                hi = mid - 1
        return self.snap(replace(q, text=" ".join(words[:lo])))

    def judge(self, q: Question, trace: str, k: int, n_steps: int) -> str | None:
        """What a judge is shown to read the belief after step k of n (None: the trace cannot be
        cut there). Every probability the trace states is hidden from a template judge."""
        if self.embedded:
            return fmt.read_query(q, trace, k)
        return self._render(self.cfg.judge, {**self.fields(q), "trace": blind(cut_words(trace, k / max(1, n_steps)))})
