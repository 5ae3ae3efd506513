"""The pydantic-settings sources behind `Flags`: command line, environment, file.

Precedence is pydantic-settings' own: sources are listed highest first, each
returns only the fields it actually sets, and the library merges them, then
fills what is left from the field defaults. Nothing here compares sources.

pydantic-settings asks for sources through a classmethod that receives no
per-call arguments, while a load needs its own argument list, environment
and (for per-node configs) file path. `active_load` carries those inputs to
the classmethod through a context variable for the duration of one load;
outside a load, `Flags()` reads the process environment and no command line.

Each source also notes in the load's `LoadRecord` which fields it set and
under which name, so errors can say where a bad value came from and the
effective config can show the origin of every value. A config file that
fails validation does not stop the load: its problems are kept on the record
and the sections that did validate still contribute, so the loader can report
every problem of the file and of the flags at once.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource

from settings.command_line import ENVIRONMENT, SetValue
from settings.errors import ConfigError
from settings.flag_table import FLAGS, PLUGIN_FLAGS

if TYPE_CHECKING:
    from settings.file_reader import ConfigDocument

__all__ = [
    "ConfigFileSource",
    "LoadInputs",
    "LoadRecord",
    "Origin",
    "Supplied",
    "active_load",
    "current_sources",
]

Origin = Literal["default", "file", "env", "flag"]


@dataclass(frozen=True)
class Supplied:
    """One source setting one field: which kind, where, under what name, what value."""

    origin: Origin
    where: str
    path: str
    value: Any


@dataclass
class LoadRecord:
    """What the sources of one load contributed, highest precedence first."""

    supplied: dict[str, list[Supplied]] = field(default_factory=dict)
    document: ConfigDocument | None = None  # (the sections that validated, if the file failed)
    config_path: str | None = None  # the file read (or being read, when it failed)
    file_error: ConfigError | None = None  # every problem of the file, when it failed

    def note(self, name: str, supplied: Supplied) -> None:
        self.supplied.setdefault(name, []).append(supplied)

    def winner(self, name: str) -> Supplied | None:
        """The source whose value the merge kept (the first one to set it)."""
        found = self.supplied.get(name)
        return found[0] if found else None


@dataclass(frozen=True)
class LoadInputs:
    """Everything one load reads, besides the config file itself."""

    command_line: Mapping[str, SetValue]
    environ: Mapping[str, str]
    config_file: str | None = None


_ACTIVE: ContextVar[tuple[LoadInputs, LoadRecord]] = ContextVar("settings_active_load")


@contextmanager
def active_load(inputs: LoadInputs) -> Iterator[LoadRecord]:
    """Make ``inputs`` the ones `Flags()` reads, and collect what it found."""
    record = LoadRecord()
    token = _ACTIVE.set((inputs, record))
    try:
        yield record
    finally:
        _ACTIVE.reset(token)


class _RecordingSource(PydanticBaseSettingsSource):
    """Base of our sources: they compute a whole mapping at once."""

    def __init__(self, settings_cls: type[BaseSettings], record: LoadRecord) -> None:
        super().__init__(settings_cls)
        self.record = record

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        # Required by the base class; our sources produce their mapping in __call__.
        return None, field_name, False


class CommandLineSource(_RecordingSource):
    """Flags given as arguments (already parsed by `FlagSet.parse_command_line`).

    A binary that reads the plugin's flags under its own variables (the node
    labeller's ``GFD_MIG_STRATEGY``) hands them over here too; each value
    keeps the origin and name it was given under.
    """

    def __init__(
        self, settings_cls: type[BaseSettings], record: LoadRecord, values: Mapping[str, SetValue]
    ) -> None:
        super().__init__(settings_cls, record)
        self.values = values

    def __call__(self) -> dict[str, Any]:
        for name, value in self.values.items():
            origin: Origin = "env" if value.origin == ENVIRONMENT else "flag"
            self.record.note(name, Supplied(origin, value.origin, value.name, value.value))
        return {name: value.value for name, value in self.values.items()}


class EnvironmentSource(_RecordingSource):
    """Flags given as environment variables, with the reference's parsing rules."""

    def __init__(
        self, settings_cls: type[BaseSettings], record: LoadRecord, environ: Mapping[str, str]
    ) -> None:
        super().__init__(settings_cls, record)
        self.environ = environ

    def __call__(self) -> dict[str, Any]:
        values = PLUGIN_FLAGS.read_environment(self.environ)
        for name, value in values.items():
            self.record.note(name, Supplied("env", "environment", value.name, value.value))
        return {name: value.value for name, value in values.items()}


class ConfigFileSource(_RecordingSource):
    """Flag values from the v1 config file named by ``config_file``.

    The file path is whatever the sources above settled on (command line, then
    environment), unless the load names a file explicitly, as per-node config
    selection does. The parsed document is kept on the record because its
    other sections (sharing, resources, ...) are not flags.
    """

    def __init__(
        self, settings_cls: type[BaseSettings], record: LoadRecord, override: str | None
    ) -> None:
        super().__init__(settings_cls, record)
        self.override = override

    def __call__(self) -> dict[str, Any]:
        path = self.override
        if path is None:
            chosen = self.current_state.get("config_file", "")
            path = chosen if isinstance(chosen, str) else ""
        if not path:
            return {}
        # Imported here: a plugin run without a file never pays for YAML and the file schema.
        from settings.file_reader import InvalidConfigFile, read_config_file

        self.record.config_path = path
        try:
            document = read_config_file(path)
        except ConfigError as error:
            self.record.file_error = error
            partial = error.partial if isinstance(error, InvalidConfigFile) else None
            if partial is None:
                return {}
            document = partial
        self.record.document = document
        values: dict[str, Any] = {}
        for spec in FLAGS:
            if spec.file_key is None:
                continue
            value = document.value_at(spec.file_key)
            if value is not None:
                values[spec.field] = value
                self.record.note(spec.field, Supplied("file", path, spec.file_key, value))
        return values


def current_sources(settings_cls: type[BaseSettings]) -> tuple[PydanticBaseSettingsSource, ...]:
    """The sources for the load in progress, highest precedence first."""
    inputs, record = _ACTIVE.get((LoadInputs(command_line={}, environ=os.environ), LoadRecord()))
    return (
        CommandLineSource(settings_cls, record, inputs.command_line),
        EnvironmentSource(settings_cls, record, inputs.environ),
        ConfigFileSource(settings_cls, record, inputs.config_file),
    )
