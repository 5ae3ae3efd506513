"""`load_config`: command line, environment and file in, `EffectiveConfig` out.

The one entry point for building a configuration, at start-up and on every
reload. Anything wrong with any input comes out as a `ConfigError` naming
where the bad value came from; nothing else escapes, so a caller can keep the
config it has when a new one is bad.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

from pydantic import ValidationError

from settings.choices import MigStrategy, SharingStrategy
from settings.command_line import parse_command_line, read_environment, wants_help
from settings.effective import EffectiveConfig, Imex, resolve_file_sections
from settings.errors import ConfigError, HelpRequested
from settings.file_reader import peek_fail_on_init_error
from settings.flag_table import FLAGS
from settings.flags import Flags
from settings.help import cli_help
from settings.sources import LoadInputs, LoadRecord, Origin, active_load

__all__ = ["load_config"]


def load_config(
    argv: Sequence[str] | None = None,
    env: Mapping[str, str] | None = None,
    *,
    config_file: str | None = None,
) -> EffectiveConfig:
    """Build the effective configuration.

    ``argv`` are the arguments without the program name; ``env`` defaults to
    the process environment. ``config_file`` replaces the file named by
    ``--config-file``/``CONFIG_FILE`` (per-node selection); ``""`` means
    explicitly no file. Raises `ConfigError` for every invalid input and
    `HelpRequested` when the arguments ask for ``--help``.
    """
    arguments = list(argv or ())
    if wants_help(arguments):
        raise HelpRequested(cli_help())
    environ = os.environ if env is None else env
    record: LoadRecord | None = None
    try:
        inputs = LoadInputs(parse_command_line(arguments), environ, config_file)
        with active_load(inputs) as record:
            try:
                flags = Flags()
            except ValidationError as error:
                raise _locate(error, record) from None
        return _assemble(flags, record)
    except ConfigError as error:
        raise error.with_fail_on_init_error(_fail_on_init_error(record, environ)) from None


def _locate(error: ValidationError, record: LoadRecord) -> ConfigError:
    """Attach to a value problem the place the value came from."""
    first = error.errors(include_url=False)[0]
    name = str(first["loc"][0]) if first["loc"] else ""
    winner = record.winner(name)
    if winner is None:
        return ConfigError(first["msg"], origin="default", path=name)
    return ConfigError(first["msg"], origin=winner.where, path=winner.path)


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
        health=dict(record.document.model.health or {}) if record.document is not None else {},
        sources=_sources(record),
        warnings=tuple(warnings),
        config_path=record.config_path,
    )


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
            from_file = peek_fail_on_init_error(record.config_path)
            if from_file is not None:
                return from_file
        if record.supplied:
            # The command line and environment were read and did not set it.
            return True
    try:
        found = read_environment(environ).get("fail_on_init_error")
    except ConfigError:
        found = None
    return found.value if found is not None and isinstance(found.value, bool) else True
