"""Reading a v1 config file: bytes -> YAML -> the settings it gives.

The reference reads its file as YAML 1.1 and decodes the result loosely, and
users' files depend on that: JSON files work, an empty file is a valid
config, ``yes``/``no``/``y``/``n`` are booleans, only the first document of a
multi-document file counts, and most keys match regardless of case. This
module reproduces those rules: it renames every key to its canonical
spelling and drops the keys it does not know, each with a warning (the
reference ignores them silently, so a misspelt key is no longer silent).

The keys it knows come from the settings themselves: the sections' aliases
(`settings.sections`, `settings.sharing`) and the file key of every flag
(`settings.flags`), so a key cannot be read here and be missing there. What
it returns is keyed as the effective config is (`_settings_values`); the
values are not checked here but once, together with those of the flags
and variables, when the effective config is validated. Only what makes a
file no config file at all is refused here, as a `ConfigError`: a file that
cannot be read, is not YAML, holds something other than a mapping where the
flags are, or is of another version.
"""

from __future__ import annotations

import math
import re
import types
import typing
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import yaml

from foundation.files import MIB, FileRejected, read_small_file
from settings.errors import ConfigError
from settings.flag_spec import Kind
from settings.flags import SETTINGS_SPECS
from settings.sections import FileSection, HealthSection, ResourceRules
from settings.sharing import SharingFile
from settings.values import show

__all__ = [
    "CONFIG_FILE_LIMIT",
    "dotted",
    "known_keys",
    "read_config_file",
]

# A ConfigMap holds at most 1 MiB, so a config file larger than that did not
# come from one; refusing it keeps a stray huge file from stalling a reload.
CONFIG_FILE_LIMIT = 1 * MIB


class _Yaml11Loader(yaml.SafeLoader):
    """PyYAML's safe loader plus the single-letter booleans of YAML 1.1."""

    bool_values: typing.ClassVar[dict[str, bool]] = {
        **yaml.SafeLoader.bool_values,
        "y": True,
        "n": False,
    }


_Yaml11Loader.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:y|Y|n|N)$"), list("yYnN")
)


@dataclass
class _Keys:
    """The keys one mapping of the file may hold.

    ``children`` maps each canonical key to the keys of the mapping under it
    (and whether that is a list of such mappings), or to None for a value.
    ``section`` is set for a section model, which reports a value that is
    not a mapping itself; ``strict`` keeps unknown keys for it to refuse.
    """

    children: dict[str, tuple[_Keys, bool] | None] = field(default_factory=dict)
    case_sensitive: bool = False
    strict: bool = False
    section: bool = False


def _nested_model(annotation: Any) -> tuple[type[FileSection], bool] | None:
    """The section model a field holds (and whether as a list), if any."""
    if isinstance(annotation, type) and issubclass(annotation, FileSection):
        return annotation, False
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return next(filter(None, map(_nested_model, args)), None)
    if typing.get_origin(annotation) is tuple and args:
        found = _nested_model(args[0])
        return (found[0], True) if found else None
    return None


def _model_keys(model: type[FileSection]) -> _Keys:
    keys = _Keys(case_sensitive=model.KEYS_CASE_SENSITIVE, strict=model.UNKNOWN_KEYS_ARE_ERRORS)
    keys.section = True
    for info in model.model_fields.values():
        assert info.alias is not None
        nested = _nested_model(info.annotation)
        keys.children[info.alias] = None if nested is None else (_model_keys(nested[0]), nested[1])
    return keys


@cache
def _file_keys() -> _Keys:
    """Every key of a v1 file: the sections' and, under ``flags``/``imex``, the flags'."""
    root = _Keys()
    root.children["version"] = None
    for key, model in (("resources", ResourceRules), ("sharing", SharingFile)):
        root.children[key] = (_model_keys(model), False)
    root.children["health"] = (_model_keys(HealthSection), False)
    for spec in SETTINGS_SPECS:
        if spec.file_key is None:
            continue
        *parents, last = spec.file_key.split(".")
        node = root
        for key in parents:
            child = node.children.get(key)
            if child is None:
                child = node.children[key] = (_Keys(), False)
            node = child[0]
        node.children.setdefault(last, None)
    return root


def dotted(path: tuple[str | int, ...]) -> str:
    """``("sharing", "mps", "resources", 0)`` -> ``sharing.mps.resources[0]``."""
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else part)
    return text


def known_keys(path: tuple[str | int, ...]) -> list[str]:
    """The keys the mapping at ``path`` (canonical keys and list indices) accepts, sorted."""
    keys = _file_keys()
    for part in path:
        child = None if isinstance(part, int) else keys.children.get(part)
        if child is not None:
            keys = child[0]
    return sorted(keys.children)


