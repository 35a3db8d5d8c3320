"""A run's figures, PNG under results/<run-id>/plots/ (matplotlib's Agg canvas, no display).

- ``prior_posterior.png``   prior vs posterior per stage, with y = x (a martingale scatters
  around it; a flatter cloud is regression to ½, a steeper one entrenchment);
- ``delta_vs_prior.png``    Δ = posterior − prior vs prior − ½ per stage, the OLS line (its slope
  is MS) with its 95% confidence band;
- ``reliability.png``       reliability diagram of the stated P per stage (observed frequency vs
  mean stated P in equal-width bins, marker area ∝ questions), with y = x;
- ``brier_ms_by_stage.png`` Brier and MS by stage with their bootstrap CIs (several seeds: mean
  ± sd and each seed), the base-rate constant and MS = 0 as references;
- ``effect_forest.png``     the knob's paired effect against the parent (ΔBrier, ΔMS with CIs,
  per stage and seed); a root run's figure says it has no parent;
- ``belief_by_turn.png``    a two-agent run (eval.kind=simulate): the human's mean stated P across
  turns by its initial lean, beside the Bayes belief of the evidence it held, per stage; and MS
  (first → last) per stage with its CI, the Bayes human's and the instructor's own. A single-agent
  run's figure says it plays no episode.

``episodes_by_mode`` (``martingale figure modes``) draws the campaign's two-agent runs side by side:
MS with CIs and the human's P across turns, per instructor mode.

Several seeds are pooled in the scatter panels (the fitted line is then the pooled fit). Figures
are built on ``matplotlib.figure.Figure`` (no pyplot state), so the same inputs give the same bytes.
"""
from __future__ import annotations

import io
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Mapping

import numpy as np

from ..core.jsonvalue import Json, JsonObject
from ..core.lazy import module
from ..metrics import N_BINS, calibration_bins
from ..stats import Record, nan_matrix
from ..stats import nan_array as _arr
from ..stats.seeds import is_spread, only_seed, seed_blocks, seed_values
from ..store.files import write_bytes

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

stats = module("scipy.stats")                     # imported on first use (martingale.core.lazy): the CLI
_figure = module("matplotlib.figure")             # and the table import this module
_agg = module("matplotlib.backends.backend_agg")
_ticker = module("matplotlib.ticker")

PLOTS = ("prior_posterior", "delta_vs_prior", "reliability", "brier_ms_by_stage", "effect_forest", "belief_by_turn")
DPI = 100
_META = {"Software": None}


def _save(fig: Figure, path: Path) -> Path:
    """Write the figure as PNG atomically (temp file in the same folder + rename)."""
    _agg.FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, metadata=_META)
    write_bytes(path, buf.getvalue())
    return Path(path)


def _num(m: Mapping[str, Json], key: str) -> float:
    """A metric's value: the number, or the mean over seeds; NaN when absent or null."""
    v = m.get(key)
    if isinstance(v, dict):
        v = v.get("mean")
    return float("nan") if v is None or isinstance(v, (list, str, bool)) else float(v)


def _ci(m: Mapping[str, Json], key: str) -> tuple[float, float]:
    """A metric's CI: its own (one seed); NaNs over several seeds (they show mean ± sd)."""
    v = only_seed(m.get(key))
    if isinstance(v, list) and len(v) == 2 and None not in v:
        return float(v[0]), float(v[1])
    return float("nan"), float("nan")


def _per_seed(m: Mapping[str, Json], key: str) -> list[float]:
    v = m.get(key)
    if is_spread(v):
        return [float("nan") if x is None else float(x) for x in seed_values(v) if not isinstance(x, list)]
    return []


def _panels(n: int, w: float = 3.3, h: float = 3.3, left: float = 0.75) -> tuple[Figure, list[Axes]]:
    """1 × n panels with fixed margins in inches (a layout engine costs seconds per figure)."""
    n = max(n, 1)
    fig = _figure.Figure(figsize=(w * n, h))
    fig.subplots_adjust(left=left / (w * n), right=1 - 0.15 / (w * n), bottom=0.55 / h, top=1 - 0.6 / h,
                        wspace=left / (w - left) * 1.05)
    axes = fig.subplots(1, n, squeeze=False)[0]
    return fig, list(axes)


