"""Checks for single values found in a v1 config file.

Each function takes the value as YAML produced it and either returns it in
canonical form or raises a `PydanticCustomError` whose text is the one-line
problem shown to the user. Where the reference plugin has a message for a
case, its wording is kept, so users searching for an error they already know
find it; where the reference only prints a Go type error, the text names the
expected type and the value found instead.

Null always means "not given" here: it is how YAML spells an empty value, and
treating it as absent keeps ``failOnInitError:`` (no value) from becoming a
type error.
"""

from __future__ import annotations

import math
import re
from typing import Any

from pydantic_core import PydanticCustomError

from settings.values import parse_duration, show

__all__ = [
    "RESOURCE_PREFIX",
    "DevicesSpec",
    "check_bool",
    "check_devices",
    "check_duration",
    "check_int_list",
    "check_pattern",
    "check_replicas",
    "check_resource_name",
    "check_str",
    "check_str_or_list",
    "check_version",
    "is_device_reference",
    "normalise_resource_name",
]

RESOURCE_PREFIX = "nvidia.com/"
_MAX_RESOURCE_NAME = 63
_RFC1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_RFC1123_HINT = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, "
    "'-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', "
    "regex used for validation is "
    r"'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)

DevicesSpec = str | int | tuple[str | int, ...]


def _fail(kind: str, message: str) -> PydanticCustomError:
    # The message is pre-formatted; braces in user values must not be read as
    # template fields, so they are passed through the context.
    return PydanticCustomError(kind, "{message}", {"message": message})


def _integral(value: Any) -> int | None:
    """The value as an int when it is a whole number (YAML ``2`` or ``2.0``)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    return None


def check_version(value: Any) -> str:
    """``v1`` when missing or empty; numbers and booleans are read as text."""
    if value is None or value == "":
        return "v1"
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, int | float):
        whole = _integral(value)
        text = str(whole) if whole is not None else str(value)
    elif isinstance(value, str):
        text = value
    else:
        raise _fail("version_type", f"expected a version string; found {show(value)}")
    if text != "v1":
        raise _fail("unknown_version", f"unknown version: {text}")
    return text


def check_str(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise _fail("string_type", f"expected a string; found {show(value)}")


def check_bool(value: Any) -> bool | None:
    if value is None or isinstance(value, bool):
        return value
    raise _fail("bool_type", f"expected a boolean (true or false); found {show(value)}")


def check_str_or_list(value: Any) -> str | tuple[str, ...] | None:
    """A string (never split on commas) or a list of strings."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(item, str) for item in value):
        return tuple(value)
    raise _fail("str_or_list_type", f"invalid deviceListStrategy: {show(value)}")


def check_int_list(value: Any) -> tuple[int, ...] | None:
    if value is None:
        return None
    if isinstance(value, list):
        items = [_integral(item) for item in value]
        if all(item is not None for item in items):
            return tuple(item for item in items if item is not None)
    raise _fail("int_list_type", f"expected a list of integers; found {show(value)}")


def check_duration(value: Any) -> float | None:
    """Seconds; a bare number is nanoseconds, as in the reference's labeller."""
    if value is None:
        return None
    if isinstance(value, int | float) and not isinstance(value, bool):
        if not math.isfinite(value):
            raise _fail("duration", f"invalid duration; found {show(value)}")
        return value / 1e9
    if isinstance(value, str):
        try:
            return parse_duration(value)
        except ValueError as error:
            raise _fail("duration", str(error)) from None
    raise _fail("duration", f"invalid duration; found {show(value)}")


def normalise_resource_name(name: str) -> str:
    """``gpu`` -> ``nvidia.com/gpu``; a name already under the prefix is kept."""
    return name if name.startswith(RESOURCE_PREFIX) else RESOURCE_PREFIX + name


