"""The forced-answer read: a model's P from its next-token distribution after a fixed prefix.

A small model rarely writes ``P = X`` (SmolLM2-135M: 2 of 36 answers parsed), so its verbal answer
measures little. The forced read prefills the answer with ``prompts.forced_prefix`` (the research log's
format, ``P = 0.``) and reads the next token's distribution: each token whose text completes the
prefix to a well-formed number in [0, 1] (``P = 0.`` + ``7`` → 0.7; a multi-digit token ``75`` →
0.75) is a valid answer with that value, and

    P_forced = Σ_valid p(t)·value(t) / Σ_valid p(t),   mass = Σ_valid p(t)

over the top ``FORCED_TOP`` tokens (what a vLLM server returns; HF takes the same top so both
backends read the same number). A read whose mass is under ``prompts.forced_min_mass`` is unparsed
(None), never a number. With one-digit tokens the value is the number those tokens state: the
first digit, as a model writing ``P = 0.7`` means 0.7 (a truncation of longer numbers, < 0.1).
"""
from __future__ import annotations

import re
from typing import TYPE_CHECKING, cast

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from ..model.backend import Backend

FORCED_TOP = 20          # next-token candidates read (vLLM's default max_logprobs)
# The prefix + the token's text must be exactly one number statement: ``P = 0.7``, ``0.7`` (a judge
# told to output a number), ``P = 0.62`` (the embedded format); a space, a second dot, a letter, a
# sign or a newline after the prefix is no answer.
_ANSWER = re.compile(r"(?:P\s*=\s*)?(\d+(?:\.\d+)?|\.\d+)")
_STATEMENT = re.compile(r"P(?<![A-Za-z0-9]P)[*_`$]*\s*(?:[:=≈~≃]{1,2}|\\approx)")


def answer_value(text: str) -> float | None:
    """The probability ``text`` (prefix + one token) states as a whole, or None."""
    m = _ANSWER.fullmatch(text)
    if m is None:
        return None
    v = float(m.group(1))
    return v if 0.0 <= v <= 1.0 else None


class TokenValues:
    """token id → the value it completes ``prefix`` to (None: not an answer), per tokenizer and
    prefix, computed once per token: the token's text is what decoding prefix + token adds."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase, prefix: str):
        self.tokenizer, self.prefix = tokenizer, prefix
        self.prefix_ids = list(tokenizer(prefix, add_special_tokens=False)["input_ids"]) if prefix else []
        self.prefix_text = cast(str, tokenizer.decode(self.prefix_ids)) if prefix else ""
        self._cache: dict[int, float | None] = {}

    def __call__(self, token: int) -> float | None:
        if token not in self._cache:
            text = cast(str, self.tokenizer.decode(self.prefix_ids + [int(token)]))   # one sequence: its text
            tail = text[len(self.prefix_text):] if text.startswith(self.prefix_text) else ""
            self._cache[token] = answer_value(self.prefix + tail) if tail else None
        return self._cache[token]


def read(top: dict[int, float], values: TokenValues, min_mass: float) -> tuple[float | None, float]:
    """(P, mass) from one next-token top-k {token id: log-prob}: the probability-weighted mean of the
    valid answers' values, None when they hold less than ``min_mass`` of the probability."""
    import math
    mass, total = 0.0, 0.0
    for token, lp in top.items():
        v = values(int(token))
        if v is not None:
            p = math.exp(lp)
            mass += p
            total += p * v
    mass = min(1.0, mass)
    if mass < min_mass or mass <= 0.0:
        return None, round(mass, 6)
    return round(total / mass if mass < 1.0 else total, 6), round(mass, 6)


def forced_reads(gen: Backend, texts: list[str], prefix: str, min_mass: float) -> list[tuple[float | None, float]]:
    """(P, mass) after each text + ``prefix`` with backend ``gen`` (its ``next_token_logprobs``)."""
    if not texts:
        return []
    if gen.tokenizer is None:
        raise ValueError("a forced read takes next-token log-probs through a local tokenizer: this backend has none")
    values = TokenValues(gen.tokenizer, prefix)
    tops = gen.next_token_logprobs([t + prefix for t in texts], FORCED_TOP)
    return [read(top, values, min_mass) for top in tops]


def answer_context(prompt: str, completion: str, embedded: bool) -> str:
    """What the forced posterior is read after: the prompt and the reasoned completion up to its
    last ``P`` statement (the answer is replaced by the prefix), then a separator."""
    last = None
    for last in _STATEMENT.finditer(completion):
        pass
    body = completion[:last.start()] if last is not None else completion
    body = body.rstrip()
    if embedded:
        return f"{prompt} {body} " if body else f"{prompt} "
    return f"{prompt}{body}\n" if body else prompt
