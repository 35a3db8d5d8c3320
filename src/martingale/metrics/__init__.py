"""Per-stage metrics over (y, prior, posterior, stated P). Unparsed values are NaN and excluded.

Every metric is a small pure function; its docstring gives the formula. Brier is always from the
model's own stated P, never from a judge read (a judge moderates beliefs and launders calibration).

Bad input is never turned into a silent number. The pure functions take clean arrays (unparsed
values already dropped) and raise :class:`MetricError` — naming the metric and the reason — when a
metric is undefined on them: too few values, NaN, probabilities outside [0, 1], labels other than
0/1, one class only where the metric needs both, a constant prior under a slope. ``stage_metrics``
runs every registered metric over a stage's columns (unparsed values dropped) and where a metric
is undefined writes NaN (null in JSON) under its keys and the reason under ``undefined[key]``.
The families are a module each: calibration.py, martingale.py, coherence.py, crowd.py; their
frame is core.py; reads.py (verbal and forced side by side) and episodes.py (two-agent) are
blocks of their own.

A new metric is one file in this package: ``@stage_metric(key, reads=..., column=Column(...))`` on its
function registers it; it is then in every stage's eval.json and, with a ``column``, in runs.json,
RUNS.md and runs.html (docs/extending.md).
"""
from __future__ import annotations

from ..stats import Block, MetricError, Record
from .core import (
    COLUMNS,
    DECLARED,
    REQUIRED_COLUMNS,
    Column,
    Declared,
    Metric,
    Reads,
    StageColumns,
    check_labels,
    check_probs,
    put,
    stage_metric,
)

# the modules that declare no metric (tests/test_imports.py checks)
HELPERS = ("core", "reads", "episodes", "resampled")


def declared_metrics() -> dict[str, Declared]:
    """Every registered metric (each module of this package imported once), in the order registered."""
    return DECLARED.discover(__name__, __path__, HELPERS)


def table_columns() -> dict[str, Column]:
    """Key → column of every declared metric the runs table shows."""
    return {key: d.column for key, d in declared_metrics().items() if d.column is not None}


def stage_metrics(records: list[Record], n_bootstrap: int = 1000, level: float = 0.95,
                  seed: int = 0) -> Block:
    """The eval.json block for one stage and seed, from its per-question records.

    Every registered metric that applies is present; one that is undefined on this
    stage's data is NaN (null in JSON) with its reason under ``undefined``. Records with
    ``snap_draws`` (eval.prior_draws > 0, snap mode) add the de-attenuated MS; records with
    ``stated_neg`` (eval.negations) add the negation coherence.
    """
    s = StageColumns.from_records(records, n_bootstrap, level, seed)
    out: Block = {}
    undefined: dict[str, str] = {}
    for metric in (d.metric for d in declared_metrics().values()):
        if metric.applies(s):
            put(metric, s, out, undefined)
    if records and "stated_forced" in records[0]:
        out.update(read_metrics(records, n_bootstrap, level, seed, undefined))
    out["undefined"] = undefined
    return out


# the families' functions, by their names of old (imported after the frame: they register on import)
from .calibration import (  # noqa: E402
    N_BINS,
    bin_index,
    brier,
    brier_ci,
    brier_skill,
    calibration_bins,
    constant_brier,
    ece,
    extremes,
    mean_p,
    murphy_decomposition,
    overconfidence,
    overconfidence_ci,
    squared_errors,
)
from .coherence import negation_coherence, trace_coherence  # noqa: E402
from .episodes import entrenched, episode_metrics  # noqa: E402
from .martingale import INERTIA_EPS, delta_brier_ci, inertia, martingale_fit, ms_ci  # noqa: E402
from .reads import READ_KEYS, read_metrics  # noqa: E402

__all__ = ["COLUMNS", "INERTIA_EPS", "N_BINS", "READ_KEYS", "REQUIRED_COLUMNS", "Column", "Declared", "Metric",
           "MetricError", "Reads", "StageColumns", "bin_index", "brier", "brier_ci", "brier_skill", "calibration_bins",
           "check_labels", "check_probs", "constant_brier", "declared_metrics", "delta_brier_ci", "ece", "entrenched",
           "episode_metrics", "extremes", "inertia", "martingale_fit", "mean_p", "ms_ci", "murphy_decomposition",
           "negation_coherence", "overconfidence", "overconfidence_ci", "put", "read_metrics", "squared_errors",
           "stage_metric", "stage_metrics", "table_columns", "trace_coherence"]
