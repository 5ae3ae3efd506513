"""Reading the config the plugin should run with, including per-node selection.

With `--config-directory` (a mounted ConfigMap holding one file per named
config) the node label picks the file, through `settings.ConfigDirectory`
(as the labeller and the MPS daemon do); the chosen name is remembered only
once a plan built from it has been applied, so an unknown label value keeps
the config that is running. Without a directory,
`--config-file` (or no file) is read as given.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from loguru import logger

from settings import ConfigDirectory, EffectiveConfig, Selection, load_config


class ConfigInputs:
    def __init__(self, argv: Sequence[str], env: Mapping[str, str] | None) -> None:
        self._argv = list(argv)
        self._env = env
        self.label_value: str | None = None
        self.selection: Selection | None = None
        self._pending: str | None = None
        self.current: str | None = None  # the applied config's name (directory mode)
        self.last_path = ""  # the config file the last load read (empty: none)

    def load(self) -> EffectiveConfig:
        """The config to run with now.

        Raises:
            ConfigError: the flags, the selection or the chosen file is invalid.
        """
        base = load_config(self._argv, self._env)
        directory = ConfigDirectory.of(base.flags)
        self.last_path = base.config_path or ""
        if directory is None:
            self.selection = None
            return base
        selection = directory.select(label_value=self.label_value, current=self.current)
        if selection != self.selection and selection.reason:
            logger.info("config selection: {reason}", reason=selection.reason)
        self.selection = selection
        path = directory.file(selection)
        self._pending = selection.name
        self.last_path = path
        return load_config(self._argv, self._env, config_file=path)

    def accepted(self) -> None:
        """The last loaded config is now the one in use."""
        if self.selection is not None:
            self.current = self._pending

    def describe(self) -> dict[str, object] | None:
        if self.selection is None:
            return None
        return {
            "label": self.label_value,
            "selected": self.selection.name,
            "outcome": str(self.selection.outcome),
            "reason": self.selection.reason,
            "current": self.current,
        }
