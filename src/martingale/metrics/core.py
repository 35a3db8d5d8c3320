"""The metrics' frame: input checks (a metric raises MetricError, never returns a silent number), a
stage's columns (``StageColumns``: unparsed values NaN), what a metric declares it reads
(``Metric``, ``Reads``), the one registry every metric is registered in (``@stage_metric``) and how
an undefined one is written (NaN with its reason, ``put``)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, TypeVar

import numpy as np
from numpy.typing import ArrayLike

from ..core.registry import Registry
from ..stats import Block, MetricError, Record, nan_array, nan_matrix, too_few_for_ci


def check_probs(name: str, p: ArrayLike, min_n: int = 1) -> np.ndarray:
    """p as a 1-D float array of at least ``min_n`` finite probabilities in [0, 1], or MetricError."""
    p = np.asarray(p, dtype=float)
    if p.ndim != 1:
        raise MetricError(f"{name}: expected a 1-D array of probabilities, got shape {p.shape}")
    if len(p) and np.isnan(p).all():
        raise MetricError(f"{name}: every value is NaN (nothing parsed)")
    if np.isnan(p).any():
        raise MetricError(f"{name}: {int(np.isnan(p).sum())} NaN values: drop unparsed values first")
    if len(p) < min_n:
        raise MetricError(f"{name}: needs at least {min_n} values, got {len(p)}")
    if not np.isfinite(p).all() or (p < 0).any() or (p > 1).any():
        raise MetricError(f"{name}: probabilities must lie in [0, 1]")
    return p


def check_labels(name: str, y: ArrayLike, n: int) -> np.ndarray:
    """y as a float array of n labels, each 0 or 1, or MetricError."""
    y = np.asarray(y, dtype=float)
    if y.shape != (n,):
        raise MetricError(f"{name}: {y.shape[0] if y.ndim == 1 else y.shape} labels for {n} probabilities")
    if not np.isin(y, (0.0, 1.0)).all():
        raise MetricError(f"{name}: labels must be 0 or 1")
    return y


def _py(name: str, p: ArrayLike, y: ArrayLike, min_n: int = 1) -> tuple[np.ndarray, np.ndarray]:
    p = check_probs(name, p, min_n)
    return p, check_labels(name, y, len(p))


def _pair(name: str, prior: ArrayLike, posterior: ArrayLike, min_n: int = 3) -> tuple[np.ndarray, np.ndarray]:
    prior = check_probs(f"{name} (prior)", prior, min_n)
    posterior = check_probs(f"{name} (posterior)", posterior, min_n)
    if prior.shape != posterior.shape:
        raise MetricError(f"{name}: {len(prior)} priors but {len(posterior)} posteriors")
    if np.ptp(prior) == 0:
        raise MetricError(f"{name}: constant prior (σ_prior = 0): the slope on the prior is undefined")
    return prior, posterior


REQUIRED_COLUMNS = ("y", "stated", "prior", "posterior", "bayes_end")   # the trace columns are optional (simulate has none)

@dataclass(frozen=True)
class StageColumns:
    """One stage's per-question columns (NaN = unparsed) and bootstrap settings: what each metric
    of ``STAGE_METRICS`` reads."""
    y: np.ndarray
    stated: np.ndarray
    prior: np.ndarray
    post: np.ndarray
    trace_cut: np.ndarray
    trace_last: np.ndarray
    bayes: np.ndarray
    neg: np.ndarray | None      # stated P(not A), when the eval asked negations (eval.negations)
    draws: np.ndarray | None    # questions × K re-draws of the prior, in snap mode (eval.prior_draws > 0)
    crowd: np.ndarray | None    # a forecast from elsewhere per question (crowd_p), where the questions carry one
    n_bootstrap: int
    level: float
    seed: int

    @classmethod
    def from_records(cls, records: list[Record], n_bootstrap: int, level: float,
                     seed: int) -> StageColumns:
        """The columns of a stage's eval records (unparsed None → NaN, ragged snap draws padded)."""
        y, stated, prior, post, cut, last, bayes = [
            nan_array([r[k] if k in REQUIRED_COLUMNS else r.get(k) for r in records])
            for k in ("y", "stated", "prior", "posterior", "trace_cut", "trace_last", "bayes_end")]
        neg = nan_array([r.get("stated_neg") for r in records]) if any("stated_neg" in r for r in records) else None
        draws = (nan_matrix([r.get("snap_draws") for r in records])
                 if any(r.get("snap_draws") for r in records) else None)
        crowd = nan_array([r.get("crowd_p") for r in records]) if any("crowd_p" in r for r in records) else None
        return cls(y, stated, prior, post, cut, last, bayes, neg, draws, crowd, n_bootstrap, level, seed)

    @property
    def ok(self) -> np.ndarray:
        """Questions with a parsed stated P."""
        return ~np.isnan(self.stated)

    @property
    def pair(self) -> np.ndarray:
        """Questions with a parsed prior and posterior."""
        return ~np.isnan(self.prior) & ~np.isnan(self.post)

    @property
    def trace_pair(self) -> np.ndarray:
        """Questions whose trace gives a belief at the cut and a last belief."""
        return ~np.isnan(self.trace_cut) & ~np.isnan(self.trace_last)


