"""Reading a v1 config file: bytes -> YAML -> checked `ConfigFileV1`.

The reference reads its file as YAML 1.1 and decodes the result loosely, and
users' files depend on that: JSON files work, an empty file is a valid
config, ``yes``/``no``/``y``/``n`` are booleans, only the first document of a
multi-document file counts, and most keys match regardless of case. This
module reproduces those rules, then validates strictly, turning every
problem into a line of one `ConfigError` that names the file, the key path
and the bad value. Keys it does not know are not an error (the reference
ignores them) but each one becomes a warning and is listed on the document,
so a misspelt key is no longer silent.

When validation fails, the sections that did validate are still returned
(`InvalidConfigFile.partial`): the flag values they hold can then be checked
too, and the user learns about every wrong value in one go.
"""

from __future__ import annotations

import copy
import re
import types
import typing
from dataclasses import dataclass
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from foundation.files import MIB, FileRejected, read_small_file
from settings.errors import ConfigError
from settings.file_schema import ConfigFileV1, FileModel
from settings.values import show

__all__ = [
    "CONFIG_FILE_LIMIT",
    "ConfigDocument",
    "InvalidConfigFile",
    "parse_config_text",
    "peek_fail_on_init_error",
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


@dataclass(frozen=True)
class ConfigDocument:
    """A config file that passed validation, with the warnings it raised."""

    path: str
    model: ConfigFileV1
    warnings: tuple[str, ...]
    unknown_keys: tuple[str, ...] = ()  # dotted paths (``flags.migStrategi``), in file order

    def value_at(self, key_path: str) -> Any:
        """The value at a dotted key path (``flags.plugin.deviceIDStrategy``), or None."""
        node: Any = self.model
        for key in key_path.split("."):
            if node is None:
                return None
            assert isinstance(node, BaseModel)
            node = getattr(node, _field_for_alias(type(node), key))
        return node


class InvalidConfigFile(ConfigError):
    """A config file with problems; ``partial`` holds the sections that validated."""

    def __init__(self, error: ConfigError, partial: ConfigDocument | None) -> None:
        super().__init__(error.problem, origin=error.origin, path=error.path, more=error.more)
        self.partial = partial


def read_config_file(path: str, *, limit: int = CONFIG_FILE_LIMIT) -> ConfigDocument:
    """Read and check the file at ``path``; raise `ConfigError` for any problem.

    Only a regular file of at most ``limit`` bytes is read (see
    `foundation.files`): a pipe, device or directory at the path, or a file
    over the limit, is a one-line error rather than a stall.
    """
    return parse_config_text(_read(path, limit), origin=path)


def _read(path: str, limit: int) -> bytes:
    try:
        return read_small_file(path, limit=limit)
    except FileRejected as error:
        verb = "reading" if error.too_large else "opening"
        raise ConfigError(f"error {verb} config file: {error.reason}", origin=path) from None


def parse_config_text(data: bytes | str, *, origin: str) -> ConfigDocument:
    """Check config text; ``origin`` names it in messages (normally the file path)."""
    raw = _first_document(data, origin)
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError(f"expected a mapping at the top level; found {show(raw)}", origin=origin)
    warnings: list[str] = []
    unknown: list[str] = []
    normalised = _normalise(raw, ConfigFileV1, (), warnings, origin, unknown)
    sharing = normalised.get("sharing")
    if isinstance(sharing, dict) and "mps" in sharing and sharing["mps"] is None:
        warnings.append(
            str(ConfigError("empty, ignored (no MPS sharing)", origin=origin, path="sharing.mps"))
        )
    try:
        model = ConfigFileV1.model_validate(normalised)
    except ValidationError as error:
        partial = _partial(normalised, error, origin, warnings, unknown)
        raise InvalidConfigFile(_translate(error, origin, unknown), partial) from None
    except RecursionError:
        raise ConfigError("the document nests too deeply", origin=origin) from None
    return ConfigDocument(
        path=origin, model=model, warnings=tuple(warnings), unknown_keys=tuple(unknown)
    )


def _partial(
    normalised: dict[str, Any],
    error: ValidationError,
    origin: str,
    warnings: list[str],
    unknown: list[str],
) -> ConfigDocument | None:
    """The document without what failed, if the rest validates.

    First only the failing keys go (a bad `flags.failOnInitError` leaves the
    other flags to be checked too); if that is not enough, the whole
    top-level sections that failed.
    """
    locs = [tuple(problem["loc"]) for problem in error.errors() if problem["loc"]]
    if any(loc[0] == "version" for loc in locs):
        return None  # a file of another version: nothing in it means what we think
    failed = {loc[0] for loc in locs}
    for kept in (
        _without_keys(normalised, locs),
        {key: value for key, value in normalised.items() if key not in failed},
    ):
        try:
            model = ConfigFileV1.model_validate(kept)
        except (ValidationError, RecursionError):
            continue
        return ConfigDocument(
            path=origin, model=model, warnings=tuple(warnings), unknown_keys=tuple(unknown)
        )
    return None


def _without_keys(document: dict[str, Any], locs: list[tuple[Any, ...]]) -> dict[str, Any]:
    """`document` without the key at each location; a location into a list drops the list."""
    pruned = copy.deepcopy(document)
    for loc in locs:
        path = loc[: next((i for i, part in enumerate(loc) if not isinstance(part, str)), len(loc))]
        parent: Any = pruned
        for key in path[:-1]:
            parent = parent.get(key) if isinstance(parent, dict) else None
        if path and isinstance(parent, dict):
            parent.pop(path[-1], None)
    return pruned


def peek_fail_on_init_error(path: str) -> bool | None:
    """``flags.failOnInitError`` of a file that failed validation, if readable.

    A config rejected at start-up should still be able to say "do not exit"
    (blanket deployments rely on it), so this looks for that one key
    leniently and returns None when it cannot be found.
    """
    try:
        raw = _first_document(_read(path, CONFIG_FILE_LIMIT), path)
    except ConfigError:
        return None
    flags = _get_folded(raw, "flags")
    value = _get_folded(flags, "failOnInitError")
    return value if isinstance(value, bool) else None


def _get_folded(node: Any, key: str) -> Any:
    if not isinstance(node, dict):
        return None
    found = None
    for candidate, value in node.items():
        if isinstance(candidate, str) and candidate.casefold() == key.casefold():
            found = value
    return found


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


def _field_for_alias(model: type[BaseModel], alias: str) -> str:
    for name, field in model.model_fields.items():
        if field.alias == alias:
            return name
    raise KeyError(alias)


def _nested_model(annotation: Any) -> tuple[type[FileModel], bool] | None:
    """The file model a field holds (and whether as a list), if any."""
    if isinstance(annotation, type) and issubclass(annotation, FileModel):
        return annotation, False
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType, typing.Annotated):
        for arg in args:
            found = _nested_model(arg)
            if found is not None:
                return found
    if origin is tuple and args and isinstance(args[0], type) and issubclass(args[0], FileModel):
        return args[0], True
    return None


