"""Replica ("annotated") device IDs: `<id>::<n>`.

Time-slicing and MPS advertise each physical device several times; the
kubelet only sees the annotated IDs, while everything written into a container
uses the underlying ID. The reference splits at the first `::` and reads a bad
or missing number as replica 0; the same rules are kept here so IDs round-trip.
"""

from __future__ import annotations

from collections.abc import Iterable

SEPARATOR = "::"


def replica_id(device_id: str, replica: int) -> str:
    """`GPU-x`, 3 -> `GPU-x::3`."""
    return f"{device_id}{SEPARATOR}{replica}"


def has_annotation(device_id: str) -> bool:
    return SEPARATOR in device_id


def strip_replica(device_id: str) -> str:
    """`GPU-x::3` -> `GPU-x`; an ID without `::` is returned as is."""
    return device_id.split(SEPARATOR, 1)[0]


def replica_number(device_id: str) -> int:
    """The `n` of `<id>::<n>`; 0 when absent or not a decimal number."""
    _, sep, rest = device_id.partition(SEPARATOR)
    if not sep or not rest.isdigit():
        return 0
    return int(rest)


def unique(values: Iterable[str]) -> list[str]:
    """Values in first-seen order without repeats."""
    return list(dict.fromkeys(values))
