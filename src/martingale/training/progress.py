"""A training stage's progress: one line a step in the job log (step k/N, reward, KL, loss, parse
rate, tokens/s, ETA) and the same row to the stage's live wandb run; timings go into no file."""
from __future__ import annotations

import logging
from dataclasses import dataclass, field

import numpy as np

from ..core.jsonvalue import JsonObject

log = logging.getLogger("martingale")


@dataclass
class Pace:
    """The wall time of each step this process ran, for the progress line's ETA: the steps left
    (of ``total``) times the mean step time so far."""
    total: int
    seconds: list[float] = field(default_factory=list)

    def eta(self, done: int) -> float:
        if not self.seconds:
            return float("nan")
        return max(self.total - done, 0) * sum(self.seconds) / len(self.seconds)


def _clock(seconds: float) -> str:
    if seconds != seconds:       # NaN: no step timed yet
        return "?"
    s = int(round(seconds))
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"


def _value(v) -> str:
    return "-" if v is None else f"{v:.4g}" if isinstance(v, float) else str(v)


PROGRESS_KEYS = (("reward", "reward"), ("kl", "kl"), ("loss", "loss"), ("parse_rate", "parse"),
                 ("human_ms", "human_ms"), ("adapter_gap", "gap"), ("unreadable", "unreadable"))


def report_step(name: str, unit: str, index: int, pace: Pace, row: JsonObject, tokens: int,
                seconds: float, live=None, tokens_label: str = "tok/s") -> None:
    """A step is done: one progress line in the job log (``unit`` k/N, the row's quantities,
    tokens/s, ETA) and the row with its timings to the stage's live wandb run. Timings go nowhere
    else: the stage's files stay the same bytes on every run."""
    pace.seconds.append(seconds)
    eta = pace.eta(index + 1)
    rate = tokens / seconds if seconds > 0 else float("nan")
    parts = [f"{name} {unit} {index + 1}/{pace.total}"]
    parts += [f"{label} {_value(row[key])}" for key, label in PROGRESS_KEYS if key in row]
    parts += [f"{rate:.0f} {tokens_label}", f"{seconds:.2f}s/{unit}", f"eta {_clock(eta)}"]
    log.info(" ".join(parts))
    if live:
        live.log({**row, "perf/completion_tokens": tokens, "perf/tokens_per_s": rate,
                  "perf/step_seconds": seconds, "perf/eta_seconds": eta}, step=index)


def step_row(loss, kl, rew: np.ndarray, stated: np.ndarray, y: np.ndarray) -> JsonObject:
    """A step's history row: loss, KL, mean reward, parse rate and Brier of the stated P."""
    return {"loss": round(float(loss.detach()), 6), "kl": round(float(kl), 6),
            "reward": round(float(np.nanmean(rew)), 6) if np.isfinite(rew).any() else None,
            "parse_rate": round(float(np.isfinite(stated).mean()), 4),
            "brier": round(float(np.nanmean((y - stated) ** 2)), 6) if np.isfinite(stated).any() else None}
