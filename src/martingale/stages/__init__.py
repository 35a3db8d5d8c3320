"""Stage kinds. Each module here declares one kind with ``@stage_kind`` on its ``run`` and is found
by ``kinds()``; the plan places kinds in a run's chain, one generic Snakemake rule runs any of them.

A kind's place in a chain:

- ``source``  makes the start model from nothing (``pretrain``: the embedded model; ``weights``:
  local weights); the one whose ``when(cfg)`` holds is used.
- ``start``   turns the start model into another before any step (``distill``: D), when ``when(cfg)``.
- ``step``    a model stage s1, s2 … (``stages.<name>.kind``, default ``train``): start model in,
  model out.
- ``measure`` reads a model stage for one seed (``eval.kind``, default ``evaluate``): records and
  metrics out.

Its slice is the config keys ``keys`` (plus ``stage``, the step's own config, for a step, and
``seed`` for a per-seed kind): the stage id hashes it, and ``run`` receives it. A kind with settings
of its own declares their section (``section=Section("simulate", SimulateConfig)``: a key of the
config, one of its keys), in a run's identity only where the kind is in its chain (``uses_key``);
a kind that reads ``elicit`` also sees the section of the reader it reads with. A kind that does not
generate through ``model.backend`` (``serves=False``) sees no serving keys (``model.backend``,
``server_url``, every backend's section): the same model built under another engine is the same
stage. Input roles name
upstream stage folders: ``judge_model`` is the run's judge (``elicit.judge_model``: the natural
model or the start model), ``human_model`` the episodes' human (the start model), any other role the
model upstream. A kind that ``trains`` (gradient steps) on a CPU model has its model's thread count
(``model.resources.cpus``) in its slice: BLAS splits the gradient's sums by thread, so 1 and 2 threads
give different bytes (measured), and the job computes with exactly that many whatever it is given. ``run(cfg, <roles>=folder, out_dir=folder)`` writes only out_dir; heavy libraries
(torch, transformers) are imported inside it, so finding the kinds never loads them.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional

from ..domains import Section
from ..registry import Registry

PLACES = ("source", "start", "step", "measure")
HELPERS = ("common", "checkpoint")   # modules here that declare no kind


@dataclass(frozen=True)
class StageKind:
    name: str
    place: str
    keys: tuple[str, ...]
    inputs: tuple[str, ...]
    run: Callable[..., Any]
    when: Optional[Callable[[dict], bool]] = None   # source/start: does this run need the kind
    per_seed: bool = False
    local: bool = False                             # runs on the submitting host, never as a job
    serves: bool = False                            # generates through model.backend (its keys matter)
    questions: bool = True                          # asks the world's questions (False: its clue table only)
    trains: bool = False                            # takes gradient steps: on a CPU its bytes depend on the thread count
    section: Optional[Section] = None               # its own config section (in its keys, in a run's identity where it runs)


_KINDS: Registry = Registry("stage kind")


def stage_kind(name: str, place: str, keys: tuple[str, ...], inputs: tuple[str, ...] = (),
               when: Optional[Callable[[dict], bool]] = None, per_seed: bool = False,
               local: bool = False, serves: bool = False, questions: bool = True,
               trains: bool = False, section: Optional[Section] = None) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register the decorated ``run`` as stage kind ``name`` (see the module docstring); its own
    ``section`` (a top-level key) is one of its keys."""
    if place not in PLACES:
        raise ValueError(f"stage kind {name}: place {place!r} is not one of {', '.join(PLACES)}")
    if section is not None and section.key not in keys:
        keys = (*keys, section.key)

    def register(run: Callable[..., Any]) -> Callable[..., Any]:
        _KINDS.add(name, StageKind(name, place, tuple(keys), tuple(inputs), run, when,
                                   per_seed, local, serves, questions, trains, section))
        return run
    return register


def kinds() -> dict[str, StageKind]:
    """Every registered kind, after importing each stage module of this package (once)."""
    return _KINDS.discover(__name__, __path__, HELPERS)


def kind_names(place: str) -> tuple[str, ...]:
    """Names of the kinds registered for one place (the allowed values of its config key)."""
    return tuple(k.name for k in kinds().values() if k.place == place)


def chain_kinds(cfg: dict) -> list[StageKind]:
    """The kinds of a run's chain, from its resolved config: its source and start kinds (their
    ``when``), the kind of each step with a reward (``stages.<s>.kind``) and its measure
    (``eval.kind``); a name no kind has is skipped (the schema refuses it). What a run uses, so
    what its identity holds: a kind's own section is in it only where the kind is in its chain."""
    every = kinds()
    out = [k for k in every.values() if k.place in ("source", "start") and _holds(k, cfg)]
    steps = [st.get("kind") for st in (cfg.get("stages") or {}).values() if (st or {}).get("reward") is not None]
    out += [every[name] for name in steps if name in every and every[name].place == "step"]
    measure = every.get((cfg.get("eval") or {}).get("kind"))
    return out + ([measure] if measure is not None and measure.place == "measure" else [])


def _holds(kind: StageKind, cfg: dict) -> bool:
    """``kind.when(cfg)``; False for a config without the keys it reads (a partial one)."""
    try:
        return kind.when is not None and bool(kind.when(cfg))
    except (KeyError, TypeError, AttributeError):
        return False


def uses_key(cfg: dict, key: str) -> bool:
    """Whether a kind in the run's chain reads top-level config key ``key`` (its own section, or one
    it names in its keys: the instructor plays episodes with ``simulate``)."""
    return any(key in k.keys for k in chain_kinds(cfg))
