"""`FlagSet`: one table of flags in, parser, environment reader and help out.

The reference's flag library has conventions that deployed DaemonSets depend
on, and which no general-purpose parser reproduces: every flag has an
environment variable (sometimes two, tried in order), ``--name=value``,
``--name value`` and ``-name value`` all work, a flag that takes a value
takes the next argument even when it starts with a dash (``--sleep-interval
-1s``), booleans take ``--flag`` or ``--flag=false``, list flags split on
commas and may repeat, aliases are full synonyms but two spellings of one
flag together are an error, and an environment variable that exists counts
as set even when empty (an empty boolean means false; an empty number is
ignored). Each binary builds its `FlagSet` from its `FlagSpec`s (for the
plugin's own flags, read off the settings models); the set returns the values
given explicitly, keyed by field name, the command line over the environment
as in the reference's library, and leaves the file and the defaults to the
settings loader.

``-h``/``--help`` and ``-v``/``--version`` are answered by the entry points
(`wants_help`, `wants_version`, `FlagSet.help_text`, `FlagSet.version_text`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from settings.errors import ConfigError
from settings.flag_spec import FlagSpec, Kind, SetValue, convert, show_default

__all__ = [
    "HELP_OPTIONS",
    "VERSION_OPTIONS",
    "FlagSet",
    "SetValue",
    "wants_help",
    "wants_version",
]

HELP_OPTIONS = frozenset({"-h", "--help", "-help"})
VERSION_OPTIONS = frozenset({"-v", "--version", "-version"})

COMMAND_LINE = "command line"
ENVIRONMENT = "environment"


def _asks(argv: Sequence[str], options: frozenset[str]) -> bool:
    for argument in argv:
        if argument == "--":
            return False
        if argument in options:
            return True
    return False


def wants_help(argv: Sequence[str]) -> bool:
    """Whether the arguments ask for the help text (before any ``--``)."""
    return _asks(argv, HELP_OPTIONS)


def wants_version(argv: Sequence[str]) -> bool:
    """Whether the arguments ask for the version (before any ``--``)."""
    return _asks(argv, VERSION_OPTIONS)


def _dashed(name: str) -> str:
    return f"-{name}" if len(name) == 1 else f"--{name}"


class FlagSet:
    """The flags of one program, as a parser, an environment reader and a help text."""

    def __init__(self, program: str, specs: Iterable[FlagSpec], *, summary: str) -> None:
        self.program = program
        self.specs: tuple[FlagSpec, ...] = tuple(specs)
        self.summary = summary
        self.by_field: dict[str, FlagSpec] = {}
        self._by_name: dict[str, FlagSpec] = {}
        for spec in self.specs:
            if spec.field in self.by_field:
                raise ValueError(f"{program}: two flags for field {spec.field}")
            self.by_field[spec.field] = spec
            for name in spec.names:
                if name in self._by_name:
                    raise ValueError(f"{program}: flag --{name} declared twice")
                self._by_name[name] = spec

    # -- parsing -------------------------------------------------------------

    def parse_command_line(self, argv: Sequence[str]) -> dict[str, SetValue]:
        """Values of the flags given on the command line, by field name.

        A bare boolean flag followed by an argument that is no flag takes it as
        its value (``--flag false``).

        Raises:
            ConfigError: an unknown flag, a stray argument, two spellings of
                one flag, or a malformed value (naming the flag).
        """
        seen: dict[str, list[tuple[str, str]]] = {}
        index = 0
        while index < len(argv):
            argument, index = argv[index], index + 1
            if argument == "--" and index < len(argv):
                argument = argv[index]  # whatever follows is no flag
            elif argument == "--":
                break
            elif argument.startswith("-") and argument != "-":
                body = argument[2:] if argument.startswith("--") else argument[1:]
                name, equals, text = body.partition("=")
                spec = self._by_name.get(name)
                if spec is None:
                    option = argument.partition("=")[0]
                    raise ConfigError(
                        "flag provided but not defined", origin=COMMAND_LINE, path=option
                    )
                if not equals:
                    takes_next = index < len(argv) and (
                        spec.kind is not Kind.BOOL or not argv[index].startswith("-")
                    )
                    if spec.kind is not Kind.BOOL and not takes_next:
                        raise ConfigError(
                            "expected one argument", origin=COMMAND_LINE, path=f"--{name}"
                        )
                    text = argv[index] if takes_next else "true"
                    index += 1 if takes_next else 0
                seen.setdefault(spec.field, []).append((f"--{name}", text))
                continue
            raise ConfigError(f"unexpected argument {argument!r}", origin=COMMAND_LINE)
        return {field: self._judge(self.by_field[field], seen[field]) for field in seen}

    def _judge(self, spec: FlagSpec, seen: list[tuple[str, str]]) -> SetValue:
        forms = list(dict.fromkeys(option for option, _ in seen))
        if len(forms) > 1:
            raise ConfigError(
                f"Cannot use two forms of the same flag: {forms[0][2:]} {forms[1][2:]}",
                origin=COMMAND_LINE,
                path=forms[0],
            )
        values = []
        for _, text in seen:
            try:
                values.append(convert(spec, text))
            except ValueError as error:
                raise ConfigError(str(error), origin=COMMAND_LINE, path=forms[0]) from None
        if spec.kind.repeatable:
            merged = [item for value in values for item in value]
            return SetValue(merged, forms[0], ",".join(text for _, text in seen), COMMAND_LINE)
        return SetValue(values[-1], forms[0], seen[-1][1], COMMAND_LINE)

    def read_environment(self, environ: Mapping[str, str]) -> dict[str, SetValue]:
        """Values of the flags set through environment variables, by field name.

        Raises:
            ConfigError: a malformed value, naming the variable and the flag.
        """
        result: dict[str, SetValue] = {}
        for spec in self.specs:
            name = next((candidate for candidate in spec.env if candidate in environ), None)
            if name is None:
                continue
            text = environ[name]
            if text == "" and spec.kind is Kind.BOOL:
                result[spec.field] = SetValue(False, name, "false", ENVIRONMENT)
            elif text == "" and spec.kind.numeric:
                continue
            else:
                try:
                    result[spec.field] = SetValue(convert(spec, text), name, text, ENVIRONMENT)
                except ValueError as error:
                    flag = spec.names[0] if spec.names else spec.field
                    raise ConfigError(
                        f"{error} for flag {flag}", origin=ENVIRONMENT, path=name
                    ) from None
        return result

    def explicit(self, argv: Sequence[str], environ: Mapping[str, str]) -> dict[str, SetValue]:
        """Every flag set explicitly, the command line over the environment."""
        values = self.read_environment(environ)
        values.update(self.parse_command_line(argv))
        return values

    # -- help and version -----------------------------------------------------

    def forms(self, spec: FlagSpec) -> str:
        placeholder = "" if spec.kind is Kind.BOOL else " value"
        return ", ".join(f"{_dashed(name)}{placeholder}" for name in spec.names)

    def help_text(self, *, preamble: Sequence[str] = ()) -> str:
        """Usage text listing every flag, its environment variables, default and file key.

        ``preamble`` lines come between the summary and the flags.
        """
        lines = [f"Usage: {self.program} [flags]", "", self.summary, ""]
        if preamble:
            lines += [*preamble, ""]
        lines.append("Flags:")
        for spec in self.specs:
            lines.append(f"  {self.forms(spec) or '(environment only)'}")
            lines.append(f"      {spec.help}")
            if spec.choices:
                lines.append(f"      one of: {', '.join(spec.choices)}")
            details = [f"default: {show_default(spec)}"]
            details.append("env: " + ", ".join(f"${name}" for name in spec.env))
            if spec.file_key:
                details.append(f"file: {spec.file_key}")
            lines.append("      " + "   ".join(details))
        lines += [
            "  -h, --help",
            "      show this help and exit",
            "  -v, --version",
            "      print the version and exit",
            "",
        ]
        return "\n".join(lines)

    def version_text(self, version: str) -> str:
        return f"{self.program} version {version}"
