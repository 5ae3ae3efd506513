"""Parsing of single values the way the reference plugin parses them.

Users bring their environment variables and flags from the reference plugin,
whose command-line library has its own rules: only a handful of spellings are
booleans, list values are split on commas with empty items kept, integers
accept base prefixes, durations use Go syntax. Matching those rules exactly is
what makes an unchanged DaemonSet spec behave the same here, so they live in
one place as small pure functions that raise `ValueError` with the text to
show the user.
"""

from __future__ import annotations

import json
import math
import re

__all__ = [
    "integral",
    "parse_bool",
    "parse_duration",
    "parse_int",
    "parse_seconds",
    "show",
    "split_list",
]

_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_FALSE = frozenset({"0", "f", "F", "FALSE", "false", "False"})


def parse_bool(text: str) -> bool:
    """Parse a boolean with the spellings Go's ``strconv.ParseBool`` accepts."""
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ValueError(f"could not parse {json.dumps(text)} as bool value")


def split_list(text: str) -> list[str]:
    """Split a comma list, trimming items and keeping empty ones.

    Empty items are kept on purpose: the reference keeps them, so
    ``DEVICE_LIST_STRATEGY=envvar,`` is rejected as an invalid empty strategy
    instead of silently meaning ``envvar``.
    """
    return [item.strip() for item in text.split(",")]


_OCTAL_LEGACY = re.compile(r"[+-]?0[0-7_]+")


def parse_int(text: str) -> int:
    """Parse an integer with base detection (``0x10``, ``0o17``, ``017``, ``0b1``)."""
    stripped = text.strip()
    try:
        if _OCTAL_LEGACY.fullmatch(stripped):
            # Go reads a leading zero as octal; Python's base-0 parsing refuses it.
            return int(stripped, 8)
        return int(stripped, 0)
    except ValueError:
        raise ValueError(f"invalid integer {json.dumps(text)}") from None


def parse_seconds(text: str) -> float:
    """Parse a non-negative number of seconds (``60``, ``0.5``)."""
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"invalid number of seconds {json.dumps(text)}") from None
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"invalid number of seconds {json.dumps(text)}: must be >= 0")
    return value


_UNITS_NS = {
    "ns": 1,
    "us": 1_000,
    "\u00b5s": 1_000,  # micro sign
    "\u03bcs": 1_000,  # Greek small letter mu
    "ms": 1_000_000,
    "s": 1_000_000_000,
    "m": 60_000_000_000,
    "h": 3_600_000_000_000,
}
_DURATION_PART = re.compile(r"(\d*(?:\.\d*)?)([^\d.]*)")


def parse_duration(text: str) -> float:
    """Parse a Go duration string (``1m30s``, ``300ms``) into seconds.

    ``infinite`` gives ``math.inf``, as in the reference's labeller.
    """
    if text == "infinite":
        return math.inf
    body = text
    sign = 1.0
    if body[:1] in ("+", "-"):
        sign = -1.0 if body[0] == "-" else 1.0
        body = body[1:]
    if body == "0":
        return 0.0
    if not body:
        raise ValueError(f"time: invalid duration {json.dumps(text)}")
    total_ns = 0.0
    position = 0
    while position < len(body):
        match = _DURATION_PART.match(body, position)
        if match is None or match.group(1) in ("", "."):
            raise ValueError(f"time: invalid duration {json.dumps(text)}")
        number, unit = match.group(1), match.group(2)
        if not unit:
            raise ValueError(f"time: missing unit in duration {json.dumps(text)}")
        if unit not in _UNITS_NS:
            raise ValueError(
                f"time: unknown unit {json.dumps(unit)} in duration {json.dumps(text)}"
            )
        total_ns += float(number) * _UNITS_NS[unit]
        position = match.end()
    return sign * total_ns / 1e9


def integral(value: object) -> int | None:
    """The value as an int when it is a whole number (YAML ``2`` or ``2.0``), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    return None


def show(value: object, *, limit: int = 80) -> str:
    """Render a value for an error message: JSON-like, bounded, one line."""
    try:
        text = json.dumps(value, default=str, ensure_ascii=False)
    except (TypeError, ValueError, RecursionError):
        text = repr(value)
    if len(text) > limit:
        text = text[: limit - 3] + "..."
    return text
