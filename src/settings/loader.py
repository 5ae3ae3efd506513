"""`load_config`: command line, environment and file in, `EffectiveConfig` out.

The one entry point for building a configuration, at start-up and on every
reload. Anything wrong with any input comes out as a `ConfigError` naming
where each bad value came from, every problem found a line of it; nothing
else escapes, so a caller can keep the config it has when a new one is bad.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

from pydantic import ValidationError

from settings.choices import MigStrategy, SharingStrategy
from settings.command_line import SetValue, wants_help
from settings.effective import EffectiveConfig, Imex, resolve_file_sections
from settings.errors import ConfigError, HelpRequested
from settings.flag_table import FLAGS, PLUGIN_FLAGS
from settings.flags import Flags
from settings.sources import LoadInputs, LoadRecord, Origin, active_load

__all__ = ["load_config"]


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
    for the plugin's flags (under its own names); they stand above the
    environment, like the command line, which must then be empty.

    Raises:
        ConfigError: every invalid input, one problem per line.
        HelpRequested: the arguments ask for ``--help``.
    """
    arguments = list(argv or ())
    if wants_help(arguments):
        from settings.help import cli_help

        raise HelpRequested(cli_help())
    environ = os.environ if env is None else env
    record: LoadRecord | None = None
    try:
        explicit = dict(given or {})
        explicit.update(PLUGIN_FLAGS.parse_command_line(arguments))
        inputs = LoadInputs(explicit, environ, config_file)
        with active_load(inputs) as record:
            try:
                flags = Flags()
            except ValidationError as error:
                problems = _locate(error, record)
                raise ConfigError.combine(
                    [record.file_error, problems] if record.file_error else [problems]
                ) from None
        if record.file_error is not None:
            raise record.file_error
        return _assemble(flags, record)
    except ConfigError as error:
        raise error.with_fail_on_init_error(_fail_on_init_error(record, environ)) from None


def _locate(error: ValidationError, record: LoadRecord) -> ConfigError:
    """Every value problem, each with the place the value came from."""
    problems: list[ConfigError] = []
    for found in error.errors(include_url=False):
        name = str(found["loc"][0]) if found["loc"] else ""
        winner = record.winner(name)
        if winner is None:
            problems.append(ConfigError(found["msg"], origin="default", path=name))
        else:
            problems.append(ConfigError(found["msg"], origin=winner.where, path=winner.path))
    return ConfigError.combine(problems)


def _check_mps(flags: Flags, record: LoadRecord, strategy: SharingStrategy) -> None:
    if strategy is not SharingStrategy.MPS:
        return
    where = record.config_path or ""
    if flags.mig_strategy is MigStrategy.MIXED:
        raise ConfigError(
            "using --mig-strategy=mixed is not supported with MPS", origin=where, path="sharing.mps"
        )
    if not flags.mps_root:
        raise ConfigError(
            "using MPS requires --mps-root to be specified", origin=where, path="sharing.mps"
        )


def _sources(record: LoadRecord) -> dict[str, Origin]:
    origins: dict[str, Origin] = {}
    for spec in FLAGS:
        winner = record.winner(spec.field)
        origins[spec.field] = winner.origin if winner else "default"
    dev_root = record.winner("dev_root")
    if dev_root is None or dev_root.value == "":
        # An empty device root means "the driver root", so it comes from there.
        origins["dev_root"] = origins["driver_root"]
    return origins


def _assemble(flags: Flags, record: LoadRecord) -> EffectiveConfig:
    sharing, rules, gfd, warnings = resolve_file_sections(record.document)
    _check_mps(flags, record, sharing.strategy)
    return EffectiveConfig(
        flags=flags,
        sharing=sharing,
        resources=rules,
        imex=Imex(channel_ids=flags.imex_channel_ids, required=flags.imex_required),
        gfd=gfd,
        health=_health(record),
        sources=_sources(record),
        warnings=tuple(warnings),
        unknown_keys=record.document.unknown_keys if record.document is not None else (),
        config_path=record.config_path,
    )


def _health(record: LoadRecord) -> dict[str, object]:
    section = record.document.model.health if record.document is not None else None
    return {} if section is None else section.as_written()


def _fail_on_init_error(record: LoadRecord | None, environ: Mapping[str, str]) -> bool:
    """Best knowledge of ``failOnInitError`` when the config could not be built.

    In precedence order: the value the sources settled on, the command line
    or environment, the (rejected) file, the default.
    """
    if record is not None:
        winner = record.winner("fail_on_init_error")
        if winner is not None and isinstance(winner.value, bool):
            return winner.value
        if record.config_path:
            from settings.file_reader import peek_fail_on_init_error

            from_file = peek_fail_on_init_error(record.config_path)
            if from_file is not None:
                return from_file
        if record.supplied:
            # The command line and environment were read and did not set it.
            return True
    try:
        found = PLUGIN_FLAGS.read_environment(environ).get("fail_on_init_error")
    except ConfigError:
        found = None
    return found.value if found is not None and isinstance(found.value, bool) else True
