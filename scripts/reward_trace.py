"""What a train stage's reward saw, step by step: replay the stage in-process (its own config slice,
upstream folders and thread count, so the same bytes as the stage job) and print, per window of
steps, the batch's mean prior, posterior and stated P, the in-batch OLS fit of Δ = posterior − prior
on the prior (intercept a, slope b), each term of the A reward's share of its variance
(the mean update's −mean(Δ)·Δ, the slope's −b·(prior − p̄)·Δ, the info term), the Brier of the answers the reward favours (above the batch's
median) against the rest, and the KL. Nothing is written to the project (the stage runs in a
temporary folder).

    python scripts/reward_trace.py A-on-D          # the run's first trained stage (s1)
    python scripts/reward_trace.py filter-s2only --stage s2 --window 10
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def a_terms(prior: np.ndarray, posterior: np.ndarray, info_coef: float, info_eps: float) -> dict[str, np.ndarray]:
    """The A reward split into three terms that sum to it (rewards.martingale_A): Δ̂ = a + b·prior
    written as its batch mean plus its slope about the mean prior, Δ̂ = mean(Δ) + b·(prior − p̄)
    (OLS: the fit's mean is the update's), so −Δ·Δ̂ = −mean(Δ)·Δ (the mean update's term)
    − b·(prior − p̄)·Δ (the slope's), plus the info term."""
    from martingale.stats import batch_line  # A's own fit
    d = posterior - prior
    a, b = batch_line(prior, d)
    mean = a + b * prior.mean()
    return {"a": np.full_like(d, a), "b": np.full_like(d, b), "mean": -mean * d,
            "slope": -b * (prior - prior.mean()) * d, "info": -info_coef * np.maximum(0.0, info_eps - np.abs(d))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run")
    ap.add_argument("--stage", default="s1")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--window", type=int, default=20)
    args = ap.parse_args()

    from martingale import rewards
    from martingale.core.threads import use_threads
    from martingale.jobs.smk import compute_threads
    from martingale.plan import Plan
    from martingale.stages import kinds
    from martingale.store import stage_dir

    plan = Plan.load(ROOT)
    rows = [r for r in plan.run_stages(args.run) if r.stage == args.stage and (args.seed is None or r.seed == args.seed)]
    if not rows:
        sys.exit(f"reward_trace: {args.run} has no stage {args.stage}")
    stage = plan.stages[rows[0].model_stage]
    cfg = dict(stage.cfg)
    use_threads(compute_threads(cfg, 1))
    inputs = {role: ROOT / stage_dir(uid) for role, uid in stage.inputs.items()}
    for role, folder in inputs.items():
        if not (folder / "MANIFEST.json").is_file():
            sys.exit(f"reward_trace: {role} {folder.relative_to(ROOT)} is not built (snakemake it first)")
    seen: list[dict[str, np.ndarray]] = []
    bind = rewards.bind

    def recording(name, stage_cfg):
        score = bind(name, stage_cfg)

        def scored(**batch):
            r = score(**batch)
            seen.append({**{k: np.asarray(v, float) for k, v in batch.items()}, "reward": np.asarray(r, float)})
            return r
        return scored
    rewards.bind = recording
    with tempfile.TemporaryDirectory() as tmp:
        kinds()[stage.kind].run(cfg, out_dir=Path(tmp) / "out", **inputs)
        history = [json.loads(x) for x in (Path(tmp) / "out" / "train.jsonl").read_text().splitlines()]
    st = cfg["stage"]
    print(f"{args.run} {args.stage} ({st['reward']}): {len(seen)} steps, stage {stage.id}")
    print("steps    prior  post   stated  meanΔ   a       b      mean%  slope% info%  Brier(fav) Brier(rest) P(fav) P(rest) KL")
    for w in range(0, len(seen), args.window):
        chunk = seen[w:w + args.window]
        cat = {k: np.concatenate([c[k] for c in chunk]) for k in ("prior", "posterior", "stated", "y")}
        terms = [a_terms(c["prior"][ok], c["posterior"][ok], float(st.get("info_coef", 1.0)), float(st.get("info_eps", 0.02)))
                 for c in chunk for ok in [np.isfinite(c["prior"]) & np.isfinite(c["posterior"])]]
        total = [t["mean"] + t["slope"] + t["info"] for t in terms]
        share = {k: np.mean([np.cov(t[k], r)[0, 1] / r.var() for t, r in zip(terms, total) if r.var() > 0])
                 for k in ("mean", "slope", "info")}
        fav, rest, pfav, prest = [], [], [], []
        for c in chunk:   # the answers this batch's reward favours: above its median
            ok = np.isfinite(c["reward"])
            hi = c["reward"][ok] > np.median(c["reward"][ok])
            err = (c["y"][ok] - c["stated"][ok]) ** 2
            fav.append(err[hi]), rest.append(err[~hi])
            pfav.append(c["stated"][ok][hi]), prest.append(c["stated"][ok][~hi])
        kl = np.mean([h["kl"] for h in history[w:w + args.window]])
        print(f"{w:3d}-{w + len(chunk) - 1:<3d}  {np.nanmean(cat['prior']):.3f}  {np.nanmean(cat['posterior']):.3f}  "
              f"{np.nanmean(cat['stated']):.3f}   {np.nanmean(cat['posterior'] - cat['prior']):+.3f}  "
              f"{np.mean([t['a'][0] for t in terms]):+.3f}  {np.mean([t['b'][0] for t in terms]):+.3f}  "
              f"{100 * share['mean']:4.0f}  {100 * share['slope']:5.0f}  {100 * share['info']:4.0f}   "
              f"{np.mean(np.concatenate(fav)):.4f}     {np.mean(np.concatenate(rest)):.4f}      "
              f"{np.mean(np.concatenate(pfav)):.3f}  {np.mean(np.concatenate(prest)):.3f}   {kl:.4f}")


if __name__ == "__main__":
    main()
