"""Stage eval: roll the stage's model out on the held-out questions and score every belief.

Writes records.jsonl (one row per question: y, prior, posterior, stated P, snap P, the trace's own
beliefs, the Bayes oracle's, the completions) and metrics.json (metrics.stage_metrics).

Options (``eval``): ``prior_draws`` = K > 0 in snap mode re-draws each question's snap prior K
times (seeds distinct from the prior's, deterministic) into ``snap_draws``, from which the
metrics de-attenuate MS (martingale.stats.deattenuation); ``negations`` asks each question's negation
too (``stated_neg``), for the coherence |P(A) + P(¬A) − 1|; ``balance`` evaluates each held-out
question and its negation as questions of their own (ȳ = 0.5: the base-rate constant's Brier is 0.25).
"""
from __future__ import annotations

from pathlib import Path

from ...beliefs.elicit import cut_index, judge_needed, probe_prompts, rollout
from ...beliefs.forced import answer_context, forced_reads
from ...beliefs.parse import parse_p
from ...beliefs.prompts import Prompts
from ...beliefs.readers import ReadContext
from ...beliefs.section import PromptsConfig
from ...core.errors import StageError
from ...core.jsonvalue import JsonObject
from ...metrics import stage_metrics
from ...model.backend import open_models
from ...model.load import describe
from ...store import files
from ..evaluate import EvaluateSlice
from ..simulate import SimulateSlice
from .common import log, make_world, seed_everything


def _r(v: float | None) -> float | None:
    return None if v is None else round(float(v), 6)


DRAW_SEED_STRIDE = 1000   # re-draw j of the snap prior samples with seed + 1 + 1000·(j + 1)
NEGATION_SEED = 2         # negated questions sample with seed + 2 (the trace: seed, the snap prior: seed + 1)


def snap_draws(gen, questions, k: int, seed: int, temperature: float,
               prompts_cfg: PromptsConfig | None = None) -> list[list[float | None]]:
    """K re-draws of each question's snap prior (the same prompt as beliefs.elicit.rollout's snap
    answer) with backend ``gen``, each with its own seed: per question, the K stated P (None = unparsed)."""
    ask = Prompts(prompts_cfg, getattr(gen, "tokenizer", None))
    prompts = [ask.snap(q) for q in questions]
    draws = []
    for j in range(k):
        batch = gen.sample(prompts, ask.snap_tokens(), temperature, seed + 1 + DRAW_SEED_STRIDE * (j + 1))
        draws.append([parse_p(ask.snap_text(t)) for t in batch.texts])
    return [[_r(d[i]) for d in draws] for i in range(len(questions))]


def negation_stated(gen, world, questions, seed: int, temperature: float,
                    prompts_cfg: PromptsConfig | None = None, read: str = "verbal") -> list[float | None]:
    """The stated P of each question's negation (a reasoned trace on ``Q not ...``), backend ``gen``,
    by the run's read (``elicit.read``: the P it writes, or its forced read after the trace)."""
    ask = Prompts(prompts_cfg, getattr(gen, "tokenizer", None))
    prompts = [ask.reasoned(q.negation()) for q in questions]
    batch = gen.sample(prompts, ask.trace_tokens(world.n_clues), temperature, seed + NEGATION_SEED)
    if read == "forced":
        contexts = [answer_context(p, c, ask.embedded) for p, c in zip(prompts, batch.texts)]
        return [_r(p) for p, _ in forced_reads(gen, contexts, ask.forced_prefix, ask.forced_min_mass)]
    return [_r(parse_p(ask.reasoned_text(t))) for t in batch.texts]


def balanced(questions: list) -> list:
    """The questions, then each one's negation (qid + ``~``, y' = 1 − y): half resolve yes."""
    return list(questions) + [q.negation() for q in questions]