def read_config_file(path: str, *, limit: int = CONFIG_FILE_LIMIT) -> dict[str, Any]:
    """The settings the file at ``path`` gives, keyed as the effective config is.

    Only a regular file of at most ``limit`` bytes is read (see
    `foundation.files`): a pipe, device or directory at the path, or a file
    over the limit, is a one-line error rather than a stall.

    Raises:
        ConfigError: the file is no config file (see the module docstring);
            its ``fail_on_init_error`` is false if the file says so, since a
            blanket deployment relies on that even for a file it cannot use.
    """
    raw = _first_document(_read(path, limit), path)
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError(f"expected a mapping at the top level; found {show(raw)}", origin=path)
    reading = _Reading(path)
    document = reading.normalise(raw, _file_keys(), ())
    try:
        _check_version(document.get("version"), path)
        if reading.problems:
            raise ConfigError.combine(reading.problems)
    except ConfigError as error:
        says = _at(document, "flags.failOnInitError")
        raise error.with_fail_on_init_error(says is not False) from None
    sharing = document.get("sharing")
    if isinstance(sharing, dict) and "mps" in sharing and sharing["mps"] is None:
        reading.warn("sharing.mps", "empty, ignored (no MPS sharing)")
    return _settings_values(document, reading)


def _settings_values(document: dict[str, Any], reading: _Reading) -> dict[str, Any]:
    values: dict[str, Any] = {"config_path": reading.path}
    for section in ("sharing", "resources", "health"):
        if document.get(section) is not None:
            values[section] = document[section]
    if isinstance(values.get("health"), dict):
        # Null means "not given", as for every flag: three of the keys are flags.
        values["health"] = {
            key: value for key, value in values["health"].items() if value is not None
        }
    origins: dict[str, str] = {}
    for spec in SETTINGS_SPECS:
        value = _at(document, spec.file_key) if spec.file_key else None
        if value is None:
            continue
        if spec.kind is Kind.DURATION and isinstance(value, int | float) and math.isfinite(value):
            value = value / 1e9  # a bare number is nanoseconds, as Go decodes a Duration
        section, key = spec.path
        values.setdefault(section, {})[key] = value
        origins[spec.field] = "file"
    return {
        **values,
        "sources": origins,
        "read_warnings": tuple(reading.warnings),
        "unknown_keys": tuple(reading.unknown),
    }


def _at(document: Any, key_path: str) -> Any:
    for key in key_path.split("."):
        document = document.get(key) if isinstance(document, dict) else None
    return document


def _check_version(value: Any, path: str) -> None:
    """``v1``, missing or empty; numbers and booleans are read as text, as the reference does.

    Checked before anything else is used: in a file of another version, nothing
    means what we think.
    """
    if value is None or value == "v1" or value == "":
        return
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, float) and value.is_integer():
        text = str(int(value))
    elif isinstance(value, int | float | str):
        text = str(value)
    else:
        raise ConfigError(
            f"expected a version string; found {show(value)}", origin=path, path="version"
        )
    if text != "v1":
        raise ConfigError(f"unknown version: {text}", origin=path, path="version")


@dataclass
class _Reading:
    """What reading one file found besides its values."""

    path: str
    warnings: list[str] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)  # dotted paths, in file order
    problems: list[ConfigError] = field(default_factory=list)

    def warn(self, where: str, text: str) -> None:
        self.warnings.append(str(ConfigError(text, origin=self.path, path=where)))

    def normalise(self, raw: Any, keys: _Keys, path: tuple[str | int, ...]) -> Any:
        """Rename keys to their canonical spelling and drop (with a warning) unknown ones."""
        if not isinstance(raw, dict):
            if raw is not None and not keys.section:
                where = dotted(path)
                self.problems.append(
                    ConfigError(
                        f"expected a mapping; found {show(raw)}", origin=self.path, path=where
                    )
                )
            return raw  # (a section model reports it itself)
        folded = {key.casefold(): key for key in keys.children}
        result: dict[str, Any] = {}
        for key, value in raw.items():
            label = key if isinstance(key, str) else show(key)
            canonical = key if key in keys.children else None
            if canonical is None and isinstance(key, str) and not keys.case_sensitive:
                canonical = folded.get(key.casefold())
            if canonical is None and keys.strict:
                result[label] = value  # validation refuses it, listing the known keys
                continue
            if canonical is None:
                self.unknown.append(dotted((*path, label)))
                hint = ""
                if isinstance(key, str) and key.casefold() in folded:
                    hint = (
                        f" (keys here are case-sensitive: did you mean '{folded[key.casefold()]}'?)"
                    )
                self.warn(dotted((*path, label)), f"unknown key, ignored{hint}")
                continue
            child = keys.children[canonical]
            if child is not None and child[1] and isinstance(value, list):
                value = [
                    self.normalise(item, child[0], (*path, canonical, index))
                    for index, item in enumerate(value)
                ]
            elif child is not None and not child[1]:
                value = self.normalise(value, child[0], (*path, canonical))
            result[canonical] = value
        return result


def _read(path: str, limit: int) -> bytes:
    try:
        return read_small_file(path, limit=limit)
    except FileRejected as error:
        verb = "reading" if error.too_large else "opening"
        raise ConfigError(f"error {verb} config file: {error.reason}", origin=path) from None


def _first_document(data: bytes | str, origin: str) -> Any:
    try:
        for document in yaml.load_all(data, Loader=_Yaml11Loader):
            return document
        return None
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = error.problem or error.context or "syntax error"
        raise ConfigError(f"invalid YAML{where}: {problem}", origin=origin) from None
    except yaml.YAMLError as error:
        raise ConfigError(f"invalid YAML: {error}", origin=origin) from None
    except RecursionError:
        raise ConfigError("invalid YAML: the document nests too deeply", origin=origin) from None
