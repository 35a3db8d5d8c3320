"""Bench: how often decide's procedure decides falsely, and how often it decides an effect, simulated
through the code that decides.

Each simulated finding is a trained run of the campaign's design: up to 8 seeds read held-out draws
of N questions (1,000), each seed missing its own 5–10% of every draw; seed i's value on question j
is θ + u_i + q_j + e_ij (u_i its training, q_j the question's, shared by every seed, e_ij its own;
their sds, as sds of one seed's estimate, are a profile's), its estimate its mean over the questions
it answered (as Brier is). The seeds and draws are drawn once: a later look reads the same seeds and
questions and its new ones, as a build does. At each look, what the code does:

- each draw's seeds' question covariance and the tails of their mean, from the records as the
  aggregate writes them (records/crossed.py: 4 × ``n_bootstrap`` joint resamples from its rng);
- the table's verdict (table/findings.result on eval.json blocks: the draws pooled, the plan's
  nominal level, futility; findings.decide's BH q);
- decide's next look (decide.open_findings: only an inconclusive finding, not stopped, with a look
  left) by one of three routes: ``seeds`` (the next of the plan's seeds), ``decide``
  (decide.cheaper_look, a redraw priced at ``--redraw-share`` of a seed) or ``draws`` (a redraw
  first, then seeds).

The plan is conf/decide.yaml's. Futility off: a finding futility stops looks on (the same draws,
so its decisions with futility on are a subset). Prints, per profile × route, with futility on and
off: under no effect (θ = 0, "> 0") the share decided either way, at a null's margin (θ = m,
"= 0") the share reproduced, the share of θ = ``--theta`` reproduced (power), each ± its SE, and
the mean seeds a finding took under no effect and under the effect; then the same over the profiles.
Usage: python bench/decide_error.py [--findings 2000] [--theta 0.04] [--redraw-share 0.2]
"""
from __future__ import annotations

import argparse
import math
import sys
import time
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Optional

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from martingale import decide  # noqa: E402
from martingale.records.crossed import RESAMPLES_PER_BOOTSTRAP, _block, _rng  # noqa: E402
from martingale.records.eval_record import EvalRecord, eval_record  # noqa: E402
from martingale.stats.crossed import joint_draws, resample_weights  # noqa: E402
from martingale.stats.seeds import seed_spread  # noqa: E402
from martingale.stats.sequential import Boundary  # noqa: E402
from martingale.table import findings  # noqa: E402
from martingale.table.looks import DecidePlan, Look, load_plan  # noqa: E402

PLAN = load_plan(REPO)
SEEDS = 41                    # the campaign's first seed (conf/config.yaml): the resamples' rng reads the seeds
N_QUESTIONS, MISSING, N_BOOTSTRAP = 1000, (0.05, 0.10), 1000
MARGIN = 0.05
# sds of one seed's estimate from its training, the questions every seed shares, its own questions
PROFILES = {"seeds dominate": (0.02, 0.005, 0.005), "questions dominate": (0.005, 0.015, 0.005),
            "mixed": (0.01, 0.01, 0.01)}
ROUTES = ("seeds", "decide", "draws")
FUTILE = "stopped for futility"


@lru_cache(maxsize=None)
def _weights(k: int, n: int, n_bootstrap: int) -> np.ndarray:
    """The aggregate's joint resamples for seeds 41 … 41+k−1 on n questions (every draw's: the same seeds)."""
    seeds = list(range(SEEDS, SEEDS + k))
    return resample_weights(n, RESAMPLES_PER_BOOTSTRAP * n_bootstrap, _rng(seeds))


@dataclass
class Data:
    """A finding's noise on every draw: noise[d] is (seeds × questions), NaN where a seed did not
    answer; the values at θ are θ + noise. One noise serves every θ (common random numbers): the
    seeds' covariance does not move with θ and the tails of their mean move by θ (the mean is
    linear), so each draw's crossed block is computed once."""
    noise: list[np.ndarray]
    n_bootstrap: int = N_BOOTSTRAP
    blocks: dict = field(default_factory=dict)

    def block(self, d: int, k: int, theta: float) -> dict:
        """eval.json's crossed block of k seeds on draw d, as records/crossed.stage_crossed writes it."""
        if (d, k) not in self.blocks:
            n = self.noise[d].shape[1]
            self.blocks[d, k] = _block(joint_draws(self._means(d, k), _weights(k, n, self.n_bootstrap)), n)
        b = self.blocks[d, k]
        return {**b, "mean_tails": [[p, lo + theta, hi + theta] for p, lo, hi in b["mean_tails"]]}

    def _means(self, d: int, k: int):
        """The seeds' means under weights w (B × n): stats.crossed.weighted_mean's, in one product."""
        v = self.noise[d][:k].T
        has = np.isfinite(v)
        both = np.hstack([np.where(has, v, 0.0), has.astype(float)])
        return lambda w: (lambda s: s[:, :k] / s[:, k:])(w @ both)

    def evals(self, d: int, k: int, theta: float) -> EvalRecord:
        """The eval.json of the look's run on draw d: each seed's estimate and CI, the crossed block."""
        est = [theta + float(x) for x in np.nanmean(self.noise[d][:k], axis=1)]
        block = self.block(d, k, theta)
        ses = np.sqrt(np.diag(block["cov"]))
        return record(list(range(SEEDS, SEEDS + k)), est, [[e - 1.96 * s, e + 1.96 * s] for e, s in zip(est, ses)],
                      block)


