"""conf/findings.yaml, checked like the config: each finding of the research log the campaign tests —
its claim, where the log states it, the statement, the run, stage and metric that test it, the
expected direction (or a null's margin) and an optional why that names this build's numbers
({run:stage:metric}) instead of holding figures. Every problem is one line naming the file, the
finding and the key."""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import yaml

from ..core.jsonvalue import Json
from .rows import TableError

FINDINGS = "conf/findings.yaml"

EXPECTS = ("> 0", "< 0", "= 0")

EFFECTS = ("effect.ms", "effect.brier")

COUNTS = ("counts.beats_natural_base", "counts.full_deflation", "counts.beats_constant", "counts.beats_start",
          "counts.beats_parent", "counts.beats_crowd")

COUNT_EXPECTS = ("all", "none", "some")     # of a seed count k/n: k = n, k = 0, 0 < k < n

KEYS = ("claim", "log", "statement", "test")

OPTIONAL_KEYS = ("why",)   # why the result is what it is: FINDINGS.md prints it under the result

TEST_KEYS = ("run", "stage", "metric", "expect", "margin")
# A figure in a "why" (a number standing alone: not part of a name like s2, C1 or A-on-D-5seeds):
# the build computes its numbers, so a why names them as {run:stage:metric} for FINDINGS.md to fill.
_FIGURE = re.compile(r"(?<![\w.\-])[+\-−]?\d+(?:[.,]\d+)*%?(?![\w])")

_PLACEHOLDER = re.compile(r"\{([A-Za-z0-9][A-Za-z0-9_.-]*):(s[0-9]+|final):([a-z][a-z0-9_.]*)\}")

_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*\Z")

_METRIC = re.compile(r"[a-z][a-z0-9_]*\Z")

_STAGE = re.compile(r"(s[0-9]+|final)\Z")


@dataclass(frozen=True)
class Finding:
    """One finding of conf/findings.yaml, checked."""
    id: str
    claim: str
    log: str
    statement: str
    run: str
    stage: str
    metric: str
    expect: str
    why: Optional[str] = None
    margin: Optional[float] = None           # a null's: |effect| < margin is "no effect"


def _finding(fid: str, spec: Json, run_ids: set[str]) -> Finding:
    """One entry of the file, checked: every error is one line naming the file, finding and key."""
    def bad(key: str, why: str) -> TableError:
        return TableError(f"{FINDINGS}: {fid}: {key}: {why}")

    if not _ID.match(fid):
        raise TableError(f"{FINDINGS}: {fid!r}: a finding id is a short name (letters, digits, - _ .)")
    _check_entry(spec, bad)
    test = spec["test"]
    run, stage, metric = str(test["run"]), str(test.get("stage", "final")), str(test["metric"])
    if run not in run_ids:
        raise bad("test.run", f"unknown run-id {run!r} (no conf/runs/{run}.yaml)")
    if not _STAGE.match(stage):
        raise bad("test.stage", f"{stage!r} is not a stage (s0, s1, s2 … or final)")
    expect = _expectation(metric, test["expect"], bad)
    margin = _margin(test, expect, bad)
    why = " ".join(spec["why"].split()) if "why" in spec else None
    if why is not None:
        _check_why(why, run_ids, bad)
    return Finding(fid, spec["claim"].strip(), spec["log"].strip(), " ".join(spec["statement"].split()),
                   run, stage, metric, expect, why, margin)


