"""Rewards as plain functions over a batch (TRL's shape): arrays in, one float per sample out; one
module per family (martingale: A, A_slope; brier: B, BP; combined: C; episode: the instructor's).

A reward registers itself with ``@reward(name, needs=..., params=...)``: ``needs`` are the batch
inputs it reads (of ``INPUTS``: the elicited prior and posterior, the stated P, the label y; in a
two-agent episode the human's first and last P, its last P, y, and its P at every turn as
``trajectory``, episodes × (turns + 1)), and
its reward is NaN wherever one of them is NaN (a number that did not parse; the trainer gives that
sample the worst advantage); ``params`` are the stage config keys bound as its keyword arguments:
keys the stage has, or new ones the reward declares with their domains (``{"power": setting(2.0,
Real(1, 4), "…")}``: ``stages.<s>.power``, checked by ``martingale check``, in the stage's id only
where its reward is this one).
The schema allows exactly the registered names (``config.schema.choices``): the plan imports the
families at parse time (numpy, never scipy or torch).
"""
from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass, field
from typing import Callable, Mapping, cast

import numpy as np
from numpy.typing import ArrayLike

from ..core.jsonvalue import Json
from ..core.registry import Registry, epoch
from ..core.typed import fields_of

INPUTS = ("prior", "posterior", "stated", "y", "trajectory")
EPISODE_INPUTS = ("trajectory",)   # only an episode has one (stages/instructor.py): the human's P at every turn


@dataclass(frozen=True)
class Reward:
    """A registered reward: its batch function, the inputs it reads, the config keys it takes, and
    the keys it brings (``settings``: name → a ``settings.setting`` field, a key of the stage that
    uses it, ``stages.<s>.<name>``, in that stage's id only where its reward is this one)."""
    name: str
    fn: Callable[..., np.ndarray]
    needs: tuple[str, ...]
    params: tuple[str, ...]
    settings: Mapping[str, dataclasses.Field[Json]] = field(default_factory=dict)

    @property
    def episodic(self) -> bool:
        """Reads an episode's trajectory: only an instructor stage can score it."""
        return any(k in EPISODE_INPUTS for k in self.needs)

    def bind(self, stage_cfg: object) -> Callable[..., np.ndarray]:
        """The reward as a function of a batch (``score(prior=…, posterior=…, stated=…, y=…)``),
        its parameters taken from the stage config (typed, or its keys); NaN wherever a needed
        input is NaN."""
        values = fields_of(stage_cfg)
        missing = [p for p in self.params if p not in values]
        if missing:
            raise ValueError(f"reward {self.name}: stage config has no {', '.join(missing)}")
        kwargs = {p: values[p] for p in self.params}

        def score(**batch: ArrayLike) -> np.ndarray:
            absent = [k for k in self.needs if k not in batch]
            if absent:
                raise TypeError(f"reward {self.name}: batch has no {', '.join(absent)}")
            args = {k: np.asarray(batch[k], dtype=float) for k in self.needs}
            with np.errstate(invalid="ignore"):
                r = self.fn(**args, **kwargs)
            bad = np.logical_or.reduce([np.isnan(a).reshape(len(a), -1).any(axis=1) for a in args.values()])
            return np.where(bad, np.nan, r)
        return score


REWARDS: Registry[Reward] = Registry("reward")
# the modules of this package that declare no reward (tests/test_imports.py checks)
HELPERS = ("fit",)


def rewards() -> dict[str, Reward]:
    """Every reward: each module of this package registers its family on import (once)."""
    return REWARDS.discover(__name__, __path__, HELPERS)


def reward(name: str, needs: tuple[str, ...], params: tuple[str, ...] | Mapping[str, object] = ()):
    """Register the decorated batch function as reward ``name`` (see the module docstring).
    ``params``: the config keys bound as its keyword arguments, each a key the stage config has
    already (a name), or a new key of the stage config declared here with its default and domain
    (name → ``settings.setting(default, domain, help)``)."""
    unknown = [k for k in needs if k not in INPUTS]
    if not needs or unknown:
        raise ValueError(f"reward {name}: needs must be some of {', '.join(INPUTS)}, got {needs}")
    settings = {k: cast("dataclasses.Field[Json]", f) for k, f in params.items()} if isinstance(params, Mapping) else {}

    def register(fn: Callable[..., np.ndarray]) -> Callable[..., np.ndarray]:
        REWARDS.add(name, Reward(name, fn, tuple(needs), tuple(params), settings))
        return fn
    return register


def reward_settings() -> dict[str, tuple[str, dataclasses.Field[Json]]]:
    """Every key a reward brings to the stage config: key → (the reward, its ``setting`` field).
    Two rewards declaring one key is an error naming both."""
    rewards()
    return _reward_settings(epoch())


@functools.lru_cache(maxsize=4)
def _reward_settings(registries: int) -> dict[str, tuple[str, dataclasses.Field[Json]]]:
    out: dict[str, tuple[str, dataclasses.Field[Json]]] = {}
    for r in rewards().values():
        for key, f in r.settings.items():
            if key in out:
                raise ValueError(f"reward {r.name}: stage key {key!r} is already reward {out[key][0]}'s")
            out[key] = (r.name, f)
    return out


def bind(name: str, stage_cfg: object) -> Callable[..., np.ndarray]:
    """Reward ``name`` bound to a stage config: a function of the batch (see ``Reward.bind``)."""
    if name not in rewards():
        raise ValueError(f"stages.*.reward: unknown reward {name!r} (known: {', '.join(REWARDS)})")
    return REWARDS[name].bind(stage_cfg)