def column(values: np.ndarray | None, name: str) -> np.ndarray:
    """An optional column a metric reads, there by Metric.applies (MetricError if it is not)."""
    if values is None:
        raise MetricError(f"the stage has no {name} column")
    return values


COLUMNS = ("y", "stated", "prior", "post", "trace_cut", "trace_last", "bayes", "neg", "draws", "crowd")
MASKS = {"ok": ("stated",), "pair": ("prior", "post"), "trace_pair": ("trace_cut", "trace_last")}
SETTINGS = ("n_bootstrap", "level", "seed")


@dataclass(frozen=True)
class Metric:
    """One entry of the stage table: the keys it writes, the function computing them (a value, or
    a dict of the keys; MetricError when undefined) and the columns it reads (``reads``, of
    COLUMNS), as a reward declares its inputs. It applies where the stage has every one of them (a
    negation column only where the eval asked negations); its function sees only those (Reads)."""
    keys: tuple[str, ...]
    fn: Callable[[StageColumns], object]
    reads: tuple[str, ...]

    def __post_init__(self) -> None:
        unknown = [c for c in self.reads if c not in COLUMNS]
        if not self.reads or unknown:
            raise ValueError(f"metric {self.keys[0]}: reads must be some of {', '.join(COLUMNS)}, got {self.reads}")

    def applies(self, s: StageColumns) -> bool:
        return all(getattr(s, c) is not None for c in self.reads)

    def compute(self, s: StageColumns) -> object:
        return self.fn(Reads(s, self.reads))   # type: ignore[arg-type]


class Reads:
    """A stage's columns as one metric sees them: those it declares, the masks made of them
    (``ok``: stated; ``pair``: prior, post; ``trace_pair``) and the bootstrap settings. Every other
    column is an error naming it: a declaration the function does not keep fails its first test."""

    def __init__(self, s: StageColumns, reads: tuple[str, ...]):
        self._s, self._reads = s, reads

    def __getattr__(self, name: str) -> object:
        need = () if name in SETTINGS else MASKS.get(name, (name,))
        missing = [c for c in need if c not in self._reads]
        if missing:
            raise AttributeError(f"a metric reading {', '.join(self._reads)} used {name} "
                                 f"({', '.join(missing)} undeclared)")
        return getattr(self._s, name)


@dataclass(frozen=True)
class Column:
    """How a metric shows in the runs table (runs.json's ``metrics``, RUNS.md, runs.html): its
    label and digits; its CI ``<key>_ci`` beside it where the stage has one."""
    label: str
    digits: int = 4
    signed: bool = False


@dataclass(frozen=True)
class Declared:
    """A metric declared in a file of this package: the stage-table entry and its table column."""
    metric: Metric
    column: Column | None = None


DECLARED: Registry = Registry("metric")


MetricFn = TypeVar("MetricFn", bound=Callable[[StageColumns], object])


def stage_metric(*keys: str, reads: tuple[str, ...], column: Column | None = None) -> Callable[[MetricFn], MetricFn]:
    """Register the decorated function of the stage's columns (``Reads``) as the metric writing
    ``keys`` (a value, or a dict of them), computed for every stage that has the columns it
    ``reads``; with a ``column`` the runs table shows its first key."""
    def register(fn: MetricFn) -> MetricFn:
        DECLARED.add(keys[0], Declared(Metric(tuple(keys), fn, tuple(reads)), column))
        return fn
    return register


def share(mask: np.ndarray) -> float:
    """The share of questions where ``mask`` holds (NaN for none)."""
    return float(mask.mean()) if len(mask) else float("nan")


def ci_note(ci: tuple[float, float], n: int) -> str | None:
    """Why an interval on n questions is NaN (too few, or degenerate resamples), else None."""
    if (why := too_few_for_ci(n)):
        return why
    if any(np.isnan(ci)):
        return "bootstrap interval undefined (degenerate resamples)"
    return None


def put(metric: Metric, s: StageColumns, out: Block, undefined: dict[str, str]) -> None:
    """Store the metric's value (a dict is merged, its ``undefined`` too) or, where it is undefined,
    NaN under each of its keys ([NaN, NaN] for an interval) with the reason."""
    try:
        value = metric.compute(s)
    except MetricError as e:
        for k in metric.keys:
            out[k] = [float("nan")] * 2 if k.endswith("_ci") else float("nan")
            undefined[k] = str(e)
        return
    if isinstance(value, dict):
        undefined.update(value.pop("undefined", {}))
        out.update(value)
    else:
        out[metric.keys[0]] = value
