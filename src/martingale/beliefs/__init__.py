"""Reading beliefs: the one ``P = X`` parser, and the prior/posterior readers (elicit modes)."""
from .parse import parse_p, parse_totals

__all__ = ["parse_p", "parse_totals"]
