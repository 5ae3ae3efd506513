"""`load_config`: command line, environment and file in, `EffectiveConfig` out.

The one entry point for building a configuration, at start-up and on every
reload. The flag library reads what is given explicitly (`PLUGIN_FLAGS`);
pydantic-settings puts it above the config file and the defaults and
validates everything once (`settings.effective`). Anything wrong with any
input comes out as a `ConfigError` naming where each bad value came from,
every problem found a line of it; nothing else escapes, so a caller can keep
the config it has when a new one is bad.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping, Sequence
from typing import Any

from settings.checks import VALUE_PROBLEM
from settings.choices import MigStrategy, SharingStrategy
from settings.command_line import SetValue, wants_help
from settings.effective import EffectiveConfig, Rejected
from settings.errors import ConfigError, HelpRequested
from settings.file_reader import dotted, known_keys
from settings.flags import PLUGIN_FLAGS, SETTINGS_SPECS
from settings.help import cli_help
from settings.sharing import check_sharing
from settings.values import show

__all__ = ["load_config"]

_SPECS = {spec.field: spec for spec in SETTINGS_SPECS}
_SPECS_BY_PATH = {spec.path: spec for spec in SETTINGS_SPECS}
_ORIGINS = {"command line": "flag", "environment": "env"}


def load_config(
    argv: Sequence[str] | None = None,
    env: Mapping[str, str] | None = None,
    *,
    config_file: str | None = None,
    given: Mapping[str, SetValue] | None = None,
) -> EffectiveConfig:
    """Build the effective configuration.

    ``argv`` are the arguments without the program name; ``env`` defaults to
    the process environment. ``config_file`` replaces the file named by
    ``--config-file``/``CONFIG_FILE`` (per-node selection); ``""`` means
    explicitly no file. ``given`` are values another binary already parsed
    for the settings (under its own names, its own flags under
    ``flags.gfd`` too); they stand above the environment, like the command
    line, which must then be empty.

    Raises:
        ConfigError: every invalid input, one problem per line.
        HelpRequested: the arguments ask for ``--help``.
    """
    arguments = list(argv or ())
    if wants_help(arguments):
        raise HelpRequested(cli_help())
    attempt = _Attempt(os.environ if env is None else env)
    try:
        return attempt.load(arguments, config_file, given or {})
    except ConfigError as error:
        raise error.with_fail_on_init_error(attempt.fail_on_init_error(error)) from None


class _Attempt:
    """One load, and what it learnt of ``failOnInitError`` before anything failed."""

    def __init__(self, environ: Mapping[str, str]) -> None:
        self.environ = environ
        self.explicit: dict[str, SetValue] | None = None
        self.path = ""
        self.fail: bool | None = None

    def load(
        self, arguments: list[str], config_file: str | None, given: Mapping[str, SetValue]
    ) -> EffectiveConfig:
        command_line = PLUGIN_FLAGS.parse_command_line(arguments)
        explicit = {**PLUGIN_FLAGS.read_environment(self.environ), **given, **command_line}
        self.explicit = explicit
        self.fail = _boolean(explicit.get("fail_on_init_error"))
        named = explicit.get("config_file")
        self.path = config_file if config_file is not None else str(named.value if named else "")
        try:
            config = _build(explicit, self.path)
        except Rejected as rejected:
            flags = rejected.data.get("flags")
            if self.fail is None and isinstance(flags, dict):
                self.fail = _boolean(flags.get("fail_on_init_error"))
            raise _locate(rejected, explicit) from None
        except RecursionError:
            raise ConfigError("the document nests too deeply", origin=self.path) from None
        except ConfigError as unreadable:
            if not self.path:
                raise
            # The file is no config file; the flags are still checked, to say all at once.
            try:
                _build(explicit, "")
            except Rejected as rejected:
                problems = ConfigError.combine([unreadable, _locate(rejected, explicit)])
                raise problems.with_fail_on_init_error(unreadable.fail_on_init_error) from None
            raise
        self.fail = config.flags.fail_on_init_error
        _check_mps(config)
        check_sharing(config.sharing, config.config_path or "")
        return config

    def fail_on_init_error(self, error: ConfigError) -> bool:
        """Best knowledge of ``failOnInitError`` when the config could not be built.

        In precedence order: the value given explicitly, the file's (even a
        refused one, which the file's `error` carries), the default.
        """
        if self.fail is None and self.explicit is None:
            # The command line was refused before the environment was read.
            with contextlib.suppress(ConfigError):
                variables = PLUGIN_FLAGS.read_environment(self.environ)
                self.fail = _boolean(variables.get("fail_on_init_error"))
        return error.fail_on_init_error if self.fail is None else self.fail


def _boolean(value: Any) -> bool | None:
    if isinstance(value, SetValue):
        value = value.value
    return value if isinstance(value, bool) else None


def _build(explicit: Mapping[str, SetValue], path: str) -> EffectiveConfig:
    """Validate the explicit values above the file at ``path`` ("" for none)."""
    arguments: dict[str, Any] = {
        "config_path": path,
        "sources": {field: _ORIGINS[value.origin] for field, value in explicit.items()},
    }
    for field, value in explicit.items():
        section, key = _SPECS[field].path
        arguments.setdefault(section, {})[key] = value.value
    return EffectiveConfig(**arguments)


_GENERIC_PROBLEMS = {
    "model_type": "expected a mapping",
    "model_attributes_type": "expected a mapping",
    "dict_type": "expected a mapping",
    "tuple_type": "expected a list",
    "list_type": "expected a list",
    "iterable_type": "expected a list",
}


def _locate(rejected: Rejected, explicit: Mapping[str, SetValue]) -> ConfigError:
    """Every problem, one line each, naming where the value came from.

    Problems the reference finds while parsing the file (types, the file's
    sections) come before those it finds validating the flags' values, so
    the first line is the one it would have printed.
    """
    path = str(rejected.data.get("config_path") or "")
    unknown = rejected.data.get("unknown_keys") or ()
    found = rejected.error.errors(include_url=False)
    problems: list[ConfigError] = []
    for error in sorted(found, key=lambda error: error["type"] == VALUE_PROBLEM):
        loc = tuple(error["loc"])
        spec = _SPECS_BY_PATH.get(tuple(str(part) for part in loc[:2]))
        given = explicit.get(spec.field) if spec else None
        if given is not None:
            problems.append(ConfigError(error["msg"], origin=given.origin, path=given.name))
            continue
        if spec is not None and spec.file_key:
            problems.append(ConfigError(error["msg"], origin=path, path=spec.file_key))
            continue
        where = dotted(loc)
        kind = error["type"]
        if kind in _GENERIC_PROBLEMS:
            problem = f"{_GENERIC_PROBLEMS[kind]}; found {show(error.get('input'))}"
        elif kind == "extra_forbidden":
            problem = f"unknown key (known: {', '.join(known_keys(loc[:-1]))})"
        else:
            problem = error["msg"]
        # A required key spelt with the wrong case was dropped as unknown; saying
        # so turns a puzzling "no replicas specified" into an obvious fix.
        for candidate in unknown:
            if candidate.casefold() == where.casefold() and candidate != where:
                problem += (
                    f" (found '{candidate.rpartition('.')[2]}'; keys here are case-sensitive)"
                )
                break
        problems.append(ConfigError(problem, origin=path, path=where))
    return ConfigError.combine(problems)


def _check_mps(config: EffectiveConfig) -> None:
    if config.sharing.strategy is not SharingStrategy.MPS:
        return
    where = config.config_path or ""
    if config.flags.mig_strategy is MigStrategy.MIXED:
        raise ConfigError(
            "using --mig-strategy=mixed is not supported with MPS", origin=where, path="sharing.mps"
        )
    if not config.flags.mps_root:
        raise ConfigError(
            "using MPS requires --mps-root to be specified", origin=where, path="sharing.mps"
        )
