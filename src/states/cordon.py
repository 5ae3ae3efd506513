"""Cordoning single GPUs by a node annotation: an overlay on the device health machines.

An operator who wants a GPU left alone (a flaky card awaiting an RMA, a
burn-in, a debugging session) writes its UUID, index or PCI bus ID into the
annotation `nvidia.com/gpu.cordon` of the node:

    kubectl annotate node <node> nvidia.com/gpu.cordon=GPU-<uuid>,3

Every device of a named GPU (the GPU itself, its replicas, its MIG devices)
is then Unhealthy to the kubelet, which stops placing new pods on it; pods
that hold it keep running, since a device plugin never evicts. Removing the
annotation, or an entry of it, makes them Healthy again.

A cordon is an overlay, not a health state: the health machine of each
device keeps going underneath, so an XID that arrived before or during the
cordon is still there after it, and the kubelet sees Healthy only once both
say so. That is why the cordon lives beside the `HealthBook` rather than in
its `MOVES`: the book is never written by it.

The annotation is a standing request, read again whenever it or the devices
change (a new inventory after a reconfiguration is matched afresh). It is
not config: an entry that is not a GPU (garbage, a typo) or matches no GPU of
the node is a warning, on `/state` and once in the log, and never stops
serving or the other entries. Entries, comma-separated, whitespace ignored:

- a GPU UUID (`GPU-…`) or a MIG device UUID (`MIG-…`, that device alone);
- a GPU index (`3`) or a MIG device index (`3:1`, as `/state` shows it);
- a PCI bus ID, in NVML's form (`00000000:3B:00.0`), `lspci -D`'s
  (`0000:3b:00.0`) or `lspci`'s (`3b:00.0`).

Moves of the kubelet's view are reported as `HealthChange`s with `cordon`
set, so the loop republishes, and the metrics and Events pick them up on the
path every health change takes; a move of the health machine that the
cordon hides from the kubelet is marked `held`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from enum import StrEnum

from loguru import logger

from devices.model import Gpu, Inventory
from resources.model import Health, PluginDevice
from states.health_status import (
    CORDON_ANNOTATION,
    CordonView,
    DeviceHealth,
    DeviceHealthStatus,
    HealthChange,
)
from states.history import now_rfc3339

__all__ = [
    "CORDONED",
    "CORDON_ANNOTATION",
    "UNCORDONED",
    "CordonBook",
    "CordonEntry",
    "CordonRequest",
    "EntryKind",
    "parse_cordon",
    "resolve_cordon",
]

CORDONED = "cordoned"
UNCORDONED = "uncordoned"
# A long annotation of garbage must not make /state or the log long.
MAX_WARNINGS = 16

_ORIGIN = f"annotation {CORDON_ANNOTATION}"
_UUID = re.compile(r"(?i)(GPU|MIG)-[0-9a-z][0-9a-z/-]*")
_INDEX = re.compile(r"\d{1,4}")
_MIG_INDEX = re.compile(r"(\d{1,4}):(\d{1,4})")
_BUS_ID = re.compile(r"(?i)(?:([0-9a-f]{1,8}):)?([0-9a-f]{1,2}):([0-9a-f]{1,2})\.([0-7])")


class EntryKind(StrEnum):
    UUID = "uuid"
    INDEX = "index"
    MIG_INDEX = "mig index"
    BUS_ID = "bus id"


@dataclass(frozen=True)
class CordonEntry:
    """One entry of the annotation: as written, and in the form it is compared in."""

    text: str
    kind: EntryKind
    key: str


@dataclass(frozen=True)
class CordonRequest:
    """The annotation's value, parsed; `invalid` holds the entries that name nothing."""

    value: str | None = None
    entries: tuple[CordonEntry, ...] = ()
    invalid: tuple[str, ...] = ()


def bus_key(bus_id: str) -> str | None:
    """A PCI bus ID in one form whatever the writer's (NVML, `lspci -D`, `lspci`); None if none."""
    match = _BUS_ID.fullmatch(bus_id.strip())
    if match is None:
        return None
    domain, bus, device, function = match.groups()
    return f"{int(domain or '0', 16):04x}:{int(bus, 16):02x}:{int(device, 16):02x}.{function}"