def _check_entry(spec: Json, bad) -> None:
    """The entry's keys and their types: a mapping with KEYS (and OPTIONAL_KEYS), ``test`` with TEST_KEYS."""
    if not isinstance(spec, dict):
        raise bad("entry", "expected a mapping with " + ", ".join(KEYS))
    for key in KEYS:
        if key not in spec:
            raise bad(key, "missing")
    if extra := sorted(set(map(str, spec)) - set(KEYS) - set(OPTIONAL_KEYS)):
        raise bad(extra[0], "unknown key (expected " + ", ".join(KEYS) + "; optional " + ", ".join(OPTIONAL_KEYS) + ")")
    for key in ("claim", "log", "statement") + tuple(k for k in OPTIONAL_KEYS if k in spec):
        if not isinstance(spec[key], str) or not spec[key].strip():
            raise bad(key, "expected a non-empty string")
    test = spec["test"]
    if not isinstance(test, dict):
        raise bad("test", "expected a mapping {run, stage, metric, expect}")
    for key in ("run", "metric", "expect"):
        if key not in test:
            raise bad(f"test.{key}", "missing")
    if extra := sorted(set(map(str, test)) - set(TEST_KEYS)):
        raise bad(f"test.{extra[0]}", "unknown key (expected " + ", ".join(TEST_KEYS) + ")")


def _expectation(metric: str, given: Json, bad) -> str:
    """The metric checked and its expectation normalised: "> 0", "< 0", "= 0", or a seed count's."""
    if metric.startswith("counts."):
        if metric not in COUNTS:
            raise bad("test.metric", f"{metric!r} is not a seed count (" + ", ".join(COUNTS) + ")")
        expect = str(given).strip()
        if expect not in COUNT_EXPECTS:
            raise bad("test.expect", f"{given!r}: a seed count expects one of " + ", ".join(COUNT_EXPECTS))
        return expect
    if not (metric in EFFECTS or _METRIC.match(metric)) or metric.endswith("_ci"):
        raise bad("test.metric", f"{metric!r} is not a metric name (e.g. ms, brier, delta_brier, "
                                 "effect.ms, effect.brier, counts.beats_natural_base; its CI <metric>_ci is read beside it)")
    expect = str(given).replace(" ", "")
    if expect not in [e.replace(" ", "") for e in EXPECTS]:
        raise bad("test.expect", f"{given!r} is not one of " + ", ".join(f"'{e}'" for e in EXPECTS))
    return f"{expect[0]} 0"


def _margin(test: dict, expect: str, bad) -> Optional[float]:
    """A null's margin: required for expect "= 0", a positive number; refused elsewhere."""
    if expect != "= 0":
        if "margin" in test:
            raise bad("test.margin", "only a null (expect \"= 0\") has a margin")
        return None
    value = test.get("margin")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise bad("test.margin", f"{value!r}: a null needs its margin, a positive number (|effect| < margin "
                                 "is no effect)")
    return float(value)


def _check_why(why: str, run_ids: set[str], bad) -> None:
    """A why names what the build computes ({run:stage:metric}, filled in by FINDINGS.md); it
    holds no figure of its own, which would be another build's number."""
    for run, _, _ in _PLACEHOLDER.findall(why):
        if run not in run_ids:
            raise bad("why", f"{{{run}:…}} names no run of conf/runs")
    figure = _FIGURE.search(_PLACEHOLDER.sub("", why))
    if figure:
        raise bad("why", f"holds the figure {figure.group(0)!r}: name the metric as {{run:stage:metric}} "
                         "(FINDINGS.md fills in this build's value) or leave the number out")


def load(root: Path, run_ids: set[str]) -> Optional[list[Finding]]:
    """conf/findings.yaml's findings sorted by claim and id; None when there is no such file."""
    path = Path(root) / FINDINGS
    if not path.exists():
        return None
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as e:
        raise TableError(f"{FINDINGS}: not valid YAML ({str(e).splitlines()[0]})") from None
    if data is None:
        return []
    if not isinstance(data, dict):
        raise TableError(f"{FINDINGS}: expected a mapping finding-id → {{claim, log, statement, test}}")
    return sorted((_finding(str(k), v, run_ids) for k, v in data.items()), key=lambda f: (f.claim, f.id))


def fill_why(why: str, lookup) -> str:
    """A why's {run:stage:metric} placeholders with this build's values (``lookup(run, stage,
    metric)`` → text), "–" where there is none yet."""
    return _PLACEHOLDER.sub(lambda m: lookup(m.group(1), m.group(2), m.group(3)) or "–", why)