def record(seeds: list[int], values: list[float], cis: list[list[float]], crossed: dict) -> EvalRecord:
    """A trained run's eval.json with one stage s0 whose seeds read ``values`` (Brier) with ``cis``
    and the seeds' question covariance ``crossed``, read as the table reads it."""
    ids = {str(s): {"model_stage": "train-0", "eval_stage": f"evaluate-{s}"} for s in seeds}
    return eval_record({"run_id": "sim", "parent": None, "knob": None, "config_hash": "sha256:" + "0" * 64,
                        "seeds": seeds, "stage_order": ["s0"], "provenance": {"s0": ids}, "stage_provenance": {},
                        "effect": None, "stages": {"s0": {"seeds": seeds, "brier": seed_spread(values),
                                                          "brier_ci": {"per_seed": cis}, "crossed": {"brier": crossed}}}})


def draw(rng: np.random.Generator, profile, n: int = N_QUESTIONS, n_bootstrap: int = N_BOOTSTRAP) -> Data:
    """A finding's seeds (the plan's most) on each of the plan's draws (module docstring)."""
    seed_sd, shared_sd, own_sd = profile
    k = max(PLAN.seeds)
    u = rng.normal(0, seed_sd, k)
    noise = []
    for _ in range(PLAN.draws):
        v = u[:, None] + rng.normal(0, shared_sd * math.sqrt(n), n)[None, :] + rng.normal(0, own_sd * math.sqrt(n), (k, n))
        v[rng.random((k, n)) < rng.uniform(*MISSING, (k, 1))] = np.nan
        noise.append(v)
    return Data(noise, n_bootstrap)


@dataclass
class Outcome:
    """A finding through its looks: the verdict read at each, the look futility stopped it at (None:
    never), and the seeds and draws of each look."""
    verdicts: list[str]
    looks: list[tuple[int, int]]
    futile_at: int | None = None

    def final(self, futility: bool) -> tuple[str, int]:
        """(verdict, seeds) where the procedure stopped, with futility on or off."""
        last = self.futile_at if futility and self.futile_at is not None else len(self.verdicts) - 1
        return self.verdicts[last], self.looks[last][0]


def finding(expect: str) -> findings.Finding:
    return findings.Finding("sim", "C0", "sim", "a simulated finding", "sim", "s0", "brier", expect,
                            margin=MARGIN if expect == "= 0" else None)


def next_look(route: str, r: findings.Result, f: findings.Finding, look: Look, plan: DecidePlan,
              redraw_share: float) -> tuple[int, int]:
    """The (seeds, draws) the route takes the finding to."""
    if route == "decide":
        _, k, draws, _, _ = decide.cheaper_look(r.combined, decide._target(f, r), look, plan, 1.0,
                                                redraw_share * look.first, look.first)
        return k, draws
    if route == "draws" and look.draws < plan.draws:
        return look.k, look.draws + 1
    k = plan.next_seeds(look.k)
    return (k, look.draws) if k is not None else (look.k, look.draws + 1)


