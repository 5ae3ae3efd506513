"""Choosing this node's config file from a directory of named configs.

The chart mounts a ConfigMap with one file per named config into the
plugin, gpu-feature-discovery and the MPS control daemon; the node label
(``nvidia.com/device-plugin.config`` by default) says which one this node
uses. All three must run with the same file on a node, or the labels and the
MPS daemons describe another config than the one the plugin serves, so the
step from "directory, label value, config in use" to "this file" is written
once, here: `ConfigDirectory` holds what the flags fixed for the process and
every entry point asks it. The messages (``specified config ... does not
exist``, ``no configuration files available``, ...) are the same everywhere
too.

`select_config` is the decision, as a pure function of its inputs, so every
rule below is tested in a table:

1. Label set and naming an available config: that config.
2. Label set but naming nothing available: keep ``current`` (a running node
   never switches to something it was not asked for), reporting why. With
   nothing applied yet there is nothing to keep, so rules 3 and 4 choose,
   again with the reason reported.
3. Label unset or empty, ``--default-config`` set: that config if available.
   If it is not, the node keeps ``current`` (or has nothing).
4. Otherwise the fallbacks, in order: ``named`` picks a config called
   ``default``; ``single`` picks the only config when there is exactly one;
   ``empty`` picks no file at all (flags and defaults only).

Before any of these, a directory with no usable file (only ``..`` entries or
subdirectories, or nothing) is "no configuration files available", as in the
reference, whatever the label and the fallbacks say.

The reference's config-manager exits on an unknown label value and, on its
first pass, usually applies the default before it has seen the label; here
the decision is made with the label known and never crashes the plugin.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from settings.choices import FallbackStrategy
from settings.errors import ConfigError
from settings.flags import FLAGS_BY_FIELD, Flags

__all__ = [
    "DEFAULT_FALLBACKS",
    "ChosenConfig",
    "ConfigDirectory",
    "Outcome",
    "Selection",
    "list_configs",
    "select_config",
]


class Outcome(StrEnum):
    """How the selection was made."""

    LABEL = "label"  # the label named an available config
    DEFAULT = "default"  # --default-config, because the label is unset
    FALLBACK = "fallback"  # a fallback strategy (name None: the empty config)
    KEPT = "kept"  # nothing valid was asked for; the current config stays
    NONE = "none"  # nothing valid was asked for and nothing is applied yet


@dataclass(frozen=True)
class Selection:
    """The chosen config name (None: no file) and, unless the label chose, why."""

    name: str | None
    reason: str | None
    outcome: Outcome

    @property
    def usable(self) -> bool:
        """Whether there is something to run with (NONE means there is not)."""
        return self.outcome is not Outcome.NONE


def list_configs(directory: str | Path) -> list[str]:
    """Names of the config files in a ConfigMap-mounted directory, sorted.

    Entries starting with ``..`` are the volume's own bookkeeping (``..data``
    and the timestamped directory it points to) and are skipped, as are
    directories; the per-key symbolic links count as files.
    """
    root = Path(directory)
    try:
        entries = sorted(root.iterdir(), key=lambda entry: entry.name)
    except OSError as error:
        reason = error.strerror or type(error).__name__
        raise ConfigError(
            f"error getting list of configuration files: error reading directory: {reason}",
            origin=str(directory),
        ) from None
    return [
        entry.name for entry in entries if not entry.name.startswith("..") and not entry.is_dir()
    ]


def _fallback(
    available: Sequence[str], fallback_strategies: Sequence[str]
) -> tuple[str | None, str] | None:
    for raw in fallback_strategies:
        try:
            strategy = FallbackStrategy(raw)
        except ValueError:
            raise ConfigError(
                f"unknown fallback strategy: {raw}", origin="fallback strategies"
            ) from None
        if strategy is FallbackStrategy.NAMED and "default" in available:
            return "default", "using the config named 'default'"
        if strategy is FallbackStrategy.SINGLE and len(available) == 1:
            return available[0], f"using '{available[0]}', the only config"
        if strategy is FallbackStrategy.EMPTY:
            return None, "using no config file (empty fallback)"
    return None


def select_config(
    *,
    available: Sequence[str],
    label_value: str | None,
    default_config: str | None,
    fallback_strategies: Sequence[str],
    current: str | None,
) -> Selection:
    """Choose the config for this node; see the module docstring for the rules.

    ``available`` may still contain ``..`` entries; they are ignored.
    ``current`` is the config in use (None before the first one is applied).
    Raises `ConfigError` only for a fallback strategy name it does not know.
    """
    names = sorted({name for name in available if not name.startswith("..")})
    if not names:
        # Checked first, as the reference does: even the `empty` fallback needs
        # a directory with something in it.
        return _nothing("no configuration files available", current)
    prefix = ""
    if label_value:
        if label_value in names:
            return Selection(label_value, None, Outcome.LABEL)
        if current is not None:
            return Selection(
                current,
                f"specified config {label_value} does not exist; keeping {current}",
                Outcome.KEPT,
            )
        prefix = f"specified config {label_value} does not exist; "

    if default_config:
        if default_config in names:
            why = "node label unset" if not label_value else prefix.rstrip("; ")
            return Selection(
                default_config, f"{why}; using default config {default_config}", Outcome.DEFAULT
            )
        problem = f"{prefix}default config {default_config} does not exist"
        return _nothing(problem, current)

    chosen = _fallback(names, fallback_strategies)
    if chosen is not None:
        name, why = chosen
        lead = prefix or "node label unset and no default config; "
        return Selection(name, lead + why, Outcome.FALLBACK)
    problem = prefix + "no config was set, no default was provided, and all fallbacks failed"
    return _nothing(problem, current)


def _nothing(problem: str, current: str | None) -> Selection:
    if current is not None:
        return Selection(current, f"{problem}; keeping {current}", Outcome.KEPT)
    return Selection(None, problem, Outcome.NONE)


# The plugin's default, for callers that hold raw flag values rather than `Flags`.
DEFAULT_FALLBACKS: tuple[str, ...] = tuple(
    str(strategy) for strategy in FLAGS_BY_FIELD["fallback_strategies"].default
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

    def select(self, *, label_value: str | None, current: str | None) -> Selection:
        """The selection now, by `select_config`'s rules, among the directory's entries.

        ``current`` is the name of the config in use (None before one is).

        Raises:
            ConfigError: the directory cannot be read or a fallback strategy is unknown.
        """
        return select_config(
            available=list_configs(self.path),
            label_value=label_value,
            default_config=self.default_config,
            fallback_strategies=self.fallback_strategies,
            current=current,
        )

    def file(self, selection: Selection) -> str:
        """The file a selection means ("" for the empty config: no file).

        Raises:
            ConfigError: nothing usable is selected (the reason says why).
        """
        if not selection.usable:
            raise ConfigError(selection.reason or "no config selected", origin=self.path)
        return "" if selection.name is None else str(Path(self.path) / selection.name)

    def choose(self, *, label_value: str | None, current: str | None) -> ChosenConfig:
        """The config for this node now: `select`, then `file`.

        Raises:
            ConfigError: as `select` and `file`.
        """
        selection = self.select(label_value=label_value, current=current)
        return ChosenConfig(selection, self.file(selection))
