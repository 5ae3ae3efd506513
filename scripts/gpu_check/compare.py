"""Field-by-field comparison of our discovery with nvidia-smi's table.

Both sides are shown as read; only the comparison normalises, and only for
differences of spelling that nvidia-smi and NVML are known to have: memory
with or without its unit, a PCI bus ID with a 4- or 8-digit domain and
either letter case, MIG mode `[N/A]` or `N/A`. Anything else that differs is
a DIFF, because a DIFF is exactly what the check exists to find.

GPUs are paired by UUID; GPUs whose UUID the other side does not know are
paired by position, so a wrong UUID shows up as one DIFF instead of a
missing GPU on each side.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from devices.model import Gpu, Inventory

ABSENT = "-"  # shown for a GPU that one side does not have


def _text(value: str) -> str:
    return value.strip()


def _memory(value: str) -> str:
    number = re.sub(r"\s*mib\s*$", "", value.strip(), flags=re.IGNORECASE)
    return str(int(number)) if number.isdigit() else number.lower()


def _bus_id(value: str) -> str:
    parts = value.strip().lower().split(":")
    if len(parts) == 3 and re.fullmatch(r"[0-9a-f]{1,8}", parts[0]):
        parts[0] = parts[0].zfill(8)
    return ":".join(parts)


def _compute_cap(value: str) -> str:
    match = re.fullmatch(r"\s*(\d+)\.(\d+)\s*", value)
    return f"{int(match[1])}.{int(match[2])}" if match else value.strip()


def _mig_mode(value: str) -> str:
    bare = value.strip().strip("[]").strip().lower()
    return "n/a" if bare in ("n/a", "not supported") else bare


def our_mig_mode(gpu: Gpu) -> str:
    """The MIG mode in nvidia-smi's words."""
    if not gpu.mig_capable:
        return "[N/A]"
    return "Enabled" if gpu.mig_enabled else "Disabled"


@dataclass(frozen=True)
class Field:
    """One compared column: nvidia-smi's name, how to read ours, how to normalise both."""

    smi: str
    ours: Callable[[Gpu, Inventory], str]
    normalise: Callable[[str], str]


FIELDS = (
    Field("uuid", lambda g, _: g.uuid, _text),
    Field("name", lambda g, _: g.name, _text),
    Field("memory.total", lambda g, _: str(g.memory_mib), _memory),
    Field("pci.bus_id", lambda g, _: g.pci_bus_id, _bus_id),
    Field("compute_cap", lambda g, _: g.compute_capability, _compute_cap),
    Field("driver_version", lambda _, inv: inv.driver_version, _text),
    Field("mig.mode.current", lambda g, _: our_mig_mode(g), _mig_mode),
)


@dataclass(frozen=True)
class FieldCheck:
    field: str
    ours: str
    theirs: str
    match: bool

    @property
    def verdict(self) -> str:
        return "MATCH" if self.match else "DIFF"


@dataclass(frozen=True)
class GpuCheck:
    """The comparison of one GPU; `title` says which GPU and how it was paired."""

    title: str
    fields: tuple[FieldCheck, ...]

    @property
    def diffs(self) -> int:
        return sum(not f.match for f in self.fields)


def same(field: Field, ours: str, theirs: str) -> bool:
    """Whether two values of `field` agree once spelling differences are set aside."""
    return field.normalise(ours) == field.normalise(theirs)


def _check(gpu: Gpu | None, row: Mapping[str, str] | None, inventory: Inventory) -> GpuCheck:
    checks = []
    for field in FIELDS:
        ours = field.ours(gpu, inventory) if gpu is not None else ABSENT
        theirs = row.get(field.smi, ABSENT) if row is not None else ABSENT
        match = gpu is not None and row is not None and same(field, ours, theirs)
        checks.append(FieldCheck(field.smi, ours, theirs, match))
    if gpu is None:
        title = f"nvidia-smi GPU {row.get('uuid', '?') if row else '?'}: not discovered by us"
    elif row is None:
        title = f"GPU {gpu.index} {gpu.uuid}: not listed by nvidia-smi"
    else:
        how = "by UUID" if row.get("uuid", "").strip() == gpu.uuid else "by position"
        title = f"GPU {gpu.index} {gpu.uuid} (paired {how})"
    return GpuCheck(title, tuple(checks))


def compare(inventory: Inventory, rows: Sequence[Mapping[str, str]]) -> tuple[GpuCheck, ...]:
    """Pair every discovered GPU with an nvidia-smi row and compare each field."""
    by_uuid = {row.get("uuid", "").strip(): row for row in rows}
    paired: list[tuple[Gpu | None, Mapping[str, str] | None]] = []
    used: set[int] = set()
    unmatched: list[Gpu] = []
    for gpu in inventory.gpus:
        row = by_uuid.get(gpu.uuid)
        if row is None:
            unmatched.append(gpu)
            continue
        used.add(id(row))
        paired.append((gpu, row))
    leftover = [row for row in rows if id(row) not in used]
    for gpu in unmatched:
        paired.append((gpu, leftover.pop(0) if leftover else None))
    paired.extend((None, row) for row in leftover)
    return tuple(_check(gpu, row, inventory) for gpu, row in paired)


def render(checks: Sequence[GpuCheck]) -> list[str]:
    """Side-by-side tables, one per GPU: field, ours, nvidia-smi, MATCH/DIFF."""
    lines: list[str] = []
    for check in checks:
        rows = [("field", "ours", "nvidia-smi", "result")]
        rows += [(f.field, f.ours, f.theirs, f.verdict) for f in check.fields]
        widths = [max(len(row[i]) for row in rows) for i in range(3)]
        lines.append(check.title)
        lines.extend(
            "  "
            + "  ".join(value.ljust(w) for value, w in zip(row[:3], widths, strict=True))
            + "  "
            + row[3]
            for row in rows
        )
    return lines
