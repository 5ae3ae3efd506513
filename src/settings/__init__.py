"""Configuration: flags, environment, the v1 config file, per-node selection.

Everything a user can configure enters the plugin here and leaves as one
immutable `EffectiveConfig` (or one `ConfigError` line). Precedence is
command line > environment > config file > default, implemented with
pydantic-settings sources; the reference plugin's flags, environment
variables and file format are accepted unchanged.

Each flag is declared once, on the field of the settings model that holds
its value (`settings.flags.Flags`, and two sections of the file in
`settings.sections`); the parser, the environment reader, the help text,
the documentation's table and the file's key mapping are made from those
declarations.

Entry-point use::

    from settings import ConfigError, HelpRequested, cli_help, load_config, wants_help

    if wants_help(sys.argv[1:]):
        print(cli_help()); sys.exit(0)
    try:
        config = load_config(sys.argv[1:])
    except ConfigError as error:
        for line in error.lines():
            print(line, file=sys.stderr)
        sys.exit(1)

(`load_config` itself raises `HelpRequested`, carrying the same text, if it
is given ``--help``.)
"""

from __future__ import annotations

from settings.choices import (
    AllocationPolicy,
    DeviceIdStrategy,
    DeviceListStrategy,
    DiscoveryStrategy,
    ErrorClass,
    FallbackStrategy,
    KubeletApi,
    LogFormat,
    MigStrategy,
    Readiness,
    SharingStrategy,
)
from settings.command_line import FlagSet, SetValue, wants_help, wants_version
from settings.effective import EffectiveConfig, Origin
from settings.errors import ConfigError, HelpRequested
from settings.flags import Flags
from settings.help import cli_help, flags_markdown_table
from settings.loader import load_config
from settings.sections import GfdSettings, HealthSection, ResourcePattern, ResourceRules
from settings.sharing import SharedResource, Sharing

__all__ = [
    "AllocationPolicy",
    "ConfigError",
    "DeviceIdStrategy",
    "DeviceListStrategy",
    "DiscoveryStrategy",
    "EffectiveConfig",
    "ErrorClass",
    "FallbackStrategy",
    "FlagSet",
    "Flags",
    "GfdSettings",
    "HealthSection",
    "HelpRequested",
    "KubeletApi",
    "LogFormat",
    "MigStrategy",
    "Origin",
    "Readiness",
    "ResourcePattern",
    "ResourceRules",
    "SetValue",
    "SharedResource",
    "Sharing",
    "SharingStrategy",
    "cli_help",
    "flags_markdown_table",
    "load_config",
    "wants_help",
    "wants_version",
]
