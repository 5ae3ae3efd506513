"""One flag as data (`FlagSpec`), and how its text becomes a value.

Every entry point (the plugin, ``gpu-feature-discovery``,
``mps-control-daemon``) declares its flags as a table of `FlagSpec`; the
command-line parser, the environment reader and the ``--help`` text are all
generated from such a table by `settings.command_line.FlagSet`. A flag the
binaries share is literally the same spec object, so it cannot be spelt,
parsed or documented differently in two places.

The value rules are the reference's flag library's (see `settings.values`):
booleans as Go's ``ParseBool``, comma lists with empty items kept, integers
with base prefixes, durations in Go syntax.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Final

from settings.values import parse_bool, parse_duration, parse_int, parse_seconds, split_list

__all__ = ["NO_DEFAULT", "FlagSpec", "Kind", "SetValue", "convert"]


class Kind(StrEnum):
    """How a flag's text (command line or environment) turns into a value."""

    STRING = "string"
    BOOL = "bool"
    LIST = "list"  # comma-separated strings
    INT_LIST = "int-list"  # comma-separated integers
    INT = "int"
    FLOAT = "float"
    SECONDS = "seconds"  # a number of seconds >= 0
    POSITIVE_SECONDS = "positive-seconds"  # a number of seconds > 0
    DURATION = "duration"  # Go duration text (``60s``, ``1m``) or ``infinite``; >= 0

    @property
    def numeric(self) -> bool:
        """An empty environment variable leaves a numeric flag unset (the reference's rule)."""
        return self not in (Kind.STRING, Kind.BOOL, Kind.LIST)

    @property
    def repeatable(self) -> bool:
        """Repeating a list flag on the command line appends to it."""
        return self in (Kind.LIST, Kind.INT_LIST)


class _NoDefault:
    def __repr__(self) -> str:
        return "NO_DEFAULT"


NO_DEFAULT: Final = _NoDefault()


@dataclass(frozen=True)
class FlagSpec:
    """One flag: its names, where else it can be set, and what it means.

    ``names`` are the spellings without dashes (the first is the one used in
    messages); an empty tuple makes an environment-only setting. ``default``
    is the value when nothing sets it, or `NO_DEFAULT` where a model owns the
    default (the plugin's `settings.flags.Flags`). ``file_key`` is where the
    v1 config file holds the same setting, if it does. ``reference`` is false
    for the settings this project added.
    """

    field: str
    names: tuple[str, ...]
    env: tuple[str, ...]
    kind: Kind
    help: str
    file_key: str | None = None
    choices: tuple[str, ...] = ()
    reference: bool = True
    default: Any = NO_DEFAULT

    @property
    def primary(self) -> str:
        """The flag as ``--name`` (or its variable, for an environment-only setting)."""
        return f"--{self.names[0]}" if self.names else self.env[0]


@dataclass(frozen=True)
class SetValue:
    """A value given explicitly, and where: ``--mig-strategy`` on the ``command line``."""

    value: Any
    name: str  # the spelling used: ``--output``, ``-o`` or ``GFD_OUTPUT_FILE``
    text: str  # as written (repeated list flags: the items joined by commas)
    origin: str  # ``command line`` or ``environment``


def _number(text: str, kind: type[int] | type[float], what: str) -> Any:
    try:
        return int(text, 0) if kind is int else float(text)
    except ValueError:
        raise ValueError(f"invalid {what} {text!r}") from None


def _positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not value > 0 or not math.isfinite(value):
        raise ValueError(f"invalid value {text!r} (expected a number of seconds > 0)")
    return value


def _duration(text: str) -> float:
    seconds = parse_duration(text)
    if seconds < 0:
        raise ValueError(f"negative duration {text!r}")
    return seconds


def convert(spec: FlagSpec, text: str) -> Any:
    """Turn the text of one flag occurrence into its value; ValueError if malformed."""
    match spec.kind:
        case Kind.BOOL:
            return parse_bool(text)
        case Kind.LIST:
            return split_list(text)
        case Kind.INT_LIST:
            return [parse_int(item) for item in split_list(text)]
        case Kind.INT:
            return _number(text, int, "integer")
        case Kind.FLOAT:
            return _number(text, float, "number")
        case Kind.SECONDS:
            return parse_seconds(text)
        case Kind.POSITIVE_SECONDS:
            return _positive_seconds(text)
        case Kind.DURATION:
            return _duration(text)
        case Kind.STRING:
            return text
