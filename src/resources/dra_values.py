"""How DRA spells the values NVIDIA's driver publishes: semver, quantities, names, times.

The API server validates (versions must be strict semver, taint values label
values) and normalises (quantities, times) what it stores. Writing each value
in the form the server would store it keeps a publisher's comparison with what
it reads back exact; a value that cannot be written validly is None (or empty)
and its attribute is left out rather than rejected by the server.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime

__all__ = ["architecture", "label_value", "pci_bus_id", "quantity", "semver", "whole_seconds"]

_BINARY_SUFFIXES = ("", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei")
_LABEL_VALUE_JUNK = re.compile(r"[^A-Za-z0-9_.-]+")


def semver(text: str) -> str | None:
    """A version as strict semver (`12.4` -> `12.4.0`, `535.104.05` -> `535.104.5`), or None."""
    parts = text.strip().split(".")
    if not 1 <= len(parts) <= 3 or not all(part.isdigit() for part in parts):
        return None
    numbers = [int(part) for part in parts] + [0] * (3 - len(parts))
    return ".".join(str(number) for number in numbers)


def quantity(value: int) -> str:
    """An integer as the API server writes a binary-SI quantity (`42949672960` -> `40Gi`)."""
    if -1024 < value < 1024:
        return str(value)
    exponent = 0
    while value % 1024 == 0 and exponent < len(_BINARY_SUFFIXES) - 1:
        value //= 1024
        exponent += 1
    return f"{value}{_BINARY_SUFFIXES[exponent]}"


def architecture(compute_capability: str) -> str | None:
    """NVML's architecture name of a compute capability (`8.0` -> `Ampere`), None if unknown."""
    major_text, _, minor_text = compute_capability.partition(".")
    if not major_text.isdigit() or not minor_text.isdigit():
        return None
    major, minor = int(major_text), int(minor_text)
    match major:
        case 3:
            return "Kepler"
        case 5:
            return "Maxwell"
        case 6:
            return "Pascal"
        case 7:
            return "Volta" if minor < 5 else "Turing"
        case 8:
            return "Ada Lovelace" if minor == 9 else "Ampere"
        case 9:
            return "Hopper"
        case 10 | 12:
            return "Blackwell"
        case 13:
            return "Rubin"
        case _:
            return None


def pci_bus_id(nvml_bus_id: str) -> str | None:
    """`00000000:07:00.0` -> `0000:07:00.0`, the standard attribute's lowercase BDF form."""
    match = re.fullmatch(
        r"(?:[0-9a-fA-F]{4})?([0-9a-fA-F]{4}):([0-9a-fA-F]{2}):([0-9a-fA-F]{2})\.([0-7])",
        nvml_bus_id.strip(),
    )
    if match is None:
        return None
    domain, bus, device, function = match.groups()
    return f"{domain}:{bus}:{device}.{function}".lower()


def whole_seconds(since: str) -> str:
    """RFC 3339 in UTC to the second, as the API server stores a taint's time; "" if unreadable."""
    try:
        moment = datetime.fromisoformat(since.replace("Z", "+00:00"))
    except ValueError:
        return ""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def label_value(reason: str) -> str:
    """A reason as a taint value: a label value of at most 63 characters."""
    text = _LABEL_VALUE_JUNK.sub("-", reason)[:63]
    return re.sub(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$", "", text)