def check_resource_name(value: Any, *, missing: str) -> str:
    """A resource name, returned fully qualified (``nvidia.com/...``)."""
    if value is None:
        raise _fail("missing", missing)
    if not isinstance(value, str):
        raise _fail("string_type", f"expected a resource name; found {show(value)}")
    full = normalise_resource_name(value)
    if len(full) > _MAX_RESOURCE_NAME:
        limit = _MAX_RESOURCE_NAME
        raise _fail(
            "resource_name",
            f"fully-qualified resource name must be {limit} characters or less: {full}",
        )
    _, _, local = full.partition("/")
    if not _RFC1123_SUBDOMAIN.fullmatch(local):
        raise _fail(
            "resource_name", f"incorrect format for resource name '{full}': {_RFC1123_HINT}"
        )
    return full


def check_pattern(value: Any) -> str:
    if value is None:
        raise _fail("missing", "resources must have a 'pattern' field set")
    if not isinstance(value, str):
        raise _fail("string_type", f"expected a pattern string; found {show(value)}")
    return value


def check_replicas(value: Any) -> int:
    if value is None:
        raise _fail("missing", "no replicas specified")
    replicas = _integral(value)
    if replicas is None:
        raise _fail("replicas_type", f"number of replicas must be an integer; found {show(value)}")
    if replicas < 2:
        raise _fail("replicas_range", f"number of replicas must be >= 2; found {replicas}")
    return replicas


# The reference's rules (Go's ParseUint and google/uuid's Parse): an index is
# ASCII digits that fit in 64 bits, a MIG index is two of them joined by ":",
# and a UUID is one of the four spellings that library reads.
_UINT = r"[0-9]+"
_HEX_UUID = r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
_UUID = rf"(?:{_HEX_UUID}|\{{{_HEX_UUID}\}}|(?i:urn:uuid:){_HEX_UUID}|[0-9a-fA-F]{{32}})"
_INDEX = re.compile(_UINT)
_MIG_INDEX = re.compile(rf"({_UINT}):({_UINT})")
_GPU_UUID = re.compile(rf"GPU-{_UUID}")
_MIG_UUID = re.compile(rf"MIG-{_UUID}")
_MIG_LEGACY_UUID = re.compile(rf"MIG-GPU-{_UUID}/({_UINT})/({_UINT})")
_UINT_MAX = 2**64 - 1


def _fits(*numbers: str) -> bool:
    # The length check first: int() refuses text of thousands of digits.
    return all(len(number) <= 20 and int(number) <= _UINT_MAX for number in numbers)


def is_device_reference(text: str) -> bool:
    """A GPU index (``0``), MIG index (``0:1``), GPU UUID or MIG UUID (either form)."""
    if _INDEX.fullmatch(text):
        return _fits(text)
    for pattern in (_MIG_INDEX, _MIG_LEGACY_UUID):
        found = pattern.fullmatch(text)
        if found:
            return _fits(*found.groups())
    return bool(_GPU_UUID.fullmatch(text) or _MIG_UUID.fullmatch(text))


def _device_reference(item: Any) -> str | int | None:
    whole = _integral(item)
    if whole is not None:
        return whole if 0 <= whole <= _UINT_MAX else None
    if isinstance(item, str) and is_device_reference(item):
        return item
    return None


def check_devices(value: Any) -> DevicesSpec:
    """``all``, a positive count, or a list of GPU/MIG indices and UUIDs."""
    if value is None or value == "all":
        return "all"
    if isinstance(value, str):
        raise _fail(
            "devices",
            f"devices set as '{value}' but the only valid string input is 'all'",
        )
    count = _integral(value)
    if count is not None:
        if count <= 0:
            raise _fail("devices", f"devices set as '{count}' but a count of devices must be > 0")
        return count
    if isinstance(value, list):
        references: list[str | int] = []
        for item in value:
            reference = _device_reference(item)
            if reference is None:
                raise _fail(
                    "devices",
                    f"unsupported type for device in devices list: {show(item)} (expected a GPU "
                    "index, a 'gpu:mig' index, a GPU UUID or a MIG UUID)",
                )
            references.append(reference)
        return tuple(references)
    raise _fail("devices", f"unrecognized type for devices spec: {show(value)}")
