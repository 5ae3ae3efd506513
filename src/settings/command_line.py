"""Turning command-line arguments and environment text into flag values.

The reference's flag library has conventions that deployed DaemonSets depend
on, and which no general-purpose parser reproduces: every flag has an
environment variable (sometimes two, tried in order), booleans take
``--flag`` or ``--flag=false``, list flags split on commas and may repeat,
aliases are full synonyms but two spellings of one flag together are an
error, and an environment variable that exists counts as set even when empty
(an empty boolean means false). The parser here is generated from
`settings.flag_table` and returns plain values keyed by field name; it
decides nothing about precedence, which the settings sources own.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

from settings.errors import ConfigError
from settings.flag_table import FLAGS, FlagSpec, Kind
from settings.values import parse_bool, parse_int, parse_seconds, split_list

__all__ = [
    "HELP_OPTIONS",
    "SetValue",
    "convert",
    "parse_command_line",
    "read_environment",
    "wants_help",
]

HELP_OPTIONS = frozenset({"-h", "--help", "-help"})


@dataclass(frozen=True)
class SetValue:
    """A flag value and the exact name it was given under (for messages)."""

    value: Any
    name: str


def convert(spec: FlagSpec, text: str) -> Any:
    """Turn the text of one flag occurrence into its value; ValueError if malformed."""
    match spec.kind:
        case Kind.BOOL:
            return parse_bool(text)
        case Kind.LIST:
            return split_list(text)
        case Kind.INT_LIST:
            return [parse_int(item) for item in split_list(text)]
        case Kind.SECONDS:
            return parse_seconds(text)
        case Kind.STRING:
            return text


def wants_help(argv: Sequence[str]) -> bool:
    """Whether the arguments ask for the help text (before any ``--``)."""
    for argument in argv:
        if argument == "--":
            return False
        if argument in HELP_OPTIONS:
            return True
    return False


class FlagParser(argparse.ArgumentParser):
    """argparse that reports a bad command line as a one-line ConfigError."""

    def error(self, message: str) -> NoReturn:
        raise ConfigError(message, origin="command line")


class RecordAction(argparse.Action):
    """Collect (option used, text) pairs so aliases and repeats can be judged later."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        seen: list[tuple[str, str]] = list(getattr(namespace, self.dest, None) or [])
        seen.append((option_string or "", "true" if values is None else str(values)))
        setattr(namespace, self.dest, seen)


def _build_parser() -> argparse.ArgumentParser:
    parser = FlagParser(add_help=False, allow_abbrev=False, exit_on_error=False)
    for spec in FLAGS:
        options = [form for name in spec.names for form in (f"--{name}", f"-{name}")]
        if spec.kind is Kind.BOOL:
            # A bare boolean flag means true; ``--flag=false`` and ``--flag false`` set it.
            parser.add_argument(*options, dest=spec.field, action=RecordAction, nargs="?")
        else:
            parser.add_argument(*options, dest=spec.field, action=RecordAction)
    return parser


_PARSER = _build_parser()


def _long(option: str) -> str:
    return "--" + option.lstrip("-")


def parse_command_line(argv: Sequence[str]) -> dict[str, SetValue]:
    """Values of the flags given on the command line, by field name."""
    try:
        namespace, extras = _PARSER.parse_known_args(list(argv))
    except argparse.ArgumentError as error:
        name = _long(error.argument_name.split("/")[0]) if error.argument_name else ""
        raise ConfigError(error.message, origin="command line", path=name) from None
    if extras:
        first = extras[0]
        if first.startswith("-") and first != "--":
            option = first.split("=", 1)[0]
            raise ConfigError("flag provided but not defined", origin="command line", path=option)
        remaining = [arg for arg in extras if arg != "--"]
        if remaining:
            raise ConfigError(f"unexpected argument {remaining[0]!r}", origin="command line")
    result: dict[str, SetValue] = {}
    for spec in FLAGS:
        seen: list[tuple[str, str]] | None = getattr(namespace, spec.field, None)
        if not seen:
            continue
        forms = list(dict.fromkeys(_long(option) for option, _ in seen))
        if len(forms) > 1:
            raise ConfigError(
                f"Cannot use two forms of the same flag: {forms[0][2:]} {forms[1][2:]}",
                origin="command line",
                path=forms[0],
            )
        values = []
        for _, text in seen:
            try:
                values.append(convert(spec, text))
            except ValueError as error:
                raise ConfigError(str(error), origin="command line", path=forms[0]) from None
        if spec.kind in (Kind.LIST, Kind.INT_LIST):
            merged = [item for value in values for item in value]
            result[spec.field] = SetValue(merged, forms[0])
        else:
            result[spec.field] = SetValue(values[-1], forms[0])
    return result


def read_environment(environ: Mapping[str, str]) -> dict[str, SetValue]:
    """Values of the flags set through environment variables, by field name.

    The first listed variable that exists wins. Existing-but-empty counts as
    set (an empty boolean is false, an empty string is the empty string),
    except for numeric flags, where the reference ignores an empty value.
    """
    result: dict[str, SetValue] = {}
    for spec in FLAGS:
        for name in spec.env:
            if name not in environ:
                continue
            text = environ[name]
            if text == "" and spec.kind is Kind.BOOL:
                result[spec.field] = SetValue(False, name)
            elif text == "" and spec.kind in (Kind.INT_LIST, Kind.SECONDS):
                pass
            else:
                try:
                    result[spec.field] = SetValue(convert(spec, text), name)
                except ValueError as error:
                    raise ConfigError(
                        f"{error} for flag {spec.names[0]}", origin="environment", path=name
                    ) from None
            break
    return result