def _pairs(records: list[Record], a: str, b: str) -> tuple[np.ndarray, np.ndarray]:
    x, y = _arr([r.get(a) for r in records]), _arr([r.get(b) for r in records])
    ok = ~np.isnan(x) & ~np.isnan(y)
    return x[ok], y[ok]


def _fmt(v: float, spec: str = "+.3f") -> str:
    return "n/a" if v is None or np.isnan(v) else format(v, spec)


def _suffix(records: list[Record]) -> str:
    seeds = sorted({int(r["seed"]) for r in records if r.get("seed") is not None})
    return f" (seeds {', '.join(map(str, seeds))} pooled)" if len(seeds) > 1 else ""


def prior_posterior(run_id: str, stage_order: list[str], records: dict[str, list[Record]], path: Path) -> Path:
    """prior_posterior.png: prior vs posterior per stage, with y = x."""
    fig, axes = _panels(len(stage_order))
    for ax, stage in zip(axes, stage_order):
        x, y = _pairs(records.get(stage, []), "prior", "posterior")
        ax.plot([0, 1], [0, 1], ls="--", color="grey", lw=1, label="y = x (martingale)")
        ax.scatter(x, y, s=10, alpha=0.5, color="tab:blue", edgecolors="none")
        rho = stats.pearsonr(x, y).statistic if len(x) > 2 and np.ptp(x) > 0 and np.ptp(y) > 0 else np.nan
        ax.set(xlim=(0, 1), ylim=(0, 1), aspect="equal", xlabel="prior", ylabel="posterior",
               title=f"{stage}: n={len(x)}, ρ={_fmt(rho, '.2f')}")
        ax.legend(loc="upper left", fontsize=7)
    fig.suptitle(f"{run_id}: prior vs posterior{_suffix(sum(records.values(), []))}", fontsize=10)
    return _save(fig, path)


def _ols_band(x: np.ndarray, y: np.ndarray, grid: np.ndarray, level: float = 0.95):
    """OLS line on grid with the (1 − α) confidence band of the mean response."""
    fit = stats.linregress(x, y)
    n = len(x)
    yhat = fit.intercept + fit.slope * grid
    resid = y - (fit.intercept + fit.slope * x)
    s = np.sqrt(np.sum(resid ** 2) / (n - 2))
    sxx = np.sum((x - x.mean()) ** 2)
    half = stats.t.ppf(0.5 + level / 2, n - 2) * s * np.sqrt(1 / n + (grid - x.mean()) ** 2 / sxx)
    return fit, yhat, half


def delta_vs_prior(run_id: str, stage_order: list[str], records: dict[str, list[Record]],
                   metrics: Mapping[str, Mapping[str, Json]], path: Path) -> Path:
    """delta_vs_prior.png: Δ against prior − ½ per stage, the OLS line (its slope is MS) and its band."""
    fig, axes = _panels(len(stage_order))
    for ax, stage in zip(axes, stage_order):
        prior, post = _pairs(records.get(stage, []), "prior", "posterior")
        x, d = prior - 0.5, post - prior
        ax.axhline(0, color="grey", ls="--", lw=1, label="MS = 0 (martingale)")
        ax.scatter(x, d, s=10, alpha=0.5, color="tab:blue", edgecolors="none")
        m = metrics.get(stage, {})
        title = f"{stage}: MS {_fmt(_num(m, 'ms'))}"
        lo, hi = _ci(m, "ms_ci")
        if not np.isnan(lo):
            title += f" [{lo:+.3f}, {hi:+.3f}]"
        if len(x) > 3 and np.ptp(x) > 0:
            grid = np.linspace(-0.5, 0.5, 101)
            fit, yhat, half = _ols_band(x, d, grid)
            ax.plot(grid, yhat, color="tab:red", lw=1.5, label=f"OLS slope {fit.slope:+.3f}")
            ax.fill_between(grid, yhat - half, yhat + half, color="tab:red", alpha=0.2, lw=0,
                            label="95% band")
        top = min(1.0, max(0.1, 1.15 * float(np.max(np.abs(d))))) if len(d) else 1.0
        ax.set(xlim=(-0.5, 0.5), ylim=(-top, top), xlabel="prior − ½", ylabel="Δ = posterior − prior", title=title)
        ax.legend(loc="upper right", fontsize=7)
    fig.suptitle(f"{run_id}: update vs prior{_suffix(sum(records.values(), []))}", fontsize=10)
    return _save(fig, path)


