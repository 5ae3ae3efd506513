"""Reading the config the plugin should run with, including per-node selection.

With `--config-directory` (a mounted ConfigMap holding one file per named
config) the node label picks the file, through
`settings.selection.ConfigDirectory` (as the labeller and the MPS daemon
do); the name in use changes only once a config read from it has been
accepted (the loop passes it back in as `current`), so an unknown label
value keeps the config that is running.
Without a directory, `--config-file` (or no file) is read as given.

`ConfigInputs.load()` reads files and returns a value; it changes nothing,
so the loop can run it on a worker and drop a late answer.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from settings import ConfigError, EffectiveConfig, load_config
from settings.selection import ConfigDirectory, Selection


@dataclass(frozen=True)
class Loaded:
    """One read of the config: the config or why it is unusable, and which file was chosen.

    `selection` is None without a config directory; `path` is the config
    file that was read ("" for none).
    """

    config: EffectiveConfig | None
    error: ConfigError | None
    selection: Selection | None
    path: str


@dataclass(frozen=True)
class ConfigChoice:
    """The node label and the config it chose, as `/state` shows them."""

    label: str | None = None
    selection: Selection | None = None
    current: str | None = None  # the config in use (directory mode)

    def to_json(self) -> dict[str, object] | None:
        if self.selection is None:
            return None
        return {
            "label": self.label,
            "selected": self.selection.name,
            "outcome": str(self.selection.outcome),
            "reason": self.selection.reason,
            "current": self.current,
        }


class ConfigInputs:
    """The command line and environment the plugin was started with, and how to read the config.

    Holds nothing that changes: the node label and the name of the config in
    use are the loop's, and are passed to `load()`.
    """

    def __init__(self, argv: Sequence[str], env: Mapping[str, str] | None) -> None:
        self._argv = tuple(argv)
        self._env = env

    def load(self, label_value: str | None = None, current: str | None = None) -> Loaded:
        """The config to run with now, or why there is none."""
        try:
            base = load_config(self._argv, self._env)
        except ConfigError as err:
            return Loaded(None, err, None, err.origin or "")
        directory = None
        if base.flags.config_directory:
            directory = ConfigDirectory.of(base.flags)
        if directory is None:
            return Loaded(base, None, None, base.config_path or "")
        selection: Selection | None = None
        try:
            selection = directory.select(label_value=label_value, current=current)
            path = directory.file(selection)
            config = load_config(self._argv, self._env, config_file=path)
        except ConfigError as err:
            return Loaded(None, err, selection, err.origin or directory.path)
        return Loaded(config, None, selection, path)
