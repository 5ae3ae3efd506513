"""One flag as data: declared on a settings field (`Flag`), read back as a `FlagSpec`.

A flag of the plugin is declared once, as an `Annotated` marker on the field
that holds its value (`settings.flags.Flags`, and the ``health`` and labeller
sections of the config file in `settings.sections`)::

    mig_strategy: Annotated[
        MigStrategy, Flag(("mig-strategy",), ("MIG_STRATEGY",), "how MIG ...", "flags.migStrategy")
    ] = MigStrategy.NONE

`flag_specs` reads the markers back and completes each with what the field
already says (its name, type, default and allowed values) into a `FlagSpec`,
from which `settings.command_line.FlagSet` makes the parser, the environment
reader and the help text. Flags that are no setting of the plugin (the
labeller's Kubernetes options, the MPS daemon's own) are written as complete
`FlagSpec`s directly.

The value rules are the reference's flag library's (see `settings.values`):
booleans as Go's ``ParseBool``, comma lists with empty items kept, integers
with base prefixes, durations in Go syntax.
"""

from __future__ import annotations

import json
import math
import typing
from dataclasses import dataclass
from enum import Enum, StrEnum
from typing import Any

from pydantic import BaseModel

from settings.values import parse_bool, parse_duration, parse_int, parse_seconds, split_list

__all__ = ["Flag", "FlagSpec", "Kind", "SetValue", "convert", "flag_specs", "show_default"]


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


@dataclass(frozen=True)
class Flag:
    """Marks a settings field as a flag: its spellings, variables, help and file key.

    ``names`` are the spellings without dashes (the first is the one used in
    messages); an empty tuple makes an environment-only setting. ``kind``
    is taken from the field's type unless given; ``field`` names the flag
    where it differs from the attribute (``health_quiet_period`` for
    ``health.quiet_period``). ``reference`` is false for the flags this
    project added; ``shown_default`` is what ``--help`` shows for a default
    that is worked out rather than fixed.
    """

    names: tuple[str, ...]
    env: tuple[str, ...]
    help: str
    file_key: str | None = None
    kind: Kind | None = None
    reference: bool = True
    field: str | None = None
    shown_default: str | None = None


@dataclass(frozen=True)
class FlagSpec:
    """One flag, complete: what `Flag` says plus the field's name, type, default and choices.

    ``path`` is where a settings flag's value goes in the effective config
    (``("flags", "mig_strategy")``, ``("health", "quietPeriod")``); it is
    empty for the flags of other binaries.
    """

    field: str
    names: tuple[str, ...]
    env: tuple[str, ...]
    kind: Kind
    help: str
    file_key: str | None = None
    choices: tuple[str, ...] = ()
    reference: bool = True
    default: Any = None
    shown_default: str | None = None
    path: tuple[str, ...] = ()

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


def _enum(annotation: Any) -> type[Enum] | None:
    item = typing.get_args(annotation)[0] if typing.get_origin(annotation) is tuple else annotation
    return item if isinstance(item, type) and issubclass(item, Enum) else None


def _kind(annotation: Any) -> Kind:
    if typing.get_origin(annotation) is tuple:
        return Kind.INT_LIST if typing.get_args(annotation)[0] is int else Kind.LIST
    return {bool: Kind.BOOL, int: Kind.INT, float: Kind.SECONDS}.get(annotation, Kind.STRING)


def flag_specs(model: type[BaseModel], section: str) -> tuple[FlagSpec, ...]:
    """The flags declared on ``model``'s fields, whose values live under ``section``."""
    specs = []
    for name, info in model.model_fields.items():
        flag = next((item for item in info.metadata if isinstance(item, Flag)), None)
        if flag is None:
            continue
        enum = _enum(info.annotation)
        specs.append(
            FlagSpec(
                field=flag.field or name,
                names=flag.names,
                env=flag.env,
                kind=flag.kind or _kind(info.annotation),
                help=flag.help,
                file_key=flag.file_key,
                choices=tuple(str(member.value) for member in enum) if enum else (),
                reference=flag.reference,
                default=info.get_default(call_default_factory=True),
                shown_default=flag.shown_default,
                path=(section, info.alias or name),
            )
        )
    return tuple(specs)


def show_default(spec: FlagSpec) -> str:
    """The default as users would write it (``"none"``, ``true``, ``"envvar"``, ``60s``)."""
    value = spec.default
    if spec.shown_default is not None:
        return spec.shown_default
    if value is None or value == ():
        return "(none)"
    if isinstance(value, bool):
        return "true" if value else "false"
    if spec.kind is Kind.DURATION:
        return "infinite" if value == math.inf else f"{value:g}s"
    if isinstance(value, tuple | list):
        return json.dumps(",".join(str(item) for item in value))
    if isinstance(value, int | float):
        return f"{value:g}"
    return json.dumps(str(value))


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