def reliability(run_id: str, stage_order: list[str], records: dict[str, list[Record]],
                metrics: Mapping[str, Mapping[str, Json]], path: Path) -> Path:
    """reliability.png: observed frequency against mean stated P in bins, per stage."""
    fig, axes = _panels(len(stage_order))
    for ax, stage in zip(axes, stage_order):
        p, y = _pairs(records.get(stage, []), "stated", "y")
        ax.plot([0, 1], [0, 1], ls="--", color="grey", lw=1, label="perfect calibration")
        m = metrics.get(stage, {})
        if len(p):
            t = calibration_bins(p, y, N_BINS)
            ok = t["count"] > 0
            ax.plot(t["mean_p"][ok], t["freq"][ok], color="tab:blue", lw=1)
            ax.scatter(t["mean_p"][ok], t["freq"][ok], s=20 + 400 * t["count"][ok] / t["count"].sum(),
                       color="tab:blue", alpha=0.7, label="bins (area ∝ n)")
            hist = ax.twinx()
            hist.hist(p, bins=np.linspace(0, 1, N_BINS + 1).tolist(), color="tab:grey", alpha=0.2)
            hist.set_yticks([])
            y_all = _arr([r.get("y") for r in records.get(stage, [])])
            rate = float(np.nanmean(y_all))          # over every question, parsed or not
            ax.axhline(rate, color="tab:green", lw=0.8, ls=":",
                       label=f"base rate {rate:.2f} (Brier {_fmt(_num(m, 'brier_constant'), '.3f')})")
        ax.set(xlim=(0, 1), ylim=(0, 1), xlabel="stated P (bin mean)", ylabel="observed frequency",
               title=f"{stage}: Brier {_fmt(_num(m, 'brier'), '.3f')}, ECE {_fmt(_num(m, 'ece'), '.3f')}")
        ax.legend(loc="upper left", fontsize=7)
    fig.suptitle(f"{run_id}: reliability of the stated P{_suffix(sum(records.values(), []))}", fontsize=10)
    return _save(fig, path)


def brier_ms_by_stage(run_id: str, stage_order: list[str], metrics: Mapping[str, Mapping[str, Json]], path: Path) -> Path:
    """brier_ms_by_stage.png: Brier and MS by stage with their CIs (each seed where several)."""
    fig, (ax_b, ax_m) = _panels(2, w=4.2)
    xs = np.arange(len(stage_order))
    for ax, key, ci_key, label in ((ax_b, "brier", "brier_ci", "Brier (stated P)"), (ax_m, "ms", "ms_ci", "MS")):
        for i, stage in enumerate(stage_order):
            m = metrics.get(stage, {})
            v = _num(m, key)
            seeds = _per_seed(m, key)
            if len(seeds) > 1:   # several seeds: mean ± sd, and each seed
                sd = _num({"x": m[key].get("sd")}, "x")
                ax.errorbar([i], [v], yerr=[[sd], [sd]], fmt="o", color="tab:blue", capsize=4)
                ax.scatter(np.full(len(seeds), i + 0.12), seeds, s=12, color="tab:orange", zorder=3)
            else:
                lo, hi = _ci(m, ci_key)
                err = [[v - lo], [hi - v]] if not np.isnan(lo) else None
                ax.errorbar([i], [v], yerr=err, fmt="o", color="tab:blue", capsize=4)
        ax.set_xticks(xs, stage_order)
        ax.set(xlim=(-0.5, len(stage_order) - 0.5), ylabel=label, title=label + " by stage")
    const = [_num(metrics.get(s, {}), "brier_constant") for s in stage_order]
    if const and not np.isnan(const[0]):
        ax_b.axhline(const[0], color="tab:green", ls=":", lw=1, label=f"base-rate constant {const[0]:.3f}")
    oracle = [_num(metrics.get(s, {}), "brier_oracle") for s in stage_order]
    if oracle and not np.isnan(oracle[0]):
        ax_b.axhline(oracle[0], color="tab:purple", ls=":", lw=1, label=f"Bayes oracle {oracle[0]:.3f}")
    if ax_b.get_legend_handles_labels()[0]:
        ax_b.legend(fontsize=7)
    ax_m.axhline(0, color="grey", ls="--", lw=1, label="martingale")
    ax_m.legend(fontsize=7)
    many = any(len(_per_seed(metrics.get(s, {}), "brier")) > 1 for s in stage_order)
    fig.suptitle(f"{run_id}: " + ("mean ± sd over seeds (dots: each seed)" if many else "95% bootstrap CIs"),
                 fontsize=10)
    return _save(fig, path)


