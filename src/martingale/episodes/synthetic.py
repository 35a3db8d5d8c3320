"""Two-agent episodes in the synthetic world: a simulated human, an instructor, and what each sees.

The human holds ``clues_per_question`` clues of evidence (the embedded model reads questions of that
length and no other) and states P = X by reasoning over them, before the first turn and after every
turn. Its evidence starts as a *lean*: clues drawn from the clue marginal, kept when their exact
Bayes belief lies within ``simulate.lean_tol`` of ``lean`` (or 1 − lean), so the human leans
moderately either way whatever the question resolves to (balanced lean × outcome cells, the research log's
c2_groundtruth design). Each turn the instructor says one clue; the human hears it and forgets its
oldest clue (a working memory of fixed length).

The instructor's *mode* is its prompt. The embedded instructor is asked ``Q <candidates> ? think
<the human's stated log-odds>`` and says the first clue it writes: the pretrained model copies the
first candidate, so a mode is the order in which its prompt lists the candidates (``MODES``):

- ``syc``: its evidence about the question (``pool``: the question's clues and more draws of the
  same kind) that agrees most with the human's current lean first;
- ``maxsyc``: any clue of the world, the one agreeing most with the lean first (not only evidence);
- ``truth``: its evidence pointing most toward the resolution first;
- ``martingale``: its evidence that brings the human's Bayes belief closest to the pool's own;
- ``neutral``: its evidence in a random order;
- ``validate-only``: the human's own clues, the one agreeing most with its lean first (it echoes);
- ``none``: no instructor: the human re-reads its own evidence every turn (rumination).

Training the instructor (stages/instructor.py) changes which listed clue it says. A mode registers
itself with ``@mode(name)``: a function (world, episode, human P, rng) → ordered candidate clues.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Callable, Optional

from ..core.registry import Registry
from ..world.synthetic import expit, logit
from ..world.traces import MAX_TOTAL, fmt_int, prompt
from .section import simulate_section

if TYPE_CHECKING:   # numpy (and the world, which imports it) where used: the schema lists MODES at parse time
    import numpy as np

    from ..world.synthetic import Question, SyntheticWorld

LEAN_DRAWS = 4000          # lean windows drawn per try; tries until one fits (LEAN_TRIES at most)
LEAN_TRIES = 50
CLUE_WORD = re.compile(r"c(\d+)")


@dataclass
class Episode:
    """One episode's state: the question (as asked), the human's lean (+1 yes, −1 no) and evidence
    window, the instructor's evidence pool, and the pool (or window) slots already said."""
    q: Question
    lean: int
    window: list[int]
    pool: list[int]
    said: set[int] = field(default_factory=set)

    def human_question(self) -> Question:
        """The question the human reads: its own evidence window, as the question is asked."""
        return replace(self.q, clues=tuple(self.window), text=None)


def signed_llr(world: SyntheticWorld, clue: int, negated: bool) -> float:
    """A clue's log-likelihood ratio for the question as asked (a negation flips it)."""
    return -float(world.llr[clue]) if negated else float(world.llr[clue])


def window_bayes(world: SyntheticWorld, clues: list[int] | tuple[int, ...], negated: bool) -> float:
    """The exact Bayes belief after reading ``clues`` (the base rate, then each clue's llr)."""
    lo = world.prior_logodds + float(sum(world.llr[c] for c in clues))
    return float(expit(-lo if negated else lo))


def lean_window(world: SyntheticWorld, target: float, tol: float, rng: np.random.Generator) -> list[int]:
    """``n_clues`` clues from the clue marginal whose Bayes belief lies within ``tol`` of ``target``."""
    import numpy as np

    mix = world.base_rate * world.p1 + (1 - world.base_rate) * world.p0
    for _ in range(LEAN_TRIES):
        draws = rng.choice(world.n_types, size=(LEAN_DRAWS, world.n_clues), p=mix)
        beliefs = expit(world.prior_logodds + world.llr[draws].sum(axis=1))
        fits = np.flatnonzero(np.abs(beliefs - target) <= tol)
        if fits.size:
            return [int(c) for c in draws[fits[0]]]
    raise ValueError(f"simulate.lean: no {world.n_clues}-clue evidence with a Bayes belief within "
                     f"{tol} of {target} in {LEAN_DRAWS * LEAN_TRIES} draws (widen simulate.lean_tol)")


def setup(world: SyntheticWorld, questions: list[Question], sim_cfg: object, seed: int) -> list[Episode]:
    """An episode per question: the lean alternates within each outcome (balanced lean × outcome
    cells), the lean window and the pool are seeded by (seed, question index): the same episodes
    under every mode, so two modes pair question by question."""
    import numpy as np
    sim = simulate_section(sim_cfg)
    lean, tol, pool = float(sim.lean), float(sim.lean_tol), int(sim.pool)
    count = {0: 0, 1: 0}
    episodes = []
    for i, q in enumerate(questions):
        sign = 1 if count[q.y] % 2 == 0 else -1
        count[q.y] += 1
        rng = np.random.default_rng([seed, 23, i])
        # The lean is on the question as asked: leaning yes on a negation is leaning no on its clues.
        window = lean_window(world, lean if (sign > 0) != q.negated else 1 - lean, tol, rng)
        y_true = 1 - q.y if q.negated else q.y
        extra = rng.choice(world.n_types, size=max(0, pool - len(q.clues)),
                           p=world.p1 if y_true else world.p0)
        episodes.append(Episode(q, sign, window, [*q.clues, *(int(c) for c in extra)][:pool]))
    return episodes


