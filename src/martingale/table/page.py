"""``runs.html``: a static page over runs.json — filter chips (model, state, claim), group by model
or parent, a row expands to its setup, key metrics with CIs, plots and provenance, a hover card per
run-id. The rows are embedded in the page, so it works opened from disk (no server, no network)."""
from __future__ import annotations

import json
from importlib import resources
from typing import Any


def _embed(obj: Any) -> str:
    """JSON safe inside <script>: sorted keys, and no '</' that could close the tag."""
    text = json.dumps(obj, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return text.replace("</", "<\\/").replace("<!--", "<\\!--")


def render(rows: list[dict], claims: dict[str, str]) -> str:
    template = resources.files(__package__).joinpath("page.html").read_text(encoding="utf-8")
    return template.replace("__RUNS_JSON__", _embed(rows)).replace("__CLAIMS_JSON__", _embed(claims))
