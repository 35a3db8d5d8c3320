"""Rewards as plain functions over a batch (TRL's shape): arrays in, one float per sample out.

A reward registers itself with ``@reward(name, needs=..., params=...)``: ``needs`` are the batch
inputs it reads (of ``INPUTS``: the elicited prior and posterior, the stated P, the label y; in a
two-agent episode the human's first and last P, its last P, y, and its P at every turn as
``trajectory``, episodes × (turns + 1)), and
its reward is NaN wherever one of them is NaN (a number that did not parse; the trainer gives that
sample the worst advantage); ``params`` are the stage config keys bound as its keyword arguments:
keys the stage has, or new ones the reward declares with their domains (``{"power": setting(2.0,
Real(1, 4), "…")}``: ``stages.<s>.power``, checked by ``martingale check``, in the stage's id only
where its reward is this one).
The schema allows exactly the registered names (``config.schema.choices``), so the plan imports this
module at parse time: numpy is imported inside the functions that use it, on first call.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Mapping

from .registry import Registry, epoch

if TYPE_CHECKING:
    import numpy as np

INPUTS = ("prior", "posterior", "stated", "y", "trajectory")
EPISODE_INPUTS = ("trajectory",)   # only an episode has one (stages/instructor.py): the human's P at every turn


@dataclass(frozen=True)
class Reward:
    """A registered reward: its batch function, the inputs it reads, the config keys it takes, and
    the keys it brings (``settings``: name → a ``domains.setting`` field, a key of the stage that
    uses it, ``stages.<s>.<name>``, in that stage's id only where its reward is this one)."""
    name: str
    fn: Callable[..., np.ndarray]
    needs: tuple[str, ...]
    params: tuple[str, ...]
    settings: Mapping[str, Any] = field(default_factory=dict)

    @property
    def episodic(self) -> bool:
        """Reads an episode's trajectory: only an instructor stage can score it."""
        return any(k in EPISODE_INPUTS for k in self.needs)

    def bind(self, stage_cfg: Mapping[str, Any]) -> Callable[..., np.ndarray]:
        """The reward as a function of a batch (``score(prior=…, posterior=…, stated=…, y=…)``),
        its parameters taken from the stage config; NaN wherever a needed input is NaN."""
        missing = [p for p in self.params if p not in stage_cfg]
        if missing:
            raise ValueError(f"reward {self.name}: stage config has no {', '.join(missing)}")
        kwargs = {p: stage_cfg[p] for p in self.params}

        def score(**batch: Any) -> np.ndarray:
            import numpy as np
            absent = [k for k in self.needs if k not in batch]
            if absent:
                raise TypeError(f"reward {self.name}: batch has no {', '.join(absent)}")
            args = {k: np.asarray(batch[k], dtype=float) for k in self.needs}
            with np.errstate(invalid="ignore"):
                r = self.fn(**args, **kwargs)
            bad = np.logical_or.reduce([np.isnan(a).reshape(len(a), -1).any(axis=1) for a in args.values()])
            return np.where(bad, np.nan, r)
        return score


REWARDS: Registry = Registry("reward")


def reward(name: str, needs: tuple[str, ...], params: tuple[str, ...] | Mapping[str, Any] = ()):
    """Register the decorated batch function as reward ``name`` (see the module docstring).
    ``params``: the config keys bound as its keyword arguments, each a key the stage config has
    already (a name), or a new key of the stage config declared here with its default and domain
    (name → ``domains.setting(default, domain, help)``)."""
    unknown = [k for k in needs if k not in INPUTS]
    if not needs or unknown:
        raise ValueError(f"reward {name}: needs must be some of {', '.join(INPUTS)}, got {needs}")
    settings = dict(params) if isinstance(params, Mapping) else {}

    def register(fn: Callable[..., np.ndarray]) -> Callable[..., np.ndarray]:
        REWARDS.add(name, Reward(name, fn, tuple(needs), tuple(params), settings))
        return fn
    return register


def reward_settings() -> dict[str, tuple[str, Any]]:
    """Every key a reward brings to the stage config: key → (the reward, its ``setting`` field).
    Two rewards declaring one key is an error naming both."""
    return _reward_settings(epoch())


@functools.lru_cache(maxsize=4)
def _reward_settings(registries: int) -> dict[str, tuple[str, Any]]:
    out: dict[str, tuple[str, Any]] = {}
    for r in REWARDS.values():
        for key, f in r.settings.items():
            if key in out:
                raise ValueError(f"reward {r.name}: stage key {key!r} is already reward {out[key][0]}'s")
            out[key] = (r.name, f)
    return out


def bind(name: str, stage_cfg: Mapping[str, Any]) -> Callable[..., np.ndarray]:
    """Reward ``name`` bound to a stage config: a function of the batch (see ``Reward.bind``)."""
    if name not in REWARDS:
        raise ValueError(f"stages.*.reward: unknown reward {name!r} (known: {', '.join(REWARDS)})")
    return REWARDS[name].bind(stage_cfg)


def _z(r: np.ndarray) -> np.ndarray:
    """r standardised within the batch (NaN ignored); zeros when r has no spread."""
    import numpy as np
    sd = np.nanstd(r)
    return (r - np.nanmean(r)) / sd if sd > 0 else np.zeros_like(r)


# A reads stated P only to be masked with it: an answer that states no P scores nothing.
@reward("A", needs=("prior", "posterior", "stated"), params=("info_coef", "info_eps"))
def martingale_A(prior, posterior, *, info_coef: float, info_eps: float, **_) -> np.ndarray:
    """A (label-free): −Δ·Δ̂(prior) − info_coef·relu(info_eps − |Δ|), Δ = posterior − prior.

    Δ̂ is the in-batch OLS regressor of the update on the prior: the reward penalises the part of
    the update the prior predicts (driving MS → 0); the info term penalises not updating at all.
    """
    import numpy as np

    from .stats import batch_line
    delta = posterior - prior
    a, b = batch_line(prior, delta)
    predicted = a + b * prior
    info = info_coef * np.maximum(0.0, info_eps - np.abs(delta))
    return -delta * predicted - info


@reward("A_slope", needs=("prior", "posterior", "stated"), params=("info_coef", "info_eps"))
def martingale_A_slope(prior, posterior, *, info_coef: float, info_eps: float, **_) -> np.ndarray:
    """A_slope: −Δ·b·(prior − p̄) − info_coef·relu(info_eps − |Δ|), b the in-batch OLS slope of Δ
    on the prior, p̄ the batch's mean prior: A without its mean-update term. A's Δ̂ = a + b·prior is
    mean(Δ) + b·(prior − p̄); this keeps only the part the prior predicts beyond the batch's mean
    update, the control that says how much of A's effect is its mean term (scripts/reward_trace.py).
    """
    import numpy as np

    from .stats import batch_line
    delta = posterior - prior
    _, b = batch_line(prior, delta)
    ok = np.isfinite(prior)
    centred = prior - (prior[ok].mean() if ok.any() else 0.0)
    info = info_coef * np.maximum(0.0, info_eps - np.abs(delta))
    return -delta * b * centred - info


@reward("B", needs=("stated", "y"))
def brier_B(stated, y, **_) -> np.ndarray:
    """B (supervised): −(y − stated P)²."""
    return -((y - stated) ** 2)


@reward("C", needs=("prior", "posterior", "stated", "y"), params=("lam", "info_coef", "info_eps"))
def combined_C(prior, posterior, stated, y, *, lam: float, info_coef: float, info_eps: float) -> np.ndarray:
    """C: λ·z(A) + (1 − λ)·z(B), λ = lam, z = standardised within the batch."""
    a = martingale_A(prior, posterior, info_coef=info_coef, info_eps=info_eps)
    return lam * _z(a) + (1 - lam) * _z(brier_B(stated, y))


# BP reads the posterior only to be masked with it, as A reads stated P.
@reward("BP", needs=("prior", "posterior", "stated", "y"))
def brier_prior_posterior_BP(prior, stated, y, **_) -> np.ndarray:
    """BP: −(y − prior)² − (y − stated P)² — calibrates both the early and the final belief."""
    return -((y - prior) ** 2) - (y - stated) ** 2


# -- episode rewards (stages/instructor.py): the human's beliefs across an episode's turns.
# x_t = P_{t−1} − ½ (where the human stood), δ_t = P_t − P_{t−1} (how it moved at turn t).

def _x_delta(trajectory: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return trajectory[:, :-1] - 0.5, trajectory[:, 1:] - trajectory[:, :-1]


@reward("episode_ms", needs=("prior", "posterior"), params=("lam_ms", "meta_size"))
def episode_ms(prior, posterior, *, lam_ms: float, meta_size: int, **_) -> np.ndarray:
    """episode_ms: −λ·|MS_ep| for every episode of a meta-episode (consecutive ``meta_size``
    episodes), MS_ep = the OLS slope of (last − first) on (first − ½) over the meta-episode's
    episodes (an undefined slope, fewer than 2 distinct first beliefs, scores 0)."""
    import numpy as np

    from .stats import batch_line
    out = np.zeros_like(prior, dtype=float)
    for start in range(0, len(prior), int(meta_size)):
        chunk = slice(start, start + int(meta_size))
        _, slope = batch_line(prior[chunk] - 0.5, posterior[chunk] - prior[chunk])
        out[chunk] = -lam_ms * abs(slope)
    return out


@reward("product", needs=("prior", "posterior"), params=("lam_ms",))
def product(prior, posterior, *, lam_ms: float, **_) -> np.ndarray:
    """product: −λ·Δ·predicted_bias(prior), Δ = last − first P, predicted_bias = the in-batch OLS
    fit of Δ on the first P (A's martingale term over an episode)."""
    from .stats import batch_line
    delta = posterior - prior
    a, b = batch_line(prior, delta)
    return -lam_ms * delta * (a + b * prior)


@reward("symabs", needs=("trajectory",), params=("lam_ms",))
def symabs(trajectory, *, lam_ms: float, **_) -> np.ndarray:
    """symabs: −λ·Σ_t |x_t·δ_t| — any move the human's position predicts, either way, costs."""
    import numpy as np
    x, d = _x_delta(trajectory)
    return -lam_ms * np.abs(x * d).sum(axis=1)


@reward("hinge", needs=("trajectory", "y"), params=("lam_ms", "lam_brier"))
def hinge(trajectory, y, *, lam_ms: float, lam_brier: float, **_) -> np.ndarray:
    """hinge: −λ·Σ_t max(0, x_t·δ_t) − λ_B·(y − P_T)² — only moves further the way the human
    leans cost (entrenchment), plus the Brier of its last P (the log's loss, as a reward)."""
    import numpy as np
    x, d = _x_delta(trajectory)
    return -lam_ms * np.maximum(0.0, x * d).sum(axis=1) - lam_brier * (y - trajectory[:, -1]) ** 2
