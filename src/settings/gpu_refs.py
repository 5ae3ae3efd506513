"""How operators name a whole GPU in ``--include-devices`` and ``--exclude-devices``.

By NVML index (``3``), by UUID (``GPU-a0bb...``, as ``nvidia-smi -L`` prints
it) or by PCI bus ID, in NVML's form (``00000000:07:00.0``) or ``lspci -D``'s
(``0000:07:00.0``), hex in any case. Only whole GPUs are named: a GPU left
out takes its MIG devices and its replicas with it, so a MIG reference is
refused rather than half-applied.

The check of the two flags (`gpu_list`, on `settings.flags.Flags`) and the
filter on the inventory (`resources.gpu_filter`) read an entry the same way:
`parse_entry` turns one item into a canonical `GpuRef` or raises
`ValueError` with the one-line problem, and `GpuRef.matches` says whether a
GPU, given as plain values (no device model here), is the one it names.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

from settings.checks import value_problem, wrong_type
from settings.values import show

__all__ = [
    "EXPECTED",
    "GpuRef",
    "RefKind",
    "canonical_bus_id",
    "gpu_list",
    "parse_entry",
    "parse_list",
]

EXPECTED = "expected a GPU index, a GPU UUID (GPU-...) or a PCI bus ID (0000:07:00.0)"

_HEX_UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
_GPU_UUID = re.compile(rf"gpu-({_HEX_UUID})", re.IGNORECASE)
_MIG = re.compile(r"mig-.*|[0-9]+:[0-9]+", re.IGNORECASE)
# Domain (4 hex digits for lspci -D, 8 for NVML, 5 for a VMD domain), bus,
# device, function.
_BUS_ID = re.compile(r"([0-9a-f]{4,8}):([0-9a-f]{2}):([0-9a-f]{2})\.([0-7])", re.IGNORECASE)
_BUS_ID_WITHOUT_DOMAIN = re.compile(r"[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]", re.IGNORECASE)
_MAX_INDEX_DIGITS = 9  # NVML counts GPUs in an unsigned int; more digits are a typo


class RefKind(StrEnum):
    INDEX = "index"
    UUID = "UUID"
    BUS_ID = "bus ID"


@dataclass(frozen=True)
class GpuRef:
    """One entry of a list, canonical: ``3``, ``GPU-<lower-case hex>``, ``0000:07:00.0``."""

    kind: RefKind
    value: str

    def matches(self, index: int, uuid: str, pci_bus_id: str) -> bool:
        """Whether the GPU with these NVML facts is the one this entry names."""
        if self.kind is RefKind.INDEX:
            return int(self.value) == index
        if self.kind is RefKind.UUID:
            return uuid.casefold() == self.value.casefold()
        return (canonical_bus_id(pci_bus_id) or pci_bus_id.strip().lower()) == self.value

    def __str__(self) -> str:
        return self.value


def canonical_bus_id(text: str) -> str | None:
    """``0000:07:00.0`` for either NVML's or lspci's spelling of a bus ID; None if neither.

    The domain keeps at least four digits, as lspci prints it.
    """
    found = _BUS_ID.fullmatch(text.strip())
    if found is None:
        return None
    domain, bus, device, function = (int(part, 16) for part in found.groups())
    return f"{domain:04x}:{bus:02x}:{device:02x}.{function}"


def parse_entry(item: object) -> GpuRef:
    """One list item (text, or a whole number from a YAML list) as a `GpuRef`.

    Raises:
        ValueError: the item names no GPU; the message is the one-line problem.
    """
    if isinstance(item, float):
        # YAML 1.1 reads an unquoted 0000:07:00.0 as a base-60 number (420.0).
        raise ValueError(
            f"invalid device {show(item)}: {EXPECTED}; in YAML, quote a PCI bus ID "
            '("0000:07:00.0"), which is otherwise read as a number'
        )
    if isinstance(item, bool) or not isinstance(item, int | str):
        raise ValueError(f"invalid device {show(item)}: {EXPECTED}")
    if isinstance(item, int):
        return _index(item, str(item))
    text = item.strip()
    if re.fullmatch(r"-?[0-9]+", text):
        if len(text.lstrip("-")) > _MAX_INDEX_DIGITS:
            raise ValueError(f"invalid device {show(text)}: GPU index out of range")
        return _index(int(text), text)
    found = _GPU_UUID.fullmatch(text)
    if found is not None:
        return GpuRef(RefKind.UUID, f"GPU-{found.group(1).lower()}")
    bus_id = canonical_bus_id(text)
    if bus_id is not None:
        return GpuRef(RefKind.BUS_ID, bus_id)
    if _MIG.fullmatch(text):
        raise ValueError(
            f"invalid device {show(text)}: MIG devices cannot be chosen on their own; "
            "name their GPU (a GPU's MIG devices follow it)"
        )
    if _BUS_ID_WITHOUT_DOMAIN.fullmatch(text):
        raise ValueError(
            f"invalid device {show(text)}: a PCI bus ID needs its domain, as lspci -D "
            f"prints it (0000:{text.lower()})"
        )
    raise ValueError(f"invalid device {show(text)}: {EXPECTED}")


def _index(number: int, text: str) -> GpuRef:
    if number < 0:
        raise ValueError(f"invalid device {show(text)}: a GPU index cannot be negative")
    if number >= 10**_MAX_INDEX_DIGITS:
        raise ValueError(f"invalid device {show(text)}: GPU index out of range")
    return GpuRef(RefKind.INDEX, str(number))


def parse_list(items: Iterable[object]) -> tuple[GpuRef, ...]:
    """Every item parsed, blanks dropped, duplicates removed (first kept, in order).

    Raises:
        ValueError: for the first item that names no GPU.
    """
    refs: dict[GpuRef, None] = {}
    for item in items:
        if isinstance(item, str) and not item.strip():
            continue
        refs.setdefault(parse_entry(item), None)
    return tuple(refs)


def gpu_list(value: object) -> tuple[str, ...]:
    """The check of a flag's value: its entries, canonical; a refusal is one problem line.

    A file may give a YAML list or a comma string. Blank items mean nothing,
    so an empty variable names no GPU.
    """
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, list | tuple):
        raise wrong_type("a list of GPU indexes, UUIDs or PCI bus IDs", value)
    try:
        return tuple(ref.value for ref in parse_list(items))
    except ValueError as error:
        raise value_problem(str(error)) from None
