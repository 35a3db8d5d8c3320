"""The master runs table, regenerated from conf/runs and results/, never hand-edited:

- ``runs.json``  one row per run (rows.py), checked against runs.schema.json (schema.py);
- ``RUNS.md``    the research log's view: master table, claims → runs, Excluded (markdown.py);
- ``runs.html``  the interactive page over the same rows (page.py);
- ``FINDINGS.md`` the research log's findings the campaign tests (conf/findings.yaml), each with its
  number, CI, p, q and a verdict by the stated rules (findings.py), opening with
  ``findings-forest.png``, the forest plot of every finding's seeds and combined CI (also in runs.html).

Each file is rewritten only when its content changes; the same inputs give the same bytes. A row is
never dropped: a vanished run, or a done run's vanished results, fails with how to mark it invalid.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import yaml

from ..config.runs import RunTree
from ..store.files import write_bytes_if_changed, write_text_if_changed
from . import findings, forest, looks, markdown, page
from .rows import Row, TableError, build_table, check_no_corrupt, check_no_vanished, previous_states
from .schema import check_rows, schema_errors

TABLE = "runs.json"
OUTPUTS = (TABLE, "RUNS.md", "runs.html", "FINDINGS.md")
FOREST = forest.FOREST
CLAIMS = "conf/claims.yaml"


def load_claims(root: Path) -> dict[str, str]:
    """conf/claims.yaml: claim name → statement (absent file: no statements)."""
    path = root / CLAIMS
    if not path.exists():
        return {}
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as e:
        raise TableError(f"{CLAIMS}: not valid YAML ({str(e).splitlines()[0]})") from None
    if not isinstance(data, dict) or not all(isinstance(v, str) for v in data.values()):
        raise TableError(f"{CLAIMS}: expected a mapping claim → statement")
    return {str(k): v for k, v in data.items()}


def rows_json(rows: list[Row]) -> str:
    """runs.json's bytes: a JSON array with one row per line (sorted keys): diffs show the runs
    that changed, and the C encoder keeps a thousand rows fast. NaN is refused (rows use null)."""
    lines = [json.dumps(r, sort_keys=True, ensure_ascii=False, allow_nan=False) for r in rows]
    return "[\n" + ",\n".join(lines) + "\n]\n" if lines else "[]\n"


def write_table(root: Path | str = ".", tree: Optional[RunTree] = None) -> Path:
    """Regenerate runs.json, RUNS.md, runs.html and FINDINGS.md under root; returns runs.json's
    path. Nothing is written unless every check passes (no vanished row, no corrupt result,
    schema-valid rows, a valid conf/findings.yaml)."""
    root = Path(root)
    path = root / TABLE
    rows = build_table(root, tree)
    check_no_vanished(previous_states(path), rows)
    check_no_corrupt(root, rows)
    if errors := check_rows(rows):
        raise TableError(f"runs.json: schema: {errors[0]}")
    claims = load_claims(root)
    found, results, lookup = findings.evaluate(root, rows)
    picture = forest.draw(found or [], results)
    texts = {TABLE: rows_json(rows), "RUNS.md": markdown.render(rows, claims),
             "runs.html": page.render(rows, claims, FOREST if picture else None),
             "FINDINGS.md": findings.render_findings(found, results, claims, lookup, FOREST if picture else None,
                                                     looks.describe(looks.load_plan(root)))}
    if picture:
        write_bytes_if_changed(root / FOREST, picture)
    else:
        (root / FOREST).unlink(missing_ok=True)
    for name in OUTPUTS:
        write_text_if_changed(root / name, texts[name])
    return path


__all__ = ["OUTPUTS", "TABLE", "TableError", "build_table", "write_table", "load_claims", "schema_errors"]