def evaluate_model(gen, judge, cfg: EvaluateSlice | SimulateSlice, questions, ctx=None) -> list[JsonObject]:
    """One record per question: the model's (backend ``gen``) beliefs, read with ``judge`` (a
    backend, or None when the reader needs none; ``ctx`` a ReadContext the caller closes), beside
    the trace's own and the oracle's."""

    world = make_world(cfg.world)
    ctx = ctx or ReadContext(world=world, judge=judge, config=cfg)
    seed = cfg.seed
    temperature = cfg.eval.temperature
    ro = rollout(gen, questions, ctx, cfg.elicit, seed, temperature)
    k = cut_index(world, cfg.elicit)
    n_draws = cfg.eval.prior_draws
    if n_draws < 0:
        raise ValueError(f"eval.prior_draws: must be ≥ 0, got {n_draws}")
    draws = None
    if n_draws and cfg.elicit.mode == "snap":
        draws = snap_draws(gen, questions, n_draws, seed, temperature, cfg.prompts)
    elif n_draws:
        log.warning("eval.prior_draws=%d ignored: the samemode prior is one judge read of one trace, "
                    "not a snap draw to repeat (de-attenuation needs elicit.mode=snap)", n_draws)
    negs = negation_stated(gen, world, questions, seed, temperature, cfg.prompts,
                           cfg.elicit.read) if cfg.eval.negations else None
    rows = []
    for i, q in enumerate(questions):
        extra: JsonObject = {}
        if draws is not None:
            extra["snap_draws"] = draws[i]
        if negs is not None:
            extra["stated_neg"] = negs[i]
        if q.crowd is not None:             # a forecast from elsewhere (a questions file's crowd_p)
            extra["crowd_p"] = _r(q.crowd)
        rows.append({
            "qid": q.qid, "y": q.y, "seed": seed,
            "prior": _r(ro.prior[i]), "posterior": _r(ro.posterior[i]), "stated": _r(ro.stated[i]),
            "snap": _r(ro.snap_p[i]), "trace_cut": _r(ro.trace_cut[i]), "trace_last": _r(ro.trace_last[i]),
            "bayes_cut": _r(world.bayes(q, k)), "bayes_end": _r(world.bayes(q)),
            "completion": ro.trace.texts[i],
            **({"snap_completion": ro.snap.texts[i]} if ro.snap is not None else {}),
            **({k: _r(v[i]) for k, v in ro.reads.items()} if ro.reads is not None else {}),
            **extra,
        })
    return rows


def run(cfg: EvaluateSlice, model: Path, judge_model: Path, out_dir: Path) -> None:
    """cfg: world, model, elicit, eval, seed → out_dir/records.jsonl and out_dir/metrics.json."""

    seed = cfg.seed
    seed_everything(seed)
    world = make_world(cfg.world)
    _, heldout = world.splits()
    if cfg.eval.balance:
        heldout = balanced(heldout)
    with open_models(model, judge_model, cfg.model, judge_needed(cfg.elicit)) as (gen, judge):
        guards = {**describe(gen.model),
                  **gen.verify(probe_prompts(heldout, prompts_cfg=cfg.prompts, tokenizer=gen.tokenizer))}
        ctx = ReadContext(world=world, judge=judge, config=cfg)
        try:
            records = evaluate_model(gen, judge, cfg, heldout, ctx)
        finally:
            ctx.close()
    check_parse_rate(records, cfg.eval.min_parse_rate)
    metrics = stage_metrics(records, cfg.eval.n_bootstrap, cfg.eval.ci, seed)
    metrics.update(ctx.stats())      # e.g. api_judge: calls, cache hits, failures
    if records and "stated_forced" in records[0]:
        metrics["read"] = cfg.elicit.read   # which read brier and ms come from
    unparsed = [r["completion"][-80:] for r in records if r["stated"] is None]
    if unparsed:
        metrics["unparsed_examples"] = unparsed[:3]
    log.info("eval: %s", {k: metrics.get(k) for k in ("brier", "ms", "ms_trace", "parse_rate")})
    with files.atomic_dir(out_dir) as tmp:
        files.write_jsonl(tmp / "records.jsonl", records)
        files.write_json(tmp / "metrics.json", metrics)
        files.write_json(tmp / "backend.json", {"backend": cfg.model.backend, **guards})


def check_parse_rate(records: list[JsonObject], floor: float) -> None:
    """Fail the stage when fewer than ``eval.min_parse_rate`` of its answers state a P, quoting
    some that did not: a model that stopped answering is not measured as if it had."""
    unparsed = [r for r in records if r["stated"] is None]
    rate = 1 - len(unparsed) / max(1, len(records))
    if rate < floor:
        shown = " | ".join(repr(r["completion"][-60:]) for r in unparsed[:3])
        raise StageError(f"eval: parse rate {rate:.3f} < eval.min_parse_rate {floor} "
                         f"({len(unparsed)} of {len(records)} answers state no P; e.g. {shown})")
