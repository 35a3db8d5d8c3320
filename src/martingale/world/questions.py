"""Resolved binary forecasting questions from a JSONL file (``world=jsonl``, ``world.questions_file``).

One JSON object per line; blank lines are skipped. Fields (data/questions/README.md has the table):

    id                   required  string or integer (kept as a string); unique; may not end in "~"
    question             required  non-empty string
    y                    required  the resolution: 0 or 1 (1.0 and 0.0 are accepted; true/false are not)
    background           optional  string ("" when absent or null)
    resolution_criteria  optional  string
    option               optional  string: the outcome the probability is asked for ("" = "Yes")
    open_date            optional  ISO 8601 date (a date-time keeps its date); null = unknown
    close_date           optional  the same; open_date <= close_date <= resolve_date where given
    resolve_date         optional  the same
    anything else                  kept as is, in ``ForecastQuestion.extra``

A bad file is refused whole: ``load_questions`` reads every line, collects every problem as
``file:line: field: what is wrong`` and raises one QuestionsError listing them all; nothing is
built from a file with a problem.

Only the standard library is imported here (numpy inside ``splits``): the planner imports world
modules while it parses the Snakefile.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from datetime import date, datetime
from pathlib import Path
from types import MappingProxyType
from typing import Mapping, NoReturn, Sequence

from ..core.jsonvalue import Json, JsonObject
from ..store.files import write_jsonl
from .section import world_section

REQUIRED = ("id", "question", "y")
TEXT_FIELDS = ("background", "resolution_criteria", "option")
DATE_FIELDS = ("open_date", "close_date", "resolve_date")
KNOWN_FIELDS = REQUIRED + TEXT_FIELDS + DATE_FIELDS
NEGATION_SUFFIX = "~"
SPLIT_STREAM = 11   # the rng stream of splits: default_rng([seed, SPLIT_STREAM(, heldout_draw)])
MARKED_SPLITS = ("train", "heldout")   # the values of a line's ``split`` field



class QuestionsError(ValueError):
    """A questions file with problems; ``problems`` holds one ``file:line: field: what`` per problem."""

    def __init__(self, problems: Sequence[str]):
        self.problems = list(problems)
        super().__init__("\n".join(self.problems))


@dataclass(frozen=True)
class ForecastQuestion:
    """A resolved binary question. ``y`` is the resolution of the question as asked: for a
    negation (``negated``) it is already flipped. ``option`` is the outcome the probability is
    asked for (empty: the question's "Yes"); a negation asks for the probability that it does not
    happen, so the text stays and only ``negated`` and ``y`` change."""
    qid: str
    question: str
    y: int
    background: str = ""
    resolution_criteria: str = ""
    option: str = ""
    open_date: date | None = None
    close_date: date | None = None
    resolve_date: date | None = None
    negated: bool = False
    extra: Mapping[str, Json] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "extra", MappingProxyType(dict(self.extra)))

    def negation(self) -> "ForecastQuestion":
        """The same question asked the other way round (the option flipped): y' = 1 − y, qid
        marked with a trailing "~"; the negation of a negation is the question itself."""
        qid = self.qid[:-len(NEGATION_SUFFIX)] if self.negated else self.qid + NEGATION_SUFFIX
        return ForecastQuestion(qid, self.question, 1 - self.y, self.background, self.resolution_criteria,
                                self.option, self.open_date, self.close_date, self.resolve_date,
                                not self.negated, self.extra)

    def to_json(self) -> JsonObject:
        """The question as a line of a questions file (extra fields included; ``negated`` only
        when set, since a file holds questions as asked)."""
        row: JsonObject = dict(self.extra)
        row.update(id=self.qid, question=self.question, y=self.y, background=self.background,
                   resolution_criteria=self.resolution_criteria, option=self.option,
                   **{f: (getattr(self, f).isoformat() if getattr(self, f) else None) for f in DATE_FIELDS})
        if self.negated:
            row["negated"] = True
        return row


# --------------------------------------------------------------------------- reading
class _DuplicateKey(ValueError):
    pass


def _no_duplicate_keys(pairs: list[tuple[str, Json]]) -> JsonObject:
    seen: JsonObject = {}
    for k, v in pairs:
        if k in seen:
            raise _DuplicateKey(k)
        seen[k] = v
    return seen


def _no_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not a JSON number")


def _show(value: Json) -> str:
    """A value as JSON writes it (2, "yes", true, null), cut short."""
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 60 else text[:57] + "..."


def _type_name(value: Json) -> str:
    return {bool: "a boolean", int: "a number", float: "a number", str: "a string", list: "a list",
            dict: "an object", type(None): "null"}.get(type(value), type(value).__name__)


def _parse_date(value: str) -> date:
    """An ISO 8601 date, or the date of an ISO 8601 date-time (2024-07-12T00:00:00Z)."""
    try:
        return date.fromisoformat(value)
    except ValueError:
        return datetime.fromisoformat(value).date()


def _check_id(qid: Json) -> str | None:
    """What is wrong with a line's id, or None."""
    if isinstance(qid, bool) or not isinstance(qid, (str, int)):
        return f"must be a string or an integer, not {_type_name(qid)}"
    if not str(qid).strip():
        return "empty"
    if str(qid).endswith(NEGATION_SUFFIX):
        return f"{_show(qid)} ends with {NEGATION_SUFFIX!r}, which marks a negation"
    return None


def _check_question(text: Json) -> str | None:
    """What is wrong with a line's question text, or None."""
    if not isinstance(text, str):
        return f"must be a string, not {_type_name(text)}"
    return None if text.strip() else "empty"


def _check_y(y: Json) -> str | None:
    """What is wrong with a line's resolution, or None."""
    bad = isinstance(y, bool) or not isinstance(y, (int, float)) or y not in (0, 1)
    return f"must be 0 or 1, not {_show(y)}" if bad else None


def _dates(row: JsonObject, bad) -> dict[str, date | None]:
    """A line's dates (None where absent), each parsed, in order open ≤ close ≤ resolve."""
    dates: dict[str, date | None] = {}
    for name in DATE_FIELDS:
        value, dates[name] = row.get(name), None
        if value is None:
            continue
        if not isinstance(value, str):
            bad(name, f"must be an ISO 8601 date string (YYYY-MM-DD), not {_type_name(value)}")
            continue
        try:
            dates[name] = _parse_date(value)
        except ValueError:
            bad(name, f"{_show(value)} is not an ISO 8601 date (YYYY-MM-DD)")
    for i, early in enumerate(DATE_FIELDS):
        for late in DATE_FIELDS[i + 1:]:
            first, then = dates[early], dates[late]
            if first and then and then < first:
                bad(late, f"{then.isoformat()} is before {early} {first.isoformat()}")
    return dates


def _check_crowd(p: Json) -> str | None:
    """What is wrong with a line's crowd forecast (optional), or None."""
    ok = not isinstance(p, bool) and isinstance(p, (int, float)) and 0 <= p <= 1
    return None if p is None or ok else f"must be a probability in [0, 1] or null, not {_show(p)}"


CHECKS = {"id": _check_id, "question": _check_question, "y": _check_y, "crowd_p": _check_crowd}


def _question(row: JsonObject, where: str, problems: list[str]) -> ForecastQuestion | None:
    """The question of one parsed line, or None after adding its problems."""
    before = len(problems)

    def bad(name: str, what: str) -> None:
        problems.append(f"{where}: {name}: {what}")

    for name in REQUIRED:
        if name not in row:
            bad(name, "missing (the resolution, 0 or 1)" if name == "y" else "missing")
    for name, check in CHECKS.items():
        why = check(row[name]) if name in row else None
        if why:
            bad(name, why)
    texts = {}
    for name in TEXT_FIELDS:
        value = row.get(name)
        if value is not None and not isinstance(value, str):
            bad(name, f"must be a string, not {_type_name(value)}")
        texts[name] = value or ""
    dates = _dates(row, bad)
    if len(problems) > before:
        return None
    return ForecastQuestion(str(row["id"]), row["question"], int(row["y"]), texts["background"],
                            texts["resolution_criteria"], texts["option"], dates["open_date"], dates["close_date"],
                            dates["resolve_date"], False, {k: v for k, v in row.items() if k not in KNOWN_FIELDS})


def _row(data: bytes, lineno: int, where: str, problems: list[str]) -> JsonObject | None:
    """One line's JSON object, or None (blank, or a problem added)."""
    try:
        line = data.decode("utf-8-sig" if lineno == 1 else "utf-8")
    except UnicodeDecodeError as e:
        problems.append(f"{where}: json: not UTF-8 text (byte {e.start + 1})")
        return None
    if not line.strip():
        return None
    try:
        row = json.loads(line, object_pairs_hook=_no_duplicate_keys, parse_constant=_no_constant)
    except _DuplicateKey as e:
        problems.append(f"{where}: {e}: given twice on the line")
        return None
    except ValueError as e:
        msg = e.msg if isinstance(e, json.JSONDecodeError) else str(e)
        col = f" at column {e.colno}" if isinstance(e, json.JSONDecodeError) else ""
        problems.append(f"{where}: json: not valid JSON ({msg}{col})")
        return None
    if not isinstance(row, dict):
        problems.append(f"{where}: json: {_type_name(row)}, not an object")
        return None
    return row


def load_questions(path: Path | str) -> list[ForecastQuestion]:
    """Every question of a JSONL file, in file order; a QuestionsError listing every problem
    (``file:line: field: what is wrong``, file as given, lines from 1) when there is any."""
    name = str(path)
    try:
        raw = Path(path).read_bytes()
    except OSError as e:
        raise QuestionsError([f"{name}: file: cannot read it ({e.strerror or e})"]) from None
    problems: list[str] = []
    questions: list[ForecastQuestion] = []
    first_line: dict[str, int] = {}
    for lineno, data in enumerate(raw.split(b"\n"), start=1):
        where = f"{name}:{lineno}"
        row = _row(data, lineno, where, problems)
        if row is None:
            continue
        q = _question(row, where, problems)
        qid = str(row["id"]) if isinstance(row.get("id"), (str, int)) and not isinstance(row.get("id"), bool) else None
        if qid is not None and qid.strip():
            if qid in first_line:
                problems.append(f"{where}: id: duplicate id {_show(row['id'])} (first on line {first_line[qid]})")
                q = None
            else:
                first_line[qid] = lineno
        if q is not None:
            questions.append(q)
    if not problems and not questions:
        problems.append(f"{name}: file: holds no questions")
    if problems:
        raise QuestionsError(problems)
    return questions


# --------------------------------------------------------------------------- using
def summary(questions: Sequence[ForecastQuestion]) -> JsonObject:
    """n, the yes count, the base rate, the constant-predictor Brier (always predicting the base
    rate r scores r(1 − r)), the span of the dates given (ISO strings; None when no date) and,
    where questions carry crowd_p, how many and the crowd's Brier on them."""
    n = len(questions)
    if not n:
        raise ValueError("summary: no questions")
    n_yes = sum(q.y for q in questions)
    rate = n_yes / n
    dates = [d for q in questions for d in (q.open_date, q.close_date, q.resolve_date) if d]
    resolved = [q.resolve_date for q in questions if q.resolve_date]
    return {"n": n, "n_yes": n_yes, "base_rate": rate, "constant_brier": rate * (1 - rate),
            "first_date": min(dates).isoformat() if dates else None,
            "last_date": max(dates).isoformat() if dates else None,
            "n_resolve_date": len(resolved), **_crowd(questions)}


def _crowd(questions: Sequence[ForecastQuestion]) -> JsonObject:
    """crowd_n and crowd_brier over the questions with a crowd_p (nothing when none has one)."""
    with_crowd = [(float(q.extra["crowd_p"]), q.y) for q in questions if q.extra.get("crowd_p") is not None]
    if not with_crowd:
        return {}
    return {"crowd_n": len(with_crowd), "crowd_brier": sum((p - y) ** 2 for p, y in with_crowd) / len(with_crowd)}


def splits(questions: Sequence[ForecastQuestion], seed: int, n_train: int,
           n_heldout: int, draw: int = 0) -> tuple[list[ForecastQuestion], list[ForecastQuestion]]:
    """Disjoint train and held-out sets, the same for the same seed, draw and questions.

    The questions are put in qid order (so the file's line order does not matter) and permuted
    by ``numpy.random.default_rng([seed, SPLIT_STREAM])`` (a redraw k > 0: ``[seed, SPLIT_STREAM,
    k]``, so the training questions change with the held-out ones); the held-out set is the first
    ``n_heldout`` of the permutation and train the next ``n_train``. So the held-out set does not
    depend on ``n_train``, and a smaller train set is a subset of a larger one — as in the research log,
    which trained on a 2000-question subset and on the full 7956 of about 9k Metaculus-style
    questions, and tested both on the same 1000 held-out (seed 42).
    """
    import numpy as np

    for key, value in (("world.n_train", n_train), ("world.n_heldout", n_heldout)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{key}: must be a whole number >= 0, not {value!r}")
    if any(q.negated for q in questions):
        raise ValueError("splits: split the questions as asked; add negations to a split afterwards")
    if n_train + n_heldout > len(questions):
        raise ValueError(f"world.n_train + world.n_heldout: {n_train} + {n_heldout} = {n_train + n_heldout} "
                         f"questions asked for, the file holds {len(questions)}")
    ordered = sorted(questions, key=lambda q: q.qid)
    stream = [int(seed), SPLIT_STREAM] + ([int(draw)] if draw else [])
    order = np.random.default_rng(stream).permutation(len(ordered))
    heldout = [ordered[i] for i in order[:n_heldout]]
    train = [ordered[i] for i in order[n_heldout:n_heldout + n_train]]
    return train, heldout


def marked_splits(questions: Sequence[ForecastQuestion]) -> dict[str, list[ForecastQuestion]] | None:
    """The questions each line's ``split`` field puts in "train" and "heldout" (as an export
    writes them), in file order; None unless every line has one."""
    if not all(q.extra.get("split") in MARKED_SPLITS for q in questions):
        return None
    return {s: [q for q in questions if q.extra["split"] == s] for s in MARKED_SPLITS}


def config_problem(world_cfg: object) -> str | None:
    """Why ``world.questions_file`` cannot serve this world config (the first problem, with a count
    of the rest), or None: schema.RELATIONS checks it when a run is composed, before any job. A
    ``split`` field on every line (an export) is the split; else the file must hold n_train + n_heldout."""
    world = world_section(world_cfg)
    if world.questions_file is None:
        return "world.questions_file: not set (world=jsonl reads its questions from one)"
    try:
        questions = load_questions(world.questions_file)
    except QuestionsError as e:
        more = f" (and {len(e.problems) - 1} more: `martingale questions check FILE` lists them)" \
            if len(e.problems) > 1 else ""
        return e.problems[0] + more
    marked = marked_splits(questions)
    if marked is not None:
        have = {s: len(qs) for s, qs in marked.items()}
        want = {"train": int(world.n_train), "heldout": int(world.n_heldout)}
    else:
        have = {"all": len(questions)}
        want = {"all": int(world.n_train) + int(world.n_heldout)}
    short = [s for s in want if have[s] < want[s]]
    if short:
        return (f"{world.questions_file} holds {have} questions, fewer than world.n_train/"
                f"world.n_heldout ask for ({want})")
    return None


def write_questions(path: Path | str, rows: list[JsonObject]) -> None:
    """``rows`` as a questions file at ``path``, written only if it passes ``load_questions``
    (QuestionsError naming ``path`` otherwise; nothing is left behind)."""
    path = Path(path)
    check = path.with_name(f".{path.name}.check")
    write_jsonl(check, rows)
    try:
        load_questions(check)
    except QuestionsError as e:
        check.unlink(missing_ok=True)
        raise QuestionsError([line.replace(str(check), str(path)) for line in e.problems]) from None
    os.replace(check, path)