def _effect_rows(effects: Mapping[str, Mapping[str, Json]], part: str) -> list[tuple[str, float, float, float, str]]:
    """(label, delta, lo, hi, annotation) per stage (and seed)."""
    rows = []
    for stage, eff in effects.items():
        each = seed_blocks(eff)
        blocks = [(stage if len(each) == 1 else f"{stage} seed {s}", b) for s, b in each]
        for label, b in blocks:
            e = (b or {}).get(part)
            if not e or e.get("delta") is None or np.isnan(e["delta"]):
                why = next(iter(((e or {}).get("undefined") or (b or {}).get("undefined") or {}).values()),
                           "undefined")
                rows.append((label, np.nan, np.nan, np.nan, "undefined: " + why[:90]))
                continue
            lo, hi = _ci(e, "ci")
            if part == "brier":
                note = (f"p_t {_fmt(e.get('p_t'), '.2g')}  p_W {_fmt(e.get('p_wilcoxon'), '.2g')}  "
                        f"wins {_fmt(e.get('share_child_wins'), '.0%')}  n={e.get('n')}")
            else:
                note = f"p_perm {_fmt(e.get('p_perm'), '.2g')}  n={e.get('n')}"
            if b.get("same_eval_stage"):
                note = f"same eval as the parent: Δ ≡ 0 by construction  n={e.get('n')}"
            rows.append((label, float(e["delta"]), lo, hi, note))
    return rows


def effect_forest(run_id: str, parent: str | None, knob: str | None, effects: Mapping[str, Mapping[str, Json]] | None,
                  path: Path) -> Path:
    """effect_forest.png: the knob's paired effect against the parent, per stage and seed."""
    if not effects:
        fig = _figure.Figure(figsize=(6, 1.6))
        ax = fig.subplots()
        ax.axis("off")
        why = "root run: no parent, so no paired effect" if parent is None else \
            f"no paired effect against {parent}"
        ax.text(0.5, 0.5, f"{run_id}: {why}", ha="center", va="center", fontsize=11)
        return _save(fig, path)
    rows_b, rows_m = _effect_rows(effects, "brier"), _effect_rows(effects, "ms")
    h = 1.2 + 0.45 * max(len(rows_b), 1)
    fig, axes = _panels(2, w=5.0, h=h, left=1.0)
    for ax, rows, title in ((axes[0], rows_b, "ΔBrier (child − parent)"), (axes[1], rows_m, "ΔMS (child − parent)")):
        ys = np.arange(len(rows))[::-1]
        for yv, (_label, d, lo, hi, note) in zip(ys, rows):
            if not np.isnan(lo):
                ax.plot([lo, hi], [yv, yv], color="tab:blue", lw=2)
            color = "tab:green" if (not np.isnan(hi) and hi < 0) else "tab:red" if (not np.isnan(lo) and lo > 0) else "tab:blue"
            ax.plot([d], [yv], "s", color=color, ms=6)
            ax.annotate(note, (0, yv), xycoords=("axes fraction", "data"), xytext=(2, 7),
                        textcoords="offset points", fontsize=6.5, color="dimgrey")
        ax.axvline(0, color="grey", ls="--", lw=1)
        ax.set_yticks(ys, [r[0] for r in rows])
        ax.set_ylim(-0.7, len(rows) - 0.3)
        ax.xaxis.set_major_locator(_ticker.MaxNLocator(5))
        ax.set(title=title, xlabel="effect with 95% paired-bootstrap CI")
    fig.suptitle(f"{run_id} vs parent {parent}: knob {knob}", fontsize=10)
    return _save(fig, path)


