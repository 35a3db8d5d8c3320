"""A finding's looks (``martingale decide``): the plan declared before the first look
(conf/decide.yaml), the runs a later look reads — the finding's run on more seeds, or on a fresh
held-out draw, each an ordinary run file with one knob — and the latest look that is complete.

A look is (k seeds, D held-out draws): the campaign's is the run itself (its seeds, draw 0). The
run of a look at draw d, ``look_run``, is the run with k seeds on held-out draw d, written so that
its paired effect is still against its parent: for a run some finding reads an effect of, it is
its own knob on the parent's look (``A-on-D--k5``: parent ``D--k5``, knob A-on-D's); otherwise a
child of the run whose one knob is ``seeds=[…]`` (or, at d > 0, of that run with the knob
``world.heldout_draw=d``). Its config is the run's with k seeds on draw d either way, so every
stage the two share is one stage of the store.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

import yaml

from ..config.runs import RunTree
from ..core.jsonvalue import Json
from ..stats.sequential import BOUNDARIES, Boundary
from .rows import TableError

DECIDE = "conf/decide.yaml"
SUFFIX = "--"          # a look's run-id: <run>--k5, <run>--d1, <run>--k5d1


@dataclass(frozen=True)
class DecidePlan:
    """conf/decide.yaml, checked: at most ``looks`` looks per finding (the campaign's the first),
    each later one taking a finding to the next of ``seeds`` or to one more of ``draws`` held-out
    draws; ``alpha`` over all of a finding's looks, spent by ``boundary``. No file: one look at 5%."""
    looks: int = 1
    seeds: tuple[int, ...] = ()
    draws: int = 1
    alpha: float = 0.05
    boundary: str = "pocock"

    def bound(self) -> Boundary:
        return Boundary(self.looks, self.alpha, self.boundary)

    @property
    def max_seeds(self) -> int:
        return max(self.seeds, default=0)

    def next_seeds(self, k: int) -> Optional[int]:
        """The seeds a look after one at k seeds takes a finding to (None: k is the most)."""
        return next((s for s in sorted(self.seeds) if s > k), None)


PLAN_KEYS = {"looks": "an integer ≥ 1", "seeds": "a list of increasing seed counts ≥ 1",
             "draws": "an integer ≥ 1", "alpha": "a number in (0, 0.5)", "boundary": " | ".join(BOUNDARIES)}


def describe(plan: DecidePlan) -> Optional[str]:
    """FINDINGS.md's line on the plan (None for a single look)."""
    if plan.looks < 2:
        return None
    b = plan.bound()
    return (f"Decide's plan (`{DECIDE}`, declared before the first look): at most {plan.looks} looks a finding, "
            f"seeds {' → '.join(map(str, plan.seeds))}, {plan.draws} held-out draw{'s' * (plan.draws > 1)}; "
            f"{plan.boundary}: every look at the nominal level {b.nominal():.4f} (CIs at {100 * b.level():.1f}%), "
            f"α {plan.alpha:g} over a finding's looks; p is adjusted to α's scale, min(1, p·α/α').")


def load_plan(root: Path | str) -> DecidePlan:
    """conf/decide.yaml as a DecidePlan; every problem one line naming the file and the key."""
    path = Path(root) / DECIDE
    if not path.exists():
        return DecidePlan()
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as e:
        raise TableError(f"{DECIDE}: not valid YAML ({str(e).splitlines()[0]})") from None
    if not isinstance(data, dict):
        raise TableError(f"{DECIDE}: expected a mapping of " + ", ".join(PLAN_KEYS))
    for key in data:
        if key not in PLAN_KEYS:
            raise TableError(f"{DECIDE}: {key}: unknown key (expected " + ", ".join(PLAN_KEYS) + ")")
    given: dict[str, Json] = {k: tuple(v) if k == "seeds" and isinstance(v, list) else v for k, v in data.items()}
    plan = DecidePlan(**given)              # YAML's values, each checked below
    checks = {
        "looks": isinstance(plan.looks, int) and not isinstance(plan.looks, bool) and plan.looks >= 1,
        "seeds": all(isinstance(s, int) and not isinstance(s, bool) and s >= 1 for s in plan.seeds)
        and list(plan.seeds) == sorted(set(plan.seeds)),
        "draws": isinstance(plan.draws, int) and not isinstance(plan.draws, bool) and plan.draws >= 1,
        "alpha": isinstance(plan.alpha, (int, float)) and not isinstance(plan.alpha, bool)
        and math.isfinite(plan.alpha) and 0 < plan.alpha < 0.5,
        "boundary": plan.boundary in BOUNDARIES,
    }
    for key, ok in checks.items():
        if not ok:
            raise TableError(f"{DECIDE}: {key}: {getattr(plan, key)!r} is not {PLAN_KEYS[key]}")
    return plan


# ---------------------------------------------------------------- a look's runs

def base_seeds(tree: RunTree, run: str) -> list[int]:
    """The run's own seeds, as its config lists them (before a reseed's offset)."""
    return list(tree.resolved(run).seeds)


def seeds_knob(seeds: list[int], k: int) -> list[int]:
    """The run's seeds extended to k: the next integers after its largest."""
    return list(seeds[:k]) + [max(seeds) + i for i in range(1, k - len(seeds) + 1)]


def look_name(run: str, k: int, draw: int, k0: int) -> str:
    """``<run>--k<k>d<draw>`` (each part only where it differs from the campaign's look)."""
    if (k, draw) == (k0, 0):
        return run
    return run + SUFFIX + (f"k{k}" if k != k0 else "") + (f"d{draw}" if draw else "")


@dataclass(frozen=True)
class LookRun:
    """A run file a look needs: its id, parent, knob and what it is for."""
    run_id: str
    parent: str
    knob: str
    question: str
    claims: tuple[str, ...] = field(default=())

    def text(self) -> str:
        """The run file, as a person would write it (strings JSON-quoted: valid YAML whatever they hold)."""
        lines = [f"parent: {self.parent}", f"knob: {json.dumps(self.knob)}",
                 f"question: {json.dumps(self.question, ensure_ascii=False)}"]
        if self.claims:
            lines.append("claims: [" + ", ".join(self.claims) + "]")
        return "\n".join(lines) + "\n"


def look_runs(tree: RunTree, run: str, k: int, draw: int, paired: set[str]) -> list[LookRun]:
    """The run files the look (k seeds, draw) of ``run`` needs, parents first; [] for the campaign's."""
    seeds = base_seeds(tree, run)
    name = look_name(run, k, draw, len(seeds))
    spec = tree.specs[run]
    if name == run or name in tree.specs:
        return []
    claims = tuple(spec.claims)
    what = f"martingale decide: {run} on {k} seeds" + (f", held-out draw {draw}" if draw else "")
    if run in paired and spec.parent is not None and spec.knob is not None:
        parents = look_runs(tree, spec.parent, k, draw, paired)
        parent = look_name(spec.parent, k, draw, len(base_seeds(tree, spec.parent)))
        return parents + [LookRun(name, parent, spec.knob, what, claims)]
    if draw == 0:
        return [LookRun(name, run, f"seeds=[{','.join(map(str, seeds_knob(seeds, k)))}]", what, claims)]
    first = look_runs(tree, run, k, 0, paired)
    return first + [LookRun(name, look_name(run, k, 0, len(seeds)), f"world.heldout_draw={draw}", what, claims)]


@dataclass(frozen=True)
class Look:
    """A finding's look: k seeds over ``draws`` held-out draws, the runs it reads (one per draw),
    its number (1: the campaign's) and how many it may take in all."""
    k: int
    draws: int
    runs: tuple[str, ...]
    index: int
    of: int
    first: int = 0          # the campaign's seeds: those after them were added by later looks

    def label(self) -> str:
        return f"{self.index} of {self.of} ({self.k} seed{'s' * (self.k != 1)}" + \
            (f", {self.draws} draws" if self.draws > 1 else "") + ")"


def looks_of(tree: RunTree, run: str, plan: DecidePlan) -> list[tuple[int, int]]:
    """Every (k, draws) a finding on ``run`` may be read at, the campaign's first."""
    k0 = len(base_seeds(tree, run))
    ks = [k0] + [s for s in sorted(plan.seeds) if s > k0]
    return [(k, d) for k in ks for d in range(1, plan.draws + 1)]


def look_index(tree: RunTree, run: str, plan: DecidePlan, k: int, draws: int) -> int:
    """A look's number: 1 + the seed steps and the redraws it took from the campaign's."""
    k0 = len(base_seeds(tree, run))
    steps = sum(1 for s in sorted(plan.seeds) if k0 < s <= k)
    return 1 + steps + (draws - 1)


def current_look(tree: RunTree, run: str, plan: DecidePlan, done: Callable[[str], bool]) -> Look:
    """The latest complete look of a finding on ``run`` (``done(run_id)``: is it built and current):
    the (k, draws) with the highest number whose every draw's run is done; the campaign's if none."""
    k0 = len(base_seeds(tree, run))
    best = Look(k0, 1, (run,), 1, plan.looks, k0)
    for k, draws in looks_of(tree, run, plan):
        runs = tuple(look_name(run, k, d, k0) for d in range(draws))
        index = look_index(tree, run, plan, k, draws)
        if index <= plan.looks and index > best.index and all(r in tree.specs and done(r) for r in runs):
            best = Look(k, draws, runs, index, plan.looks, k0)
    return best