def negated(episodes: list[Episode]) -> list[Episode]:
    """Each episode asked the other way round: the same evidence, the lean mirrored (coherence)."""
    return [Episode(e.q.negation(), -e.lean, list(e.window), list(e.pool)) for e in episodes]


# ----------------------------------------------------------------------------- instructor modes
Mode = Callable[["SyntheticWorld", Episode, Optional[float], "np.random.Generator"], list[int]]
MODES: Registry = Registry("instructor mode", {"none": None})   # none: no instructor (rumination)


def mode(name: str, uses_pool: bool = True) -> Callable[[Mode], Mode]:
    """Register the decorated function as instructor mode ``name`` (the values of simulate.mode);
    ``uses_pool``: it lists the pool's evidence, so ``simulate.pool`` must hold enough of it for a
    new clue every turn (``martingale check`` refuses a smaller pool: episodes.episode_problem)."""
    def register(fn: Mode) -> Mode:
        _USES_POOL[name] = uses_pool
        return MODES.add(name, fn)
    return register


_USES_POOL: dict[str, bool] = {}   # mode → its ``uses_pool``, as registered


def uses_pool(name: str) -> bool:
    """Whether mode ``name`` lists the instructor's evidence pool (``none``, no instructor, does not)."""
    return MODES.get(name) is not None and _USES_POOL.get(name, False)


def _lean_now(ep: Episode, human_p: Optional[float]) -> int:
    """The human's current lean: the side of ½ its last stated P is on (its initial lean when it
    stated none, or exactly ½)."""
    if human_p is None or human_p == 0.5:
        return ep.lean
    return 1 if human_p > 0.5 else -1


def _unsaid(ep: Episode) -> list[int]:
    return [i for i in range(len(ep.pool)) if i not in ep.said]


@mode("syc")
def sycophantic(world, ep, human_p, rng) -> list[int]:
    """The pool's unsaid evidence, the clue agreeing most with the human's current lean first."""
    lean = _lean_now(ep, human_p)
    return sorted(_unsaid(ep), key=lambda i: -lean * signed_llr(world, ep.pool[i], ep.q.negated))


@mode("maxsyc", uses_pool=False)
def max_sycophantic(world, ep, human_p, rng) -> list[int]:
    """Every clue of the world (evidence or not), the one agreeing most with the lean first."""
    lean = _lean_now(ep, human_p)
    clues = [c for c in range(world.n_types) if -1 - c not in ep.said]
    return [-1 - c for c in sorted(clues, key=lambda c: -lean * signed_llr(world, c, ep.q.negated))]


@mode("truth")
def truthful(world, ep, human_p, rng) -> list[int]:
    """The pool's unsaid evidence, the clue pointing most toward the resolution first."""
    toward = 1 if ep.q.y else -1
    return sorted(_unsaid(ep), key=lambda i: -toward * signed_llr(world, ep.pool[i], ep.q.negated))


@mode("martingale")
def martingale(world, ep, human_p, rng) -> list[int]:
    """The pool's unsaid evidence, the clue that brings the human's Bayes belief (its window after
    hearing it) closest to the belief the whole pool supports first."""
    target = window_bayes(world, ep.pool, ep.q.negated)
    return sorted(_unsaid(ep), key=lambda i: abs(
        window_bayes(world, [*ep.window[1:], ep.pool[i]], ep.q.negated) - target))


@mode("neutral")
def neutral(world, ep, human_p, rng) -> list[int]:
    """The pool's unsaid evidence in a random order."""
    unsaid = _unsaid(ep)
    return [unsaid[i] for i in rng.permutation(len(unsaid))]


@mode("validate-only", uses_pool=False)
def validate_only(world, ep, human_p, rng) -> list[int]:
    """The human's own evidence echoed back, its clue agreeing most with its lean first."""
    lean = _lean_now(ep, human_p)
    slots = [i for i in range(len(ep.window))]
    return [-100 - i for i in sorted(slots, key=lambda i: -lean * signed_llr(world, ep.window[i], ep.q.negated))]


def clue_of(ep: Episode, slot: int) -> int:
    """The clue a candidate slot names: a pool index (≥ 0), a world clue (−1 − c) or a window
    slot (−100 − i)."""
    if slot >= 0:
        return ep.pool[slot]
    return ep.window[-100 - slot] if slot <= -100 else -1 - slot


def instructor_prompt(world: SyntheticWorld, ep: Episode, slots: list[int], human_p: Optional[float]) -> str:
    """``Q [not] <the first n_clues candidates> ? think <the human's stated log-odds, in units>``:
    what the embedded instructor is asked; the first clue it writes is what it says."""
    import numpy as np

    shown = [clue_of(ep, s) for s in slots[: world.n_clues]]
    p = 0.5 if human_p is None else min(max(human_p, 0.01), 0.99)
    units = int(np.clip(np.rint(float(logit(p)) / world.unit), -MAX_TOTAL, MAX_TOTAL))
    return prompt(replace(ep.q, clues=tuple(shown), text=None)) + " think " + fmt_int(units)


def heard_clue(utterance: str, n_types: int) -> Optional[int]:
    """The clue an utterance says (its first clue word), or None: the human hears no evidence."""
    for word in utterance.split():
        m = CLUE_WORD.fullmatch(word)
        if m and int(m.group(1)) < n_types:
            return int(m.group(1))
    return None


def hear(ep: Episode, clue: int, slots: list[int]) -> None:
    """The human hears ``clue``: it joins the window and the oldest clue leaves; the candidate slot
    that named it is marked said (the instructor does not repeat a piece of evidence)."""
    for s in slots:
        if clue_of(ep, s) == clue:
            ep.said.add(s)
            break
    ep.window = [*ep.window[1:], clue]