def _entry(text: str) -> CordonEntry | None:
    if _UUID.fullmatch(text):
        return CordonEntry(text, EntryKind.UUID, text.lower())
    if _INDEX.fullmatch(text):
        return CordonEntry(text, EntryKind.INDEX, str(int(text)))
    if match := _MIG_INDEX.fullmatch(text):
        return CordonEntry(text, EntryKind.MIG_INDEX, f"{int(match[1])}:{int(match[2])}")
    key = bus_key(text)
    return None if key is None else CordonEntry(text, EntryKind.BUS_ID, key)


def parse_cordon(value: str | None) -> CordonRequest:
    """The annotation's entries; empty ones (a trailing comma) are skipped, never an error."""
    if value is None:
        return CordonRequest()
    entries: list[CordonEntry] = []
    invalid: list[str] = []
    for part in value.split(","):
        text = part.strip()
        if not text:
            continue
        entry = _entry(text)
        if entry is None:
            invalid.append(text)
        elif entry not in entries:
            entries.append(entry)
    return CordonRequest(value, tuple(entries), tuple(invalid))


@dataclass(frozen=True)
class Resolution:
    """What a request means on one inventory: the devices held, and what to tell the operator."""

    devices: tuple[str, ...] = ()  # GPU and MIG UUIDs, in inventory order
    gpus: tuple[str, ...] = ()  # the GPUs named, whole or in part
    warnings: tuple[str, ...] = ()


def _seen(healthy: bool) -> DeviceHealth:
    """The kubelet's view of a device that is not cordoned, in the machine's words."""
    return DeviceHealth.HEALTHY if healthy else DeviceHealth.UNHEALTHY


def _quoted(text: str) -> str:
    return '"' + (text if len(text) <= 64 else text[:61] + "...") + '"'


def _names(entry: CordonEntry, gpu: Gpu) -> tuple[str, ...]:
    """The devices of `gpu` that `entry` names: all of them, one MIG device, or none."""
    whole = (gpu.uuid, *(mig.uuid for mig in gpu.mig_devices))
    match entry.kind:
        case EntryKind.UUID:
            if entry.key == gpu.uuid.lower():
                return whole
            return tuple(m.uuid for m in gpu.mig_devices if m.uuid.lower() == entry.key)
        case EntryKind.INDEX:
            return whole if entry.key == str(gpu.index) else ()
        case EntryKind.MIG_INDEX:
            return tuple(m.uuid for m in gpu.mig_devices if m.index == entry.key)
        case EntryKind.BUS_ID:
            return whole if entry.key == bus_key(gpu.pci_bus_id) else ()


def resolve_cordon(request: CordonRequest, inventory: Inventory | None) -> Resolution:
    """The devices `request` names on `inventory`, and a warning for every entry that names none."""
    gpus = inventory.gpus if inventory is not None else ()
    held: set[str] = set()
    unmatched: list[CordonEntry] = []
    for entry in request.entries:
        named = {uuid for gpu in gpus for uuid in _names(entry, gpu)}
        if not named:
            unmatched.append(entry)
        held |= named
    warnings = [f"{_ORIGIN}: {_quoted(text)}: not a GPU UUID, index or PCI bus ID"
                for text in request.invalid]  # fmt: skip
    warnings += [f"{_ORIGIN}: {_quoted(entry.text)}: no such GPU on this node"
                 for entry in unmatched]  # fmt: skip
    if len(warnings) > MAX_WARNINGS:
        more = len(warnings) - MAX_WARNINGS + 1
        warnings = [*warnings[: MAX_WARNINGS - 1], f"{_ORIGIN}: {more} more entries name no GPU"]
    return Resolution(
        devices=tuple(uuid for uuid in _device_order(inventory) if uuid in held),
        gpus=tuple(
            gpu.uuid
            for gpu in gpus
            if gpu.uuid in held or any(mig.uuid in held for mig in gpu.mig_devices)
        ),
        warnings=tuple(warnings),
    )


def _device_order(inventory: Inventory | None) -> list[str]:
    """Every GPU and MIG device UUID, each GPU followed by its MIG devices."""
    if inventory is None:
        return []
    return [u for gpu in inventory.gpus for u in (gpu.uuid, *(m.uuid for m in gpu.mig_devices))]


