"""A run's figures: every PNG written, valid, the same bytes for the same inputs, drawn without a
display, and robust to stages with nothing parsed."""
from __future__ import annotations

import sys

import numpy as np
import pytest

from martingale.metrics import stage_metrics
from martingale.records.plots import PLOTS, write_plots
from martingale.stats.effects import paired_effect
from martingale.stats.seeds import with_seed_blocks

PNG = b"\x89PNG\r\n\x1a\n"


def _records(seed, n=60, entrench=0.0):
    rng = np.random.default_rng(seed)
    prior = rng.uniform(0.05, 0.95, n)
    y = (rng.random(n) < prior).astype(int)
    post = np.clip(prior + entrench * (prior - 0.5) + 0.3 * (y - prior), 0, 1)
    return [{"qid": f"q{i}", "y": int(y[i]), "prior": float(prior[i]), "posterior": float(post[i]),
             "stated": float(post[i]), "trace_cut": float(prior[i]), "trace_last": float(post[i]),
             "bayes_end": float(prior[i]), "seed": 42} for i in range(n)]


@pytest.fixture(scope="module")
def run_inputs():
    order = ["s0", "s1"]
    child = {"s0": _records(0), "s1": _records(1, entrench=0.3)}
    parent = {"s0": _records(0), "s1": _records(2, entrench=0.6)}
    for s in order:   # same questions: the parent's y must match the child's
        for c, p in zip(child[s], parent[s]):
            p["y"], p["bayes_end"] = c["y"], c["bayes_end"]
    metrics = {s: stage_metrics(child[s], n_bootstrap=50) for s in order}
    effects = {s: with_seed_blocks({42: paired_effect(child[s], parent[s], n_bootstrap=50)}) for s in order}
    return order, child, metrics, effects


def test_every_plot_is_written_as_a_png(tmp_path, run_inputs):
    order, recs, metrics, effects = run_inputs
    paths = write_plots(tmp_path / "plots", "child", order, recs, metrics, "parent", "k=v", effects)
    assert sorted(paths) == sorted(PLOTS)
    for name, path in paths.items():
        data = path.read_bytes()
        assert path == tmp_path / "plots" / f"{name}.png" and data[:8] == PNG and len(data) > 5000, name
    assert not list((tmp_path / "plots").glob(".*.tmp"))     # atomic: no temp file left behind


@pytest.mark.slow
def test_same_inputs_give_the_same_bytes(tmp_path, run_inputs):
    order, recs, metrics, effects = run_inputs
    a = write_plots(tmp_path / "a", "child", order, recs, metrics, "parent", "k=v", effects)
    b = write_plots(tmp_path / "b", "child", order, recs, metrics, "parent", "k=v", effects)
    assert all(a[k].read_bytes() == b[k].read_bytes() for k in PLOTS)


def test_plots_need_no_display_and_leave_pyplot_alone(tmp_path, run_inputs):
    order, recs, metrics, _ = run_inputs
    had_pyplot = "matplotlib.pyplot" in sys.modules
    write_plots(tmp_path, "root", order, recs, metrics)
    assert ("matplotlib.pyplot" in sys.modules) == had_pyplot
    assert (tmp_path / "effect_forest.png").read_bytes()[:8] == PNG   # a root run says "no parent"


def test_a_stage_with_nothing_parsed_still_plots(tmp_path):
    empty = [{"qid": f"q{i}", "y": i % 2, "prior": None, "posterior": None, "stated": None, "trace_cut": None,
              "trace_last": None, "bayes_end": None, "seed": 1} for i in range(5)]
    metrics = {"s0": stage_metrics(empty, n_bootstrap=20)}
    effects = {"s0": with_seed_blocks({42: {"brier": None, "ms": None, "undefined": {"effect": "parent x has no stage s0"}}})}
    paths = write_plots(tmp_path, "r", ["s0"], {"s0": empty}, metrics, "x", "k=v", effects)
    assert all(p.read_bytes()[:8] == PNG for p in paths.values())