def write_plots(out_dir: Path | str, run_id: str, stage_order: list[str], records: dict[str, list[Record]],
                metrics: Mapping[str, Mapping[str, Json]], parent: str | None = None, knob: str | None = None,
                effects: Mapping[str, Mapping[str, Json]] | None = None) -> dict[str, Path]:
    """Every figure of a run under out_dir (results/<run-id>/plots): name → path."""
    out = Path(out_dir)
    return {
        "prior_posterior": prior_posterior(run_id, stage_order, records, out / "prior_posterior.png"),
        "delta_vs_prior": delta_vs_prior(run_id, stage_order, records, metrics, out / "delta_vs_prior.png"),
        "reliability": reliability(run_id, stage_order, records, metrics, out / "reliability.png"),
        "brier_ms_by_stage": brier_ms_by_stage(run_id, stage_order, metrics, out / "brier_ms_by_stage.png"),
        "effect_forest": effect_forest(run_id, parent, knob, effects, out / "effect_forest.png"),
        "belief_by_turn": belief_by_turn(run_id, stage_order, records, metrics, out / "belief_by_turn.png"),
    }


def _message(text: str, path: Path) -> Path:
    fig = _figure.Figure(figsize=(6, 1.6))
    ax = fig.subplots()
    ax.axis("off")
    ax.text(0.5, 0.5, text, ha="center", va="center", fontsize=11)
    return _save(fig, path)


def _turn_means(records: list[Record], key: str, lean: int) -> np.ndarray:
    rows = [r[key] for r in records if r.get("lean") == lean and r.get(key)]
    if not rows:
        return np.array([])
    m = nan_matrix(rows)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)   # a turn where no P parsed: NaN
        return np.nanmean(m, axis=0)


def belief_by_turn(run_id: str, stage_order: list[str], records: dict[str, list[Record]],
                   metrics: Mapping[str, Mapping[str, Json]], path: Path) -> Path:
    """belief_by_turn.png: the human's mean P across turns by its lean, and MS per stage."""
    if not any(r.get("trajectory") for stage in stage_order for r in records.get(stage, [])):
        return _message(f"{run_id}: a single-agent run, no two-agent episode (eval.kind=simulate plays them)", path)
    fig, (ax_p, ax_m) = _panels(2, w=4.4)
    colors = ["tab:blue", "tab:orange", "tab:green", "tab:red"]
    for k, stage in enumerate(stage_order):
        rows, color = records.get(stage, []), colors[k % len(colors)]
        for lean, marker in ((1, "o"), (-1, "v")):
            p, b = _turn_means(rows, "trajectory", lean), _turn_means(rows, "bayes_turns", lean)
            if p.size:
                ax_p.plot(np.arange(len(p)), p, marker=marker, color=color,
                          label=f"{stage} leaning {'yes' if lean > 0 else 'no'}")
                ax_p.plot(np.arange(len(b)), b, ls=":", color=color, lw=1)
    ax_p.axhline(0.5, color="grey", lw=0.8)
    ax_p.set(ylim=(0, 1), xlabel="turn (0: before the first utterance)", ylabel="mean stated P",
             title="the human's P (dotted: Bayes of its evidence)")
    ax_p.xaxis.set_major_locator(_ticker.MaxNLocator(integer=True))
    ax_p.legend(fontsize=6.5)
    xs = np.arange(len(stage_order))
    for i, stage in enumerate(stage_order):
        m = metrics.get(stage, {})
        for dx, key, ci_key, color, label in ((-0.15, "ms", "ms_ci", "tab:blue", "human"),
                                              (0.0, "ms_bayes", None, "tab:purple", "Bayes human"),
                                              (0.15, "instructor_ms", "instructor_ms_ci", "tab:grey", "instructor alone")):
            v = _num(m, key)
            if np.isnan(v):
                continue
            lo, hi = _ci(m, ci_key) if ci_key else (np.nan, np.nan)
            err = [[v - lo], [hi - v]] if not np.isnan(lo) else None
            ax_m.errorbar([i + dx], [v], yerr=err, fmt="o" if key != "ms_bayes" else "D", color=color,
                          capsize=3, label=label if i == 0 else None)
    ax_m.axhline(0, color="grey", ls="--", lw=1)
    ax_m.set_xticks(xs, stage_order)
    ax_m.set(xlim=(-0.5, len(stage_order) - 0.5), ylabel="MS (first → last P)", title="MS by stage, 95% CIs")
    ax_m.legend(fontsize=7)
    mode = next((metrics.get(s, {}).get("mode") for s in stage_order if metrics.get(s, {}).get("mode")), "?")
    fig.suptitle(f"{run_id}: two-agent episodes, instructor mode {mode}", fontsize=10)
    return _save(fig, path)