def procedure(data: Data, theta: float, expect: str, route: str, redraw_share: float = 0.2,
              plan: DecidePlan = PLAN, boundary: Optional[Boundary] = None) -> Outcome:
    """One finding through the plan's looks, each at ``boundary``'s level (the plan's; Boundary(1):
    re-tested at 5% every look), futility noted but not obeyed (Outcome.final applies it)."""
    f = finding(expect)
    k0 = min(plan.seeds)
    k, draws, out = k0, 1, Outcome([], [])
    while True:
        index = 1 + sum(k0 < s <= k for s in plan.seeds) + draws - 1
        look = Look(k, draws, tuple(f"sim-d{d}" for d in range(draws)), index, plan.looks, k0)
        reads = [({"run_id": run, "state": "done"}, data.evals(d, k, theta), None) for d, run in enumerate(look.runs)]
        r = findings.result(f, *reads[0], more=tuple(reads[1:]), boundary=boundary or plan.bound(), look=look,
                            max_seeds=plan.max_seeds, max_draws=plan.draws)
        findings.decide([f], {f.id: r})
        out.verdicts.append(r.verdict)
        out.looks.append((k, draws))
        if r.stopped and r.stopped.startswith(FUTILE):
            out.futile_at = len(out.verdicts) - 1 if out.futile_at is None else out.futile_at
            r.stopped = None                      # futility off: the look is taken all the same
        if not decide.open_findings([f], {f.id: r}, plan, False):
            return out
        k, draws = next_look(route, r, f, look, plan, redraw_share)


DECIDED = (findings.REPRODUCED, findings.NOT_REPRODUCED)
# (name, θ (None: the power's), the finding's expectation, the verdicts counted)
SCENARIOS = (("no effect", 0.0, "> 0", DECIDED), ("at the margin", MARGIN, "= 0", (findings.REPRODUCED,)),
             ("power", None, "> 0", (findings.REPRODUCED,)))


def simulate(profile, n_findings: int, seed: int, theta: float = 0.04, redraw_share: float = 0.2,
             routes=ROUTES, scenarios=SCENARIOS, plan: DecidePlan = PLAN, boundary: Optional[Boundary] = None) -> dict:
    """{(scenario, route, futility on?): (share of findings with a verdict it counts, mean seeds)}:
    ``n_findings`` findings of ``profile``, each taken by every route in every scenario (the power's
    at ``theta``) through ``plan`` (``procedure``)."""
    rng = np.random.default_rng(seed)
    keys = [(sc[0], r, on) for sc in scenarios for r in routes for on in (True, False)]
    hits, seeds = dict.fromkeys(keys, 0), dict.fromkeys(keys, 0)
    for _ in range(n_findings):
        data = draw(rng, profile)
        for name, at, expect, wanted in scenarios:
            for route in routes:
                out = procedure(data, theta if at is None else at, expect, route, redraw_share, plan, boundary)
                for on in (True, False):
                    verdict, k = out.final(on)
                    hits[name, route, on] += verdict in wanted
                    seeds[name, route, on] += k
    return {key: (hits[key] / n_findings, seeds[key] / n_findings) for key in keys}


def _pm(p: float, n: int) -> str:
    return f"{100 * p:5.2f} ± {100 * math.sqrt(p * (1 - p) / n):4.2f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--findings", type=int, default=2000, help="simulated findings per profile")
    ap.add_argument("--theta", type=float, default=0.04, help="the effect whose power is printed")
    ap.add_argument("--redraw-share", type=float, default=0.2, help="a redraw's CPU-hours per seed, as a share of a seed's")
    args = ap.parse_args()
    n = args.findings
    start = time.perf_counter()
    print(f"plan: {PLAN.looks} looks, seeds {PLAN.seeds}, {PLAN.draws} draws, {PLAN.boundary}, α {PLAN.alpha}; "
          f"{n} findings a profile, {N_QUESTIONS} questions a draw, {RESAMPLES_PER_BOOTSTRAP * N_BOOTSTRAP} resamples")
    print(f"{'profile':18} {'route':6} {'futility':8} | {'θ=0 decided %':>13} | {'θ=m reproduced %':>16} | "
          f"{f'power θ={args.theta:g} %':>15} | seeds θ=0, θ={args.theta:g}")
    results = {}
    for i, (name, profile) in enumerate(PROFILES.items()):
        results[name] = simulate(profile, n, 100 + i, args.theta, args.redraw_share)
    rows = [(name, results[name]) for name in PROFILES]
    keys = results[next(iter(PROFILES))]
    rows.append(("all profiles", {key: tuple(float(np.mean([results[p][key][j] for p in PROFILES])) for j in (0, 1))
                                  for key in keys}))
    for name, res in rows:
        size = n * (len(PROFILES) if name == "all profiles" else 1)
        for route in ROUTES:
            for on in (True, False):
                rates = [res[sc[0], route, on] for sc in SCENARIOS]
                print(f"{name:18} {route:6} {'on' if on else 'off':8} | {_pm(rates[0][0], size):>13} | "
                      f"{_pm(rates[1][0], size):>16} | {_pm(rates[2][0], size):>15} | {rates[0][1]:.2f}, {rates[2][1]:.2f}")
    print(f"{time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
