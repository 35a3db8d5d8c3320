"""``runs.html``: a static page over runs.json — filter chips (model, state, claim), group by model
or parent, a row expands to its setup, key metrics with CIs, plots and provenance, a hover card per
run-id. The rows are embedded in the page, so it works opened from disk (no server, no network)."""
from __future__ import annotations

import html
import json
from dataclasses import asdict
from importlib import resources
from typing import Optional

from ..metrics import table_columns
from .runs_row import Row


def _embed(obj: object) -> str:
    """JSON safe inside <script>: sorted keys, and no '</' that could close the tag."""
    text = json.dumps(obj, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return text.replace("</", "<\\/").replace("<!--", "<\\!--")


def render(rows: list[Row], claims: dict[str, str], forest: Optional[str] = None) -> str:
    """The page; ``forest``: FINDINGS.md's forest plot beside it (a file name), shown under the table."""
    template = resources.files(__package__).joinpath("page.html").read_text(encoding="utf-8")
    figure = (f'<h2>Findings</h2>\n<p class="sub">Each finding of <a href="FINDINGS.md">FINDINGS.md</a>: '
              f'its seeds (dots), combined effect and 95% CI (bar), a null\'s margin (band), coloured by verdict.</p>\n'
              f'<img id="findings-forest" src="{html.escape(forest)}" alt="findings forest plot" style="max-width:100%">'
              if forest else "")
    columns = {key: asdict(c) for key, c in table_columns().items()}
    return (template.replace("__RUNS_JSON__", _embed(rows)).replace("__CLAIMS_JSON__", _embed(claims))
            .replace("__COLUMNS_JSON__", _embed(columns)).replace("<!--__FINDINGS__-->", figure))
