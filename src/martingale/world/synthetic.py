"""A synthetic forecasting world whose exact Bayesian belief after any prefix of clues is known.

A question lists ``clues_per_question`` clues drawn i.i.d. from P(clue | y). Each clue type has a
fixed log-likelihood ratio llr = log P(c | y=1) / P(c | y=0), so the Bayes belief after k clues is
sigmoid(logit(base_rate) + Σ_{i<k} llr[c_i]). A negated question asks the opposite (y' = 1 − y):
every log-odds flips sign. Reasoning matters: the clue table lives only in the model's weights, and
a reasoner recalls one llr per step; a one-pass ("snap") answer is a different, gut functional.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .registry import world
from .section import world_section


def expit(x):
    """scipy.special.expit, imported on first use: the plan imports this module at parse time."""
    from scipy.special import expit as f
    return f(x)


def logit(x):
    """scipy.special.logit, imported on first use: the plan imports this module at parse time."""
    from scipy.special import logit as f
    return f(x)


@dataclass(frozen=True)
class Question:
    """A binary question: its clues, resolution y, and (for a real one) its text."""
    qid: str
    clues: tuple[int, ...]
    y: int                  # resolution of the question as asked (already flipped if negated)
    negated: bool = False
    text: str | None = None  # the evidence as a questions file words it (world=jsonl); None: the clue words
    question: str | None = None   # a questions file's question text, resolution criteria and option
    criteria: str | None = None
    option: str = ""
    crowd: float | None = None    # a forecast from elsewhere (a questions file's crowd_p), for the question as asked

    def negation(self) -> "Question":
        """The same evidence, asked the other way round: y' = 1 − y."""
        from dataclasses import replace
        suffix = "~" if not self.negated else ""
        qid = self.qid[:-1] if self.negated else self.qid + suffix
        crowd = None if self.crowd is None else 1 - self.crowd
        return replace(self, qid=qid, y=1 - self.y, negated=not self.negated, crowd=crowd)


@world("synthetic")
class SyntheticWorld:
    """Clue likelihood table + seeded question splits + the exact Bayes oracle."""

    MAX_ROUNDS = 200    # draws of n_heldout questions before splits() gives up (never loops forever)
    _units: list[int]             # step_units' table, made on first use from _units_of (the llr it rounded)
    _units_of: np.ndarray

    def __init__(self, cfg: object):
        self.cfg = section = world_section(cfg)
        self.base_rate = float(section.base_rate)
        self.n_types = int(section.n_clue_types)
        self.n_clues = int(section.clues_per_question)
        self.unit = float(section.logodds_unit)
        self.max_step = int(section.max_step)
        rng = np.random.default_rng([int(section.seed), 0])
        alpha = np.full(self.n_types, float(section.dirichlet_alpha))
        self.p1 = rng.dirichlet(alpha)
        self.p0 = rng.dirichlet(alpha)
        self.llr = np.log(self.p1 / self.p0)
        self.prior_logodds = float(logit(self.base_rate))
        # The gut (snap) functional counts clues for and against at the average clue strength,
        # over the first snap_clues of them, scaled by snap_gain (traces.snap).
        mix = self.base_rate * self.p1 + (1 - self.base_rate) * self.p0
        self.gut_weight = float(np.sum(mix * np.abs(self.llr)))
        self.snap_clues = max(1, int(np.ceil(float(section.snap_clues) * self.n_clues)))
        self.snap_gain = float(section.snap_gain)

    # -- questions -------------------------------------------------------------------------
    def sample(self, n: int, rng: np.random.Generator, prefix: str) -> list[Question]:
        ys = (rng.random(n) < self.base_rate).astype(int)
        out = []
        for i, y in enumerate(ys):
            probs = self.p1 if y else self.p0
            clues = tuple(int(c) for c in rng.choice(self.n_types, size=self.n_clues, p=probs))
            out.append(Question(f"{prefix}{i:05d}", clues, int(y)))
        return out

    def splits(self) -> tuple[list[Question], list[Question]]:
        """Seeded train and held-out sets; no held-out question repeats a train question's clues.
        ``heldout_draw`` k > 0 draws the held-out set afresh from the same world (stream [seed, 2, k]):
        the same clue table and training questions, other held-out questions."""
        seed, wanted = int(self.cfg.seed), int(self.cfg.n_heldout)
        train = self.sample(int(self.cfg.n_train), np.random.default_rng([seed, 1]), "tr")
        seen = {q.clues for q in train}
        draw = int(self.cfg.heldout_draw or 0)
        rng = np.random.default_rng([seed, 2, draw] if draw else [seed, 2])
        heldout: list[Question] = []
        for _ in range(self.MAX_ROUNDS):
            if len(heldout) >= wanted:
                return train, heldout
            for q in self.sample(wanted, rng, "ho"):
                if q.clues not in seen and len(heldout) < wanted:
                    seen.add(q.clues)
                    heldout.append(Question(f"ho{len(heldout):05d}", q.clues, q.y))
        if len(heldout) >= wanted:
            return train, heldout
        raise ValueError(f"world.n_heldout: only {len(heldout)} distinct held-out questions found in "
                         f"{self.MAX_ROUNDS} draws of {wanted}; fewer clue types or "
                         "clues per question than the splits need")

    # -- the oracle ------------------------------------------------------------------------
    def clue_logodds(self, q: Question, k: int | None = None) -> float:
        """Exact log-odds of the question after its first k clues (all when k is None)."""
        clues = q.clues if k is None else q.clues[:k]
        lo = self.prior_logodds + float(sum(self.llr[c] for c in clues))
        return -lo if q.negated else lo

    def clue_belief(self, q: Question, k: int | None = None) -> float:
        """Exact Bayes probability that the question resolves yes after its first k clues."""
        return float(expit(self.clue_logodds(q, k)))

    def bayes_logodds(self, q: Question, k: int | None = None) -> float | None:
        """The oracle's log-odds after the first k clues; None where a world has no oracle for a
        question (a real question of world=jsonl)."""
        return self.clue_logodds(q, k)

    def bayes(self, q: Question, k: int | None = None) -> float | None:
        """The oracle's belief after the first k clues; None where a world has no oracle for it."""
        return self.clue_belief(q, k)

    def step_units(self, clue: int, negated: bool) -> int:
        """A clue's llr in integer units of ``logodds_unit``, as a calibrated reasoner writes it
        (the whole table rounded once: every trace of a stage reads it, clue by clue)."""
        units = self._units_table()[clue]
        return -units if negated else units

    def _units_table(self) -> list[int]:
        if getattr(self, "_units", None) is None or self._units_of is not self.llr:
            self._units = [int(u) for u in np.clip(np.rint(self.llr / self.unit), -self.max_step, self.max_step)]
            self._units_of = self.llr
        return self._units

    def prior_units(self, negated: bool) -> int:
        units = int(np.rint(self.prior_logodds / self.unit))
        return -units if negated else units

    def constant_brier(self) -> float:
        """Brier of always predicting the base rate: r(1 − r)."""
        return self.base_rate * (1 - self.base_rate)