def _dotted(path: tuple[str | int, ...]) -> str:
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else part)
    return text


def _normalise(
    raw: Any,
    model: type[FileModel],
    path: tuple[str | int, ...],
    warnings: list[str],
    origin: str,
    unknown: list[str],
) -> Any:
    """Rename keys to their canonical spelling and drop (with a warning) unknown ones.

    Values that are not mappings are left alone for validation to report.
    """
    if not isinstance(raw, dict):
        return raw
    fields = {field.alias: field for field in model.model_fields.values() if field.alias}
    folded = {alias.casefold(): alias for alias in fields}
    result: dict[str, Any] = {}
    for key, value in raw.items():
        alias: str | None = None
        if isinstance(key, str):
            if key in fields:
                alias = key
            elif not model.KEYS_CASE_SENSITIVE:
                alias = folded.get(key.casefold())
        if alias is None and model.UNKNOWN_KEYS_ARE_ERRORS:
            result[key if isinstance(key, str) else show(key)] = value  # validation refuses it
            continue
        if alias is None:
            label = key if isinstance(key, str) else show(key)
            unknown.append(_dotted((*path, label)))
            hint = ""
            if isinstance(key, str) and key.casefold() in folded:
                hint = f" (keys here are case-sensitive: did you mean '{folded[key.casefold()]}'?)"
            warnings.append(
                str(
                    ConfigError(
                        f"unknown key, ignored{hint}", origin=origin, path=_dotted((*path, label))
                    )
                )
            )
            continue
        nested = _nested_model(fields[alias].annotation)
        if nested is not None:
            child, is_list = nested
            if is_list and isinstance(value, list):
                value = [
                    _normalise(item, child, (*path, alias, index), warnings, origin, unknown)
                    for index, item in enumerate(value)
                ]
            elif not is_list:
                value = _normalise(value, child, (*path, alias), warnings, origin, unknown)
        result[alias] = value
    return result


_GENERIC_PROBLEMS = {
    "model_type": "expected a mapping",
    "model_attributes_type": "expected a mapping",
    "dict_type": "expected a mapping",
    "tuple_type": "expected a list",
    "list_type": "expected a list",
    "iterable_type": "expected a list",
}


def _known_keys(loc: tuple[str | int, ...]) -> list[str]:
    """The keys the model at ``loc`` (a path of aliases) accepts, sorted."""
    model: type[FileModel] = ConfigFileV1
    for part in loc:
        if isinstance(part, int):
            continue
        field = model.model_fields[_field_for_alias(model, part)]
        nested = _nested_model(field.annotation)
        if nested is None:
            return []
        model = nested[0]
    return sorted(field.alias for field in model.model_fields.values() if field.alias)


def _translate(error: ValidationError, origin: str, unknown: list[str]) -> ConfigError:
    """Every problem pydantic found, one `ConfigError` line each, in document order."""
    problems: list[ConfigError] = []
    for found in error.errors(include_url=False):
        path = _dotted(tuple(found["loc"]))
        kind = found["type"]
        if kind in _GENERIC_PROBLEMS:
            problem = f"{_GENERIC_PROBLEMS[kind]}; found {show(found.get('input'))}"
        elif kind == "extra_forbidden":
            problem = f"unknown key (known: {', '.join(_known_keys(found['loc'][:-1]))})"
        else:
            problem = found["msg"]
        # A required key spelt with the wrong case was dropped as unknown; saying
        # so turns a puzzling "no replicas specified" into an obvious fix.
        for candidate in unknown:
            if candidate.casefold() == path.casefold() and candidate != path:
                problem += (
                    f" (found '{candidate.rpartition('.')[2]}'; keys here are case-sensitive)"
                )
                break
        problems.append(ConfigError(problem, origin=origin, path=path))
    return ConfigError.combine(problems)
