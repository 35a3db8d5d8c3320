"""ForecastBench's question sets and resolution sets as one questions file: the rules that made the
shipped sample, as code (data/questions/README.md says them in prose).

One file or many, each known by its content (a question set holds ``questions``, a resolution
set ``resolutions``); a question is joined with its resolution by (source, id), whichever files
each comes from, and the same question in several sets is one question (its earliest set's text and
crowd value). Kept: the market questions (manifold, metaculus, infer, polymarket) resolved to 0 or 1
with their dates in order (one resolved before its market's scheduled close keeps that close in
``market_info_close_datetime`` and has no ``close_date``: the event settled it early); every other
row is counted by why it was left out. The crowd's (or
market's) probability at the set's freeze date is ``crowd_p``, the forecast a model is measured
against (metrics: ``crowd_brier``)."""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from datetime import date, datetime
from pathlib import Path
from typing import Optional

from ..core.jsonvalue import Json, JsonObject

MARKETS = ("manifold", "metaculus", "infer", "polymarket")
DATASETS = ("acled", "dbnomics", "fred", "wikipedia", "yfinance")   # several resolution dates each
KEPT_VERBATIM = ("source_intro", "freeze_datetime", "freeze_datetime_value", "freeze_datetime_value_explanation",
                 "market_info_open_datetime", "market_info_close_datetime")
LEFT_OUT = ("combination", "dataset", "other source", "unresolved", "no resolution", "dates out of order")


class ImportProblem(ValueError):
    """The files cannot be imported: every problem, one line each (file: where: what is wrong)."""

    def __init__(self, problems: list[str]):
        super().__init__("\n".join(problems))
        self.problems = problems


@dataclass
class Imported:
    """The questions-file rows (sorted by id) and, per reason, how many rows were left out."""
    rows: list[JsonObject]
    left_out: dict[str, int] = field(default_factory=lambda: dict.fromkeys(LEFT_OUT, 0))
    early: int = 0                     # kept, resolved before the market's scheduled close
    question_sets: int = 0
    resolution_sets: int = 0


def read_set(path: Path, problems: list[str]) -> Optional[tuple[str, JsonObject]]:
    """("questions" | "resolutions", the file's object), or None after adding its problem."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as e:
        problems.append(f"{path}: file: not a readable JSON file ({str(e).splitlines()[0]})")
        return None
    if isinstance(data, str):
        problems.append(f"{path}: file: a pointer to {data!r}, not a set: give that file")
        return None
    for kind in ("questions", "resolutions"):
        if isinstance(data, dict) and isinstance(data.get(kind), list):
            if not isinstance(data.get("forecast_due_date"), str):
                problems.append(f"{path}: forecast_due_date: missing (every ForecastBench set has one)")
                return None
            return kind, data
    problems.append(f"{path}: file: neither a question set (questions: [...]) nor a resolution set (resolutions: [...])")
    return None


def _day(value: Json) -> Optional[date]:
    """The date of an ISO date or date-time; None for ForecastBench's "N/A" or null."""
    if not isinstance(value, str) or value.strip() in ("", "N/A"):
        return None
    try:
        return date.fromisoformat(value)
    except ValueError:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).date()


def crowd_p(value: Json) -> Optional[float]:
    """The crowd's probability: ``freeze_datetime_value`` as a number in [0, 1], else None."""
    try:
        p = float(value)
    except (TypeError, ValueError):
        return None
    return p if math.isfinite(p) and 0 <= p <= 1 else None


def _kind_of_row(row: JsonObject) -> Optional[str]:
    """Why a row is left out before any join (a combination, a dataset question …), or None."""
    if isinstance(row.get("id"), list):
        return "combination"
    if row.get("source") in DATASETS:
        return "dataset"
    return None if row.get("source") in MARKETS else "other source"


def _resolution(key: tuple[str, str], found: list[tuple[str, JsonObject]], problems: list[str]) -> Optional[JsonObject]:
    """The one 0/1 resolution of a question across the resolution sets, None when it has none;
    a problem where two sets disagree."""
    done = [(f, r) for f, r in found if r.get("resolved") is True and r.get("resolved_to") in (0, 1)]
    values = {float(r["resolved_to"]) for _, r in done}
    if len(values) > 1:
        problems.append(f"{done[0][0]}: {key[0]}-{key[1]}: resolved_to 0 in one resolution set and 1 in another "
                        f"({', '.join(sorted({f for f, _ in done}))})")
        return None
    return done[0][1] if done else None


def _row(q: JsonObject, set_file: str, res: JsonObject) -> JsonObject | str:
    """A questions-file line for a market question and its resolution, or why it is left out."""
    opened, closed = _day(q.get("market_info_open_datetime")), _day(q.get("market_info_close_datetime"))
    resolved = _day(res.get("resolution_date"))
    if (opened and closed and closed < opened) or (opened and resolved and resolved < opened):
        return "dates out of order"
    if closed and resolved and resolved < closed:
        closed = None                              # settled before the scheduled close
    criteria = q.get("market_info_resolution_criteria")
    row: JsonObject = {"id": f"{q['source']}-{q['id']}", "question": q.get("question"), "background": q.get("background") or "",
           "resolution_criteria": criteria if criteria and criteria != "N/A" else q.get("resolution_criteria") or "",
           "option": "", "y": int(res["resolved_to"]),
           "open_date": opened.isoformat() if opened else None, "close_date": closed.isoformat() if closed else None,
           "resolve_date": resolved.isoformat() if resolved else None,
           "source": q["source"], "url": q.get("url"), "forecastbench_id": q["id"],
           "forecastbench_question_set": set_file, "forecastbench_resolution_criteria": q.get("resolution_criteria")}
    row.update({k: q.get(k) for k in KEPT_VERBATIM})
    p = crowd_p(q.get("freeze_datetime_value"))
    if p is not None:
        row["crowd_p"] = p
    return row


def import_forecastbench(paths: list[Path]) -> Imported:
    """Every resolved market question of the files, as questions-file rows; ImportProblem listing
    every problem when there is any (nothing is returned to write)."""
    problems: list[str] = []
    sets = [(Path(p), read_set(Path(p), problems)) for p in paths]
    out = Imported([])
    questions: dict[tuple[str, str], tuple[str, str, JsonObject]] = {}     # key → (due date, file, question)
    resolutions: dict[tuple[str, str], list[tuple[str, JsonObject]]] = {}
    for path, found in sets:
        if found is None:
            continue
        kind, data = found
        out.question_sets += kind == "questions"
        out.resolution_sets += kind == "resolutions"
        for row in data[kind]:
            why = _kind_of_row(row) if isinstance(row, dict) else "other source"
            if why:
                out.left_out[why] += 1
                continue
            key = (str(row["source"]), str(row["id"]))
            if kind == "resolutions":
                resolutions.setdefault(key, []).append((path.name, row))
            elif key not in questions or data["forecast_due_date"] < questions[key][0]:
                questions[key] = (data["forecast_due_date"], path.name, row)
    for key, (_, set_file, q) in sorted(questions.items()):
        answers = resolutions.get(key)
        res = _resolution(key, answers, problems) if answers else None
        if res is None:
            out.left_out["unresolved" if answers else "no resolution"] += 1
            continue
        row = _row(q, set_file, res)
        if isinstance(row, str):
            out.left_out[row] += 1
        else:
            out.rows.append(row)
    if problems:
        raise ImportProblem(problems)
    out.rows.sort(key=lambda r: r["id"])
    return out
