"""The file a binary reads when its config comes from a directory of named configs.

The chart mounts one ConfigMap into the plugin, gpu-feature-discovery and the
MPS control daemon, and all three must run with the same file on a node, or
the labels and the MPS daemons describe another config than the one the
plugin serves. So the step from "directory, label value, config in use" to
"this file" lives here once, on `select_config` and `list_configs`, and every
entry point calls it: the messages (``specified config ... does not exist``,
``no configuration files available``, ...) are the same everywhere too.

`ConfigDirectory` holds what the command line and environment fixed for the
process (the directory, ``--default-config``, ``--fallback-strategies``);
`choose` takes what changes (the label value, the config in use).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from settings.errors import ConfigError
from settings.flags import Flags
from settings.selection import Selection, list_configs, select_config

__all__ = ["DEFAULT_FALLBACKS", "ChosenConfig", "ConfigDirectory"]

# The plugin's default, for callers that hold raw flag values rather than `Flags`.
DEFAULT_FALLBACKS: tuple[str, ...] = tuple(
    str(strategy) for strategy in Flags.model_fields["fallback_strategies"].default
)


@dataclass(frozen=True)
class ChosenConfig:
    """The selection and the file it means ("" for the empty config: no file)."""

    selection: Selection
    path: str

    @property
    def name(self) -> str | None:
        return self.selection.name

    @property
    def reason(self) -> str | None:
        """Why this config, unless the label named it; None when the label chose."""
        return self.selection.reason


@dataclass(frozen=True)
class ConfigDirectory:
    """``--config-directory`` with its default and fallbacks."""

    path: str
    default_config: str | None = None
    fallback_strategies: tuple[str, ...] = DEFAULT_FALLBACKS

    @classmethod
    def of(cls, flags: Flags) -> ConfigDirectory | None:
        """The directory the flags name, or None when the config is a plain file."""
        if not flags.config_directory:
            return None
        return cls(
            path=flags.config_directory,
            default_config=flags.default_config or None,
            fallback_strategies=tuple(str(s) for s in flags.fallback_strategies),
        )

    @classmethod
    def given(
        cls, path: str, default_config: str | None, fallback_strategies: Sequence[str] | None
    ) -> ConfigDirectory:
        """From raw flag values; unset fallbacks are the plugin's default."""
        fallbacks = DEFAULT_FALLBACKS if fallback_strategies is None else fallback_strategies
        return cls(path, default_config or None, tuple(fallbacks))

    def choose(self, *, label_value: str | None, current: str | None) -> ChosenConfig:
        """The config for this node now (`select_config`'s rules).

        ``current`` is the name of the config in use (None before one is).

        Raises:
            ConfigError: the directory cannot be read, a fallback strategy is
                unknown, or nothing usable is selected (the reason names why).
        """
        selection = select_config(
            available=list_configs(self.path),
            label_value=label_value,
            default_config=self.default_config,
            fallback_strategies=self.fallback_strategies,
            current=current,
        )
        if not selection.usable:
            raise ConfigError(selection.reason or "no config selected", origin=self.path)
        path = "" if selection.name is None else str(Path(self.path) / selection.name)
        return ChosenConfig(selection, path)
