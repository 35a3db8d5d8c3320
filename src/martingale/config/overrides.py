"""A knob as Hydra parses it, and Hydra's errors as one line: what every config error says.

A knob is exactly one ``key=value`` override with a literal value: no sweep, deletion, addition,
package or interpolation (``${oc.env:SECRET}`` would put a secret into every file a run writes).
"""
from __future__ import annotations

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override


class ComposeError(ValueError):
    """A config that cannot be composed. ``key``: the key at fault; ``reason``: one line."""

    def __init__(self, key: str, reason: str):
        self.key = key
        self.reason = reason
        super().__init__(f"{key}: {reason}")


def _first_line(text: str) -> str:
    for line in str(text).splitlines():
        if line.strip():
            return line.strip()
    return ""


def one_line(exc: BaseException | str) -> str:
    """One line saying what is wrong, from an (often multi-line, chained) Hydra/OmegaConf error.

    Hydra wraps the useful OmegaConf message ("Value 'fast' ... could not be converted to Float",
    "Key 'foo' not in 'StageConfig'") in a generic one ("Error merging override ..."): take the
    innermost specific message, and say "unknown key" plainly.
    """
    if isinstance(exc, str):
        return _first_line(exc) or "error"
    chain: list[BaseException] = []
    x: BaseException | None = exc
    while x is not None and x not in chain:
        chain.append(x)
        x = x.__cause__ or x.__context__
    lines = [_first_line(str(c)) for c in chain]
    lines = [ln for ln in lines if ln and "$VALUE" not in ln]
    if not lines:
        return type(exc).__name__
    top = lines[0]
    detail = next((ln for ln in lines[1:] if ln != top), None)
    if detail and ("not in '" in detail or "not in struct" in detail):
        return f"unknown key ({detail})"
    if detail and (top.startswith("Error merging override") or top.startswith("Could not override")):
        return detail
    return top


_PARSER: OverridesParser | None = None


def _parser() -> OverridesParser:
    global _PARSER
    if _PARSER is None:
        _PARSER = OverridesParser.create()
    return _PARSER


def parse_override(text: str) -> Override:
    """Parse one Hydra override; reject sweeps, deletions and additions (a knob changes a key)."""
    if not isinstance(text, str):
        raise ComposeError("knob", f"not an override: expected key=value, got {text!r}")
    key_guess = text.split("=", 1)[0].strip().lstrip("~+") or text
    if "=" not in text:
        what = "a knob sets an existing key (no ~ deletion)" if text.startswith("~") else "expected key=value"
        raise ComposeError(key_guess, f"not an override: {what}")
    if "${" in text:   # ${oc.env:SECRET} would put a secret into every file the run writes
        raise ComposeError(key_guess, "interpolation '${…}' is not allowed: a knob value is a literal")
    try:
        ov = _parser().parse_override(text)
    except Exception as e:  # hydra's OverrideParseException
        raise ComposeError(key_guess, f"cannot parse override {text!r}: {one_line(e)}") from None
    key = ov.key_or_group
    if ov.is_sweep_override():
        raise ComposeError(key, f"a sweep ({text!r}) is several overrides; a knob is exactly one")
    if ov.is_delete() or ov.is_add() or ov.is_force_add():
        raise ComposeError(key, f"{text!r}: a knob sets an existing key (no ~, + or ++)")
    if ov.package:
        raise ComposeError(key, f"{text!r}: package overrides (@) are not supported")
    return ov
