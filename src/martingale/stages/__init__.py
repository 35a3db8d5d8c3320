"""Stage kinds: each module here declares one kind (``declare``: its place in a chain, its config
keys and section, its input roles, its resources) and is found by ``kinds()``; its body, what a job
runs, is stages/body/<name>.py, imported only by the job. The plan places kinds in a run's chain;
one generic Snakemake rule runs any of them.

A kind's place in a chain:

- ``source``  makes the start model from nothing (``pretrain``, or ``weights``: local weights);
  the one whose ``when(cfg)`` holds is used.
- ``start``   turns the start model into another before any step (``distill``: D), when ``when(cfg)``.
- ``step``    a model stage s1, s2 … (``stages.<name>.kind``, default ``train``).
- ``measure`` reads a model stage for one seed (``eval.kind``, default ``evaluate``).

Its slice is its ``keys`` (plus ``stage`` for a step and ``seed`` for a per-seed kind): the stage
id hashes it and the body receives it, typed (config/slices.py); the kind's module declares that
type beside it (``TrainSlice``: a Protocol of its sections' dataclasses). docs/extending.md says what each flag changes in the slice.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Callable, Optional, TypedDict, TypeVar, Unpack

from ..core.registry import Registry
from ..core.settings import Section
from .section import RunView

PLACES = ("source", "start", "step", "measure")
# modules that declare no kind: section.py (the step and eval sections) and body/ (the bodies, imported
# only by a job); tests/test_imports.py checks the list
HELPERS = ("body", "section")


Body = Callable[..., object]     # a stage body's ``run(cfg, <roles>=folder, out_dir=folder)``
B = TypeVar("B", bound=Body)


@dataclass(frozen=True)
class StageKind:
    """A stage kind's declaration: what the plan, the rules and ``needs`` read. Its body is a module
    with ``run(cfg, <roles>=folder, out_dir=folder)``, imported only when a job runs the kind."""
    name: str
    place: str
    keys: tuple[str, ...]
    inputs: tuple[str, ...]
    body: str | Body                                # the body's module (its ``run``), or a one-file kind's run
    when: Optional[Callable[[RunView], bool]] = None   # source/start: does this run need the kind
    per_seed: bool = False
    local: bool = False                             # runs on the submitting host, never as a job
    serves: bool = False                            # generates through model.backend (its keys matter)
    questions: bool = True                          # asks the world's questions (False: its clue table only)
    trains: bool = False                            # takes gradient steps: on a CPU its bytes depend on the thread count
    section: Optional[Section] = None               # its own config section (in its keys, in a run's identity where it runs)
    ranked: bool = False                            # takes its steps on model.distributed.ranks processes (training/ranks.py)

    def run(self, *args: object, **kwargs: object) -> object:
        """The body: ``run(cfg, <roles>=folder, out_dir=folder)`` of its module, imported now (that
        each built-in kind's module is there with that ``run`` is tests/test_imports.py's check)."""
        body = self.body if callable(self.body) else importlib.import_module(self.body).run
        return body(*args, **kwargs)


_KINDS: Registry[StageKind] = Registry("stage kind")


def declare(name: str, place: str, keys: tuple[str, ...], inputs: tuple[str, ...] = (),
            when: Optional[Callable[[RunView], bool]] = None, per_seed: bool = False,
            local: bool = False, serves: bool = False, questions: bool = True,
            trains: bool = False, section: Optional[Section] = None,
            body: str | Body | None = None, ranked: bool = False) -> StageKind:
    """Register stage kind ``name`` (see the module docstring); its body is
    ``martingale.stages.body.<name>`` unless given; its own ``section`` is one of its keys."""
    if place not in PLACES:
        raise ValueError(f"stage kind {name}: place {place!r} is not one of {', '.join(PLACES)}")
    if section is not None and section.key not in keys:
        keys = (*keys, section.key)
    kind = StageKind(name, place, tuple(keys), tuple(inputs), body or f"{__name__}.body.{name}", when,
                     per_seed, local, serves, questions, trains, section, ranked)
    return _KINDS.add(name, kind)


class Declared(TypedDict, total=False):
    """``declare``'s keyword arguments but the body (a one-file kind's ``stage_kind``)."""
    inputs: tuple[str, ...]
    when: Optional[Callable[[RunView], bool]]
    per_seed: bool
    local: bool
    serves: bool
    questions: bool
    trains: bool
    section: Optional[Section]
    ranked: bool


def stage_kind(name: str, place: str, keys: tuple[str, ...], **declared: Unpack[Declared]) -> Callable[[B], B]:
    """A kind in one file: register the decorated ``run`` as its body (``declare``'s arguments)."""
    def register(run: B) -> B:
        declare(name, place, keys, body=run, **declared)
        return run
    return register


def kinds() -> dict[str, StageKind]:
    """Every registered kind, after importing each stage module of this package (once)."""
    return _KINDS.discover(__name__, __path__, HELPERS)


def kind_names(place: str) -> tuple[str, ...]:
    """Names of the kinds registered for one place (the allowed values of its config key)."""
    return tuple(k.name for k in kinds().values() if k.place == place)


def chain_kinds(cfg: RunView) -> list[StageKind]:
    """The kinds of a run's chain, from its resolved config: its source and start kinds (their
    ``when``), the kind of each step with a reward (``stages.<s>.kind``) and its measure
    (``eval.kind``); a name no kind has is skipped (the schema refuses it). What a run uses, so
    what its identity holds: a kind's own section is in it only where the kind is in its chain."""
    every = kinds()
    out = [k for k in every.values() if k.place in ("source", "start") and k.when is not None and k.when(cfg)]
    steps = [st.kind for st in cfg.stages.steps().values() if st.reward is not None]
    out += [every[name] for name in steps if name in every and every[name].place == "step"]
    measure = every.get(cfg.eval.kind)
    return out + ([measure] if measure is not None and measure.place == "measure" else [])


def uses_key(cfg: RunView, key: str) -> bool:
    """Whether a kind in the run's chain reads top-level config key ``key`` (its own section, or one
    it names in its keys: the instructor plays episodes with ``simulate``)."""
    return any(key in k.keys for k in chain_kinds(cfg))