class CordonBook:
    """The standing request and what it holds now; used on the reconcile loop's thread only.

    `want` takes a new annotation value and `follow` a new inventory; neither
    moves anything until `settle` reports the moves, so the health monitor
    decides when the kubelet hears of them.
    """

    def __init__(self) -> None:
        self.off: str | None = None  # why the annotation is not read; None while it is
        self._request = CordonRequest()
        self._inventory: Inventory | None = None
        self._settled: tuple[CordonRequest, Inventory] | None = None
        self._resolution = Resolution()
        self._since: dict[str, str] = {}  # held device -> when it was cordoned (RFC 3339)
        # The entries last logged: the same entries written another way are quiet.
        self._said: tuple[object, ...] = ((), ())

    def want(self, value: str | None) -> None:
        if value != self._request.value:
            self._request = parse_cordon(value)

    def follow(self, inventory: Inventory) -> None:
        self._inventory = inventory

    def settle(self, healthy: Callable[[str], bool]) -> list[HealthChange]:
        """Match the request against the devices again if either changed; the moves it makes.

        `healthy(uuid)` is the health machine's own verdict on a device: a
        cordon on an unhealthy device moves nothing the kubelet sees, and
        releasing it leaves it unhealthy.
        """
        if self._inventory is None or self._settled == (self._request, self._inventory):
            return []
        before = set(self._resolution.devices)
        resolution = resolve_cordon(self._request, self._inventory)
        meaning = (self._request.entries, self._request.invalid)
        if meaning != self._said:
            self._said = meaning
            self._say(resolution)
        self._settled, self._resolution = (self._request, self._inventory), resolution
        at = now_rfc3339()
        order = _device_order(self._inventory)
        changes: list[HealthChange] = []
        unhealthy = DeviceHealth.UNHEALTHY
        for uuid in resolution.devices:
            if uuid not in before:
                self._since[uuid] = at
                was = _seen(healthy(uuid))
                changes.append(HealthChange(uuid, was, unhealthy, CORDONED, at, cordon=True))
        for uuid in order:  # a device gone from the node has nobody left to tell
            if uuid in before and uuid not in resolution.devices:
                now = _seen(healthy(uuid))
                changes.append(HealthChange(uuid, unhealthy, now, UNCORDONED, at, cordon=False))
        for uuid in before - set(resolution.devices):
            del self._since[uuid]
        return changes

    def holds(self, uuid: str) -> bool:
        return uuid in self._since

    def hold(self, changes: Iterable[HealthChange]) -> list[HealthChange]:
        """Machine moves, marked `held` where a cordon keeps the kubelet's view as it was."""
        return [replace(c, held=True) if self.holds(c.uuid) else c for c in changes]

    def devices(self, devices: Iterable[PluginDevice]) -> tuple[PluginDevice, ...]:
        """Advertised devices with the cordoned ones Unhealthy (replicas carry their GPU's UUID)."""
        return tuple(d.with_health(Health.UNHEALTHY) if self.holds(d.uuid) else d for d in devices)

    def statuses(
        self, statuses: Mapping[str, DeviceHealthStatus]
    ) -> Mapping[str, DeviceHealthStatus]:
        """The health book's statuses with the cordon laid over them.

        A cordoned device whose machine is healthy says `cordoned` as its
        reason, since the cordon; one with an error of its own keeps that
        error as its reason (it outlasts the cordon).
        """
        if not self._since:
            return statuses
        overlaid = dict(statuses)
        for uuid, since in self._since.items():
            status = statuses.get(uuid)
            if status is None:
                continue
            if status.reason is None:
                overlaid[uuid] = replace(status, cordoned=True, reason=CORDONED, since=since)
            else:
                overlaid[uuid] = replace(status, cordoned=True)
        return overlaid

    def view(self) -> CordonView:
        resolution = self._resolution
        return CordonView(
            value=self._request.value,
            devices=resolution.devices,
            gpus=resolution.gpus,
            warnings=resolution.warnings,
            off=self.off,
        )

    def _say(self, resolution: Resolution) -> None:
        """One line per new annotation value: what it cordons, and what it could not match."""
        if resolution.warnings:
            logger.warning("{}", "; ".join(resolution.warnings))
        if resolution.gpus:
            logger.info(
                "{}: {} device(s) cordoned, on {}",
                _ORIGIN,
                len(resolution.devices),
                ", ".join(resolution.gpus),
            )
        else:
            logger.info("{}: no GPU is cordoned", _ORIGIN)
