"""``martingale``: add, inspect, check and plan runs; regenerate the runs table; decide findings.
One module a group of commands (runs, results, store, stage, remote, questions), each registering on
``app`` (common.py, with what they share); this package only gathers them.

Keeps torch/transformers out of its import path: only config, plan and table code is loaded.
Every error is one line on stderr and exit status 1.
"""
from __future__ import annotations

from .common import app

__all__ = ["app"]

# Each module registers its commands on app, in the order `martingale --help` lists them.
# isort: off
from . import runs  # noqa: F401
from . import results  # noqa: F401
from . import store  # noqa: F401
from . import stage  # noqa: F401
from . import remote  # noqa: F401
from . import questions  # noqa: F401
# isort: on