def _each_seed(value: object) -> list[Json]:
    """A metric's value per seed (stats.seeds.seed_values); none where the stage lacks it."""
    return seed_values(value) if is_spread(value) else []


def episodes_by_mode(runs: dict[str, JsonObject], path: Path) -> Path:
    """The two-agent runs side by side (``runs``: run id → its eval.json): the final stage's MS with
    its CI per run, labelled by mode (left), and the human's mean |P − ½| across turns (right)."""
    rows = []
    for run_id, ev in sorted(runs.items()):
        final = (ev.get("stage_order") or ["s0"])[-1]
        m = ev.get("stages", {}).get(final, {})
        if m.get("mode") is not None:
            rows.append((run_id, final, {**m, "mode": _each_seed(m["mode"])[0]}))
    if not rows:
        return _message("no two-agent run has results yet (eval.kind=simulate)", path)
    fig, (ax_m, ax_p) = _panels(2, w=5.6, h=max(3.3, 0.9 + 0.32 * len(rows)), left=2.4)
    ys = np.arange(len(rows))[::-1]
    for yv, (run_id, final, m) in zip(ys, rows):
        v = _num(m, "ms")
        lo, hi = _ci(m, "ms_ci")
        color = "tab:red" if not np.isnan(lo) and lo > 0 else "tab:green" if not np.isnan(hi) and hi < 0 else "tab:blue"
        if not np.isnan(lo):
            ax_m.plot([lo, hi], [yv, yv], color=color, lw=2)
        ax_m.plot([v], [yv], "s", color=color)
        turns = [side for by_lean in _each_seed(m.get("p_by_turn")) for side in (by_lean or {}).values() if side]
        if turns:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                lean = np.nanmean(np.abs(nan_matrix(turns) - 0.5), axis=0)   # mean over the two leans
            ax_p.plot(np.arange(len(lean)), lean, marker="o", label=f"{run_id} ({m['mode']}, {final})")
    ax_m.axvline(0, color="grey", ls="--", lw=1)
    ax_m.set_yticks(ys, [f"{r} ({m['mode']}, {s})" for r, s, m in rows])
    ax_m.set(xlabel="MS, first → last P (95% bootstrap CI)", title="MS by run and instructor mode")
    ax_p.set(xlabel="turn", ylabel="mean |P − ½|", title="how far the human leans, by turn")
    ax_p.xaxis.set_major_locator(_ticker.MaxNLocator(integer=True))
    ax_p.legend(fontsize=6)
    fig.suptitle("two-agent episodes (claims C2, C3)", fontsize=10)
    return _save(fig, path)
