"""The node's GPUs as DRA devices, packed into ResourceSlice objects (`resource.k8s.io/v1`).

In DRA mode the node announces its devices in ResourceSlices instead of
registering resources with the kubelet. This module is the pure half of that:
`slice_devices` turns the inventory into devices named and described as
NVIDIA's DRA driver does, so DeviceClasses and claims written for that driver
select the same devices here; `pack` lays them out in slice objects. Writing
them to the API is `kube.resource_slices`.

- **Which devices**: the same as the device plugin's under the MIG strategy
  (`devicemap`): `none` offers every GPU whole; `single` and `mixed` offer
  the MIG devices of MIG-enabled GPUs and the other GPUs whole. `single`
  also promises a uniform node, and a node that breaks the promise is refused
  with the device plugin's own error; resource names play no part (a
  `1c.3g.20gb` compute instance has no `nvidia.com/mig-*` name, but is a DRA
  device under `mixed`). In inventory order: GPU by GPU, each GPU's MIG
  devices by slot.
- **Names**: `gpu-<minor>` for a GPU and `gpu-<minor>-mig-<profile>-<profile
  id>-<placement start>` for a MIG device (the profile without dots, `+`
  turned into `-`: `gpu-0-mig-1g5gb-me-20-6`). Where the inventory does not
  know a MIG device's profile id or placement, or two devices would get one
  name, the device is named after its instances instead
  (`gpu-0-mig-1g5gb-gi7-ci0`), which NVIDIA's driver never produces.
- **Attributes** as NVIDIA's driver publishes them, versions as semver
  (`driverVersion` 535.104.05 -> `535.104.5`, `cudaComputeCapability` 8.0 ->
  `8.0.0`); what the inventory does not know is left out, never guessed.
- **Capacity**: `memory` in bytes (as a canonical quantity, `40Gi`, which is
  how the API server would store it, so comparing with what it returns is
  exact); a MIG device also has its multiprocessors and engines when known.
- **Health as taints**: an unhealthy device carries `gpu.nvidia.com/xid`
  (value: the XID), `gpu.nvidia.com/gpu-lost`, or, for any other reason (a
  double-bit ECC error, a failing NVML call), `gpu.nvidia.com/unhealthy` with
  the reason as value; effect `NoSchedule`, `timeAdded` the health machine's
  `since`. Health comes in as a plain mapping (uuid -> (reason, since)).
- **Limits**: at most 128 devices a slice, 64 in a slice where a device has
  taints or consumes counters, at most 32 attributes plus capacities a device.
  Devices fill slices in order; a full slice (or one a tainted device would
  overfill) closes.
- **Counters** (dynamic MIG, `resources.dra_partitions`): counter sets
  (`spec.sharedCounters`) and the devices that consume them
  (`consumesCounters`). From Kubernetes 1.35 a slice holds counter sets or
  devices, never both (`counters_apart`): the sets go in slices of their own,
  at most 8 a slice. Before 1.35 a device can only consume a set of its own
  slice: each set goes with its devices, at most 32 counters in all the
  sets of a slice and 1024 counters consumed by its devices. The devices of
  one counter set are never split across slices where they fit in one.
- **Slices** are named `<node>-<driver>-<n>`, belong to the pool named after
  the node, say how many slices make the pool and carry the pool's
  generation (which the publisher owns), and are owned by the Node, so they
  go when the Node does. A node without devices publishes one empty slice:
  the pool exists, and says there is nothing in it.

Same inputs, same objects, so a publisher comparing them with what the API
holds finds no difference when nothing changed.
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

from devices.model import Gpu, Inventory, MigDevice, MigPlacement
from resources.devicemap import device_map, visible_gpus
from resources.dra_values import (
    architecture,
    label_value,
    pci_bus_id,
    quantity,
    semver,
    whole_seconds,
)
from resources.options import MigStrategy

__all__ = [
    "API_VERSION",
    "COUNTERS_APART_SINCE",
    "MAX_ATTRIBUTES_AND_CAPACITIES",
    "MAX_CONSUMPTIONS_PER_DEVICE",
    "MAX_COUNTERS_PER_DEVICE",
    "MAX_COUNTERS_PER_SET",
    "MAX_COUNTER_SETS",
    "MAX_DEVICES",
    "MAX_DEVICES_WITH_TAINTS",
    "MAX_DEVICE_COUNTERS",
    "MAX_SHARED_COUNTERS",
    "Attribute",
    "AttributeType",
    "CounterConsumption",
    "CounterSet",
    "DeviceHealthView",
    "DeviceTaint",
    "Kind",
    "SliceDevice",
    "common_attributes",
    "counters_apart",
    "gpu_device",
    "pack",
    "profile_label",
    "slice_devices",
    "slice_name",
    "with_health",
]

API_VERSION = "resource.k8s.io/v1"
# The API's validation limits (k8s.io/api resource/v1 types.go and
# pkg/apis/resource/validation; see docs/dra.md "Dynamic MIG").
MAX_DEVICES = 128  # ResourceSliceMaxDevices
# ResourceSliceMaxDevicesWithTaintsOrConsumesCounters (1.35): a slice where a
# device has taints or consumes counters.
MAX_DEVICES_WITH_TAINTS = 64
MAX_ATTRIBUTES_AND_CAPACITIES = 32
MAX_COUNTER_SETS = 8  # ResourceSliceMaxCounterSets (1.35): counter sets in a slice
MAX_COUNTERS_PER_SET = 32  # ResourceSliceMaxCountersPerCounterSet (1.35)
MAX_CONSUMPTIONS_PER_DEVICE = 2  # ResourceSliceMaxDeviceCounterConsumptionsPerDevice (1.35)
# ResourceSliceMaxCountersPerDeviceCounterConsumption (1.35); before, the
# counters of all of a device's consumptions (ResourceSliceMaxCountersPerDevice).
MAX_COUNTERS_PER_DEVICE = 32
MAX_SHARED_COUNTERS = 32  # ResourceSliceMaxSharedCounters (1.34): all sets of a slice
MAX_DEVICE_COUNTERS = 1024  # ResourceSliceMaxDeviceCountersPerSlice (1.34)
# From this Kubernetes version a slice holds counter sets or devices, not both.
COUNTERS_APART_SINCE = (1, 35)
PCI_BUS_ID = "resource.kubernetes.io/pciBusID"
TAINT_XID = "gpu.nvidia.com/xid"
TAINT_LOST = "gpu.nvidia.com/gpu-lost"
TAINT_UNHEALTHY = "gpu.nvidia.com/unhealthy"
NO_SCHEDULE = "NoSchedule"

# uuid -> (reason, since): the health machine's view of the devices that are not healthy.
DeviceHealthView = Mapping[str, tuple[str, str]]

_MIB = 1 << 20
_XID = re.compile(r"^xid (\d+)$")
_SUBDOMAIN_MAX = 253


class Kind(StrEnum):
    GPU = "gpu"
    MIG = "mig"


class AttributeType(StrEnum):
    STRING = "string"
    INT = "int"
    BOOL = "bool"
    VERSION = "version"


@dataclass(frozen=True)
class Attribute:
    """One device attribute: exactly one typed value, as the API spells it."""

    type: AttributeType
    value: str | int | bool

    def to_json(self) -> dict[str, Any]:
        return {str(self.type): self.value}


@dataclass(frozen=True)
class DeviceTaint:
    key: str
    value: str = ""
    effect: str = NO_SCHEDULE
    time_added: str = ""  # RFC 3339, whole seconds (what the API server stores)

    def to_json(self) -> dict[str, Any]:
        taint: dict[str, Any] = {"key": self.key}
        if self.value:
            taint["value"] = self.value
        taint["effect"] = self.effect
        if self.time_added:
            taint["timeAdded"] = self.time_added
        return taint


def _counters_json(counters: tuple[tuple[str, str], ...]) -> dict[str, Any]:
    return {name: {"value": value} for name, value in counters}


@dataclass(frozen=True)
class CounterSet:
    """One counter set of the pool (`spec.sharedCounters[]`): what its devices share."""

    name: str
    counters: tuple[tuple[str, str], ...]  # name -> quantity

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "counters": _counters_json(self.counters)}


@dataclass(frozen=True)
class CounterConsumption:
    """What a device takes of one counter set once allocated (`consumesCounters[]`)."""

    counter_set: str
    counters: tuple[tuple[str, str], ...]  # name -> quantity

    def to_json(self) -> dict[str, Any]:
        return {"counterSet": self.counter_set, "counters": _counters_json(self.counters)}


@dataclass(frozen=True)
class SliceDevice:
    """One DRA device and what it stands for (`uuid`: the GPU or MIG device it is).

    A dynamic MIG placement (`placement` set) is not a MIG device yet: its
    `uuid` is its GPU's, so the GPU's health is its health.
    """

    name: str
    kind: Kind
    uuid: str
    parent_uuid: str  # the GPU's own UUID for a GPU
    attributes: tuple[tuple[str, Attribute], ...]
    capacity: tuple[tuple[str, str], ...]  # name -> quantity
    taints: tuple[DeviceTaint, ...] = ()
    consumes: tuple[CounterConsumption, ...] = ()
    # Set for a dynamic MIG placement: preparing the device creates this MIG instance.
    placement: MigPlacement | None = None

    @property
    def counters_consumed(self) -> int:
        return sum(len(consumption.counters) for consumption in self.consumes)

    def to_json(self) -> dict[str, Any]:
        device: dict[str, Any] = {
            "name": self.name,
            "attributes": {key: value.to_json() for key, value in self.attributes},
            "capacity": {key: {"value": value} for key, value in self.capacity},
        }
        if self.consumes:
            device["consumesCounters"] = [item.to_json() for item in self.consumes]
        if self.taints:
            device["taints"] = [taint.to_json() for taint in self.taints]
        return device


def slice_devices(
    inventory: Inventory, mig_strategy: MigStrategy, health: DeviceHealthView | None = None
) -> list[SliceDevice]:
    """The node's devices under `mig_strategy`, in inventory order.

    Raises:
        ResourceError: the node cannot be offered under this MIG strategy (the
            device plugin's own checks, e.g. `single` on a mixed node).
    """
    if mig_strategy is MigStrategy.SINGLE:
        device_map(inventory, mig_strategy)  # the strategy's promise about the node, checked
    health = health or {}
    entries: list[tuple[Gpu, MigDevice | None]] = []
    for gpu in visible_gpus(inventory):
        if not gpu.mig_enabled or mig_strategy is MigStrategy.NONE:
            entries.append((gpu, None))
            continue
        entries += [(gpu, mig) for mig in sorted(gpu.mig_devices, key=lambda m: m.slot)]
    names = [f"gpu-{gpu.minor}" if mig is None else _mig_name(gpu, mig) for gpu, mig in entries]
    # Compute instances of one GPU instance share its placement, hence its name.
    taken = Counter(names)
    common = {gpu.uuid: common_attributes(inventory, gpu) for gpu, _ in entries}
    devices = []
    for (gpu, mig), name in zip(entries, names, strict=True):
        if mig is None:
            devices.append(gpu_device(gpu, common[gpu.uuid], health.get(gpu.uuid)))
            continue
        if taken[name] > 1:
            name = _instance_name(gpu, mig)
        devices.append(_mig_device(gpu, mig, name, common[gpu.uuid], health.get(mig.uuid)))
    return devices


def with_health(devices: Sequence[SliceDevice], health: DeviceHealthView) -> list[SliceDevice]:
    """`devices` with the taints `health` calls for (and none on a healthy device)."""
    return [
        device
        if device.taints == (taints := _taints(health.get(device.uuid)))
        else replace(device, taints=taints)
        for device in devices
    ]


def pack(
    devices: Sequence[SliceDevice],
    *,
    driver: str,
    node: str,
    pool_generation: int,
    owner_uid: str = "",
    counter_sets: Sequence[CounterSet] = (),
    counters_apart: bool = False,
) -> list[dict[str, Any]]:
    """The ResourceSlice objects that publish `devices` (and `counter_sets`) as the node's pool.

    `owner_uid` is the Node's uid; without one the slices carry no owner.
    `counters_apart` (Kubernetes >= 1.35, `counters_apart()`) puts the counter
    sets in slices of their own, first; otherwise each set goes in the slice
    of the devices that consume it. Without counter sets the layout is the
    same either way.

    Raises:
        ValueError: a device or a counter set is beyond what the API allows, a
            device consumes a counter set or counter that is not published, or
            (in the older layout) the devices of one counter set do not fit
            one slice.
    """
    _check(devices, counter_sets, combined=not counters_apart)
    groups = _groups(devices, counter_sets)
    if counter_sets and counters_apart:
        chunks = [
            _Chunk(sets=list(counter_sets[i : i + MAX_COUNTER_SETS]), with_devices=False)
            for i in range(0, len(counter_sets), MAX_COUNTER_SETS)
        ]
        filled = _fill_apart(groups)
        chunks += [chunk for chunk in filled if chunk.devices]
    else:
        chunks = _fill_together(groups)
    owner = (
        [{"apiVersion": "v1", "kind": "Node", "name": node, "uid": owner_uid, "controller": True}]
        if owner_uid
        else []
    )
    slices = []
    for index, chunk in enumerate(chunks):
        metadata: dict[str, Any] = {"name": slice_name(node, driver, index)}
        if owner:
            metadata["ownerReferences"] = owner
        spec: dict[str, Any] = {
            "driver": driver,
            "nodeName": node,
            "pool": {
                "name": node,
                "generation": pool_generation,
                "resourceSliceCount": len(chunks),
            },
        }
        if chunk.with_devices:
            spec["devices"] = [device.to_json() for device in chunk.devices]
        if chunk.sets:
            spec["sharedCounters"] = [counter_set.to_json() for counter_set in chunk.sets]
        slices.append(
            {"apiVersion": API_VERSION, "kind": "ResourceSlice", "metadata": metadata, "spec": spec}
        )
    return slices


def counters_apart(version: tuple[int, int] | None) -> bool:
    """Whether Kubernetes `version` (major, minor) takes counter sets in slices of their own.

    None (the version could not be read) is taken as an older server.
    """
    return version is not None and version >= COUNTERS_APART_SINCE


def slice_name(node: str, driver: str, index: int) -> str:
    """`<node>-<driver>-<index>`, shortened with a digest where it would pass 253 characters."""
    name = f"{node}-{driver}-{index}"
    if len(name) <= _SUBDOMAIN_MAX:
        return name
    digest = hashlib.sha256(f"{node}/{driver}".encode()).hexdigest()[:10]
    tail = f"-{digest}-{index}"
    head = f"{node}-{driver}"[: _SUBDOMAIN_MAX - len(tail)].rstrip("-.")
    return head + tail


# -- devices -------------------------------------------------------------------


def common_attributes(inventory: Inventory, gpu: Gpu) -> list[tuple[str, Attribute]]:
    """What a GPU and its MIG devices share: product, versions, PCI address."""
    found: list[tuple[str, Attribute]] = [("productName", _string(gpu.name))]
    if gpu.brand is not None:
        found.append(("brand", _string(gpu.brand)))
    arch = architecture(gpu.compute_capability)
    if arch is not None:
        found.append(("architecture", _string(arch)))
    for key, text in (
        ("cudaComputeCapability", gpu.compute_capability),
        ("driverVersion", inventory.driver_version),
        ("cudaDriverVersion", inventory.cuda_driver_version),
    ):
        version = semver(text)
        if version is not None:
            found.append((key, Attribute(AttributeType.VERSION, version)))
    bus = pci_bus_id(gpu.pci_bus_id)
    if bus is not None:
        found.append((PCI_BUS_ID, _string(bus)))
    return found


def gpu_device(
    gpu: Gpu, common: list[tuple[str, Attribute]], health: tuple[str, str] | None
) -> SliceDevice:
    attributes = [("type", _string(Kind.GPU)), ("uuid", _string(gpu.uuid)), *common]
    capacity = [("memory", quantity(gpu.memory_mib * _MIB))] if gpu.memory_mib > 0 else []
    return SliceDevice(
        name=f"gpu-{gpu.minor}",
        kind=Kind.GPU,
        uuid=gpu.uuid,
        parent_uuid=gpu.uuid,
        attributes=tuple(sorted(attributes, key=_first)),
        capacity=tuple(sorted(capacity, key=_first)),
        taints=_taints(health),
    )


def _mig_device(
    gpu: Gpu,
    mig: MigDevice,
    name: str,
    common: list[tuple[str, Attribute]],
    health: tuple[str, str] | None,
) -> SliceDevice:
    attributes = [
        ("type", _string(Kind.MIG)),
        ("uuid", _string(mig.uuid)),
        ("parentUUID", _string(gpu.uuid)),
        ("profile", _string(mig.profile)),
        *common,
    ]
    capacity = [("memory", quantity(mig.memory_mib * _MIB))]
    engines = mig.attributes
    if engines is not None:
        capacity += [
            ("multiprocessors", quantity(engines.multiprocessors)),
            ("copyEngines", quantity(engines.copy_engines)),
            ("decoders", quantity(engines.decoders)),
            ("encoders", quantity(engines.encoders)),
            ("jpegEngines", quantity(engines.jpegs)),
            ("ofaEngines", quantity(engines.ofas)),
        ]
    return SliceDevice(
        name=name,
        kind=Kind.MIG,
        uuid=mig.uuid,
        parent_uuid=gpu.uuid,
        attributes=tuple(sorted(attributes, key=_first)),
        capacity=tuple(sorted(capacity, key=_first)),
        taints=_taints(health),
    )


def profile_label(profile: str) -> str:
    """`1g.5gb+me` -> `1g5gb-me`: a profile as a part of a DNS label."""
    text = re.sub(r"[^a-z0-9-]", "-", profile.lower().replace(".", ""))
    return text.strip("-")


def _mig_name(gpu: Gpu, mig: MigDevice) -> str:
    if mig.profile_id is None or mig.placement_start is None:
        return _instance_name(gpu, mig)
    return (
        f"gpu-{gpu.minor}-mig-{profile_label(mig.profile)}-{mig.profile_id}-{mig.placement_start}"
    )


def _instance_name(gpu: Gpu, mig: MigDevice) -> str:
    return f"gpu-{gpu.minor}-mig-{profile_label(mig.profile)}-gi{mig.gi}-ci{mig.ci}"


def _taints(health: tuple[str, str] | None) -> tuple[DeviceTaint, ...]:
    if health is None:
        return ()
    reason, since = health
    added = whole_seconds(since)
    xid = _XID.match(reason)
    if xid is not None:
        return (DeviceTaint(TAINT_XID, xid.group(1), time_added=added),)
    if reason == "lost":
        return (DeviceTaint(TAINT_LOST, time_added=added),)
    return (DeviceTaint(TAINT_UNHEALTHY, label_value(reason), time_added=added),)


def _first(item: tuple[str, object]) -> str:
    return item[0]


def _string(value: str) -> Attribute:
    return Attribute(AttributeType.STRING, str(value))


# -- packing -------------------------------------------------------------------


@dataclass
class _Chunk:
    """One slice being filled: its devices and counter sets."""

    devices: list[SliceDevice] = field(default_factory=list)
    sets: list[CounterSet] = field(default_factory=list)
    with_devices: bool = True  # False: a slice of counter sets only

    def fits(
        self, sets: Sequence[CounterSet], devices: Sequence[SliceDevice], *, combined: bool
    ) -> bool:
        """Whether the slice stays within the API's limits with `sets` and `devices` added."""
        both = [*self.devices, *devices]
        flagged = any(device.taints or device.consumes for device in both)
        if len(both) > (MAX_DEVICES_WITH_TAINTS if flagged else MAX_DEVICES):
            return False
        if len(self.sets) + len(sets) > MAX_COUNTER_SETS:
            return False
        if not combined:
            return True
        shared = sum(len(counter_set.counters) for counter_set in (*self.sets, *sets))
        consumed = sum(device.counters_consumed for device in both)
        return shared <= MAX_SHARED_COUNTERS and consumed <= MAX_DEVICE_COUNTERS

    def add(self, sets: Sequence[CounterSet], devices: Sequence[SliceDevice]) -> None:
        self.sets += sets
        self.devices += devices


# The counter sets a run of devices consumes, and those devices (no sets: one device).
_Group = tuple[list[CounterSet], list[SliceDevice]]


def _groups(devices: Sequence[SliceDevice], counter_sets: Sequence[CounterSet]) -> list[_Group]:
    """The devices in runs that consume the same counter sets, each set with its run.

    A set no device consumes is a run without devices, at the end.

    Raises:
        ValueError: the devices of one counter set are not one run (they could
            not share a slice with it).
    """
    by_name = {counter_set.name: counter_set for counter_set in counter_sets}
    runs: list[tuple[tuple[str, ...], list[SliceDevice]]] = []
    consumed: set[str] = set()
    for device in devices:
        names = tuple(consumption.counter_set for consumption in device.consumes)
        if names and runs and runs[-1][0] == names:
            runs[-1][1].append(device)
            continue
        for name in names:
            if name in consumed:
                raise ValueError(
                    f"device {device.name}: counter set {name} is consumed by devices "
                    "that are not next to each other"
                )
        consumed.update(names)
        runs.append((names, [device]))
    groups: list[_Group] = [([by_name[name] for name in names], run) for names, run in runs]
    groups += [([s], []) for s in counter_sets if s.name not in consumed]
    return groups


def _fill_together(groups: Sequence[_Group]) -> list[_Chunk]:
    """Slices of devices, each counter set in the slice of its devices (one empty slice: none)."""
    chunks = [_Chunk()]
    for sets, devices in groups:
        if not chunks[-1].fits(sets, devices, combined=True):
            chunks.append(_Chunk())
            if not chunks[-1].fits(sets, devices, combined=True):
                names = ", ".join(counter_set.name for counter_set in sets)
                raise ValueError(
                    f"counter set {names} and its {len(devices)} devices do not fit one "
                    "ResourceSlice"
                )
        chunks[-1].add(sets, devices)
    return chunks


def _fill_apart(groups: Sequence[_Group]) -> list[_Chunk]:
    """Slices of devices only; a run that fits one slice is never split."""
    chunks = [_Chunk()]
    for _, devices in groups:
        if not devices:
            continue
        if not chunks[-1].fits((), devices, combined=False):
            if _Chunk().fits((), devices, combined=False):
                chunks.append(_Chunk())
            else:  # larger than a slice: device by device
                for device in devices:
                    if not chunks[-1].fits((), (device,), combined=False):
                        chunks.append(_Chunk())
                    chunks[-1].add((), (device,))
                continue
        chunks[-1].add((), devices)
    return chunks


def _check(
    devices: Sequence[SliceDevice], counter_sets: Sequence[CounterSet], *, combined: bool
) -> None:
    """Raise ValueError for what the API would refuse in any slice."""
    sets: dict[str, set[str]] = {}
    for counter_set in counter_sets:
        where = f"counter set {counter_set.name}"
        if counter_set.name in sets:
            raise ValueError(f"{where}: published twice")
        if not 0 < len(counter_set.counters) <= MAX_COUNTERS_PER_SET:
            raise ValueError(
                f"{where}: {len(counter_set.counters)} counters, the API allows 1 to "
                f"{MAX_COUNTERS_PER_SET}"
            )
        sets[counter_set.name] = {name for name, _ in counter_set.counters}
    for device in devices:
        count = len(device.attributes) + len(device.capacity)
        if count > MAX_ATTRIBUTES_AND_CAPACITIES:
            raise ValueError(
                f"device {device.name}: {count} attributes and capacities, "
                f"the API allows {MAX_ATTRIBUTES_AND_CAPACITIES}"
            )
        _check_consumes(device, sets, combined=combined)


def _check_consumes(device: SliceDevice, sets: Mapping[str, set[str]], *, combined: bool) -> None:
    where = f"device {device.name}"
    names = [consumption.counter_set for consumption in device.consumes]
    if len(names) > MAX_CONSUMPTIONS_PER_DEVICE or len(set(names)) != len(names):
        raise ValueError(
            f"{where}: consumes {len(names)} counter sets, the API allows "
            f"{MAX_CONSUMPTIONS_PER_DEVICE}, each once"
        )
    if combined and device.counters_consumed > MAX_COUNTERS_PER_DEVICE:
        raise ValueError(
            f"{where}: consumes {device.counters_consumed} counters, the API allows "
            f"{MAX_COUNTERS_PER_DEVICE}"
        )
    for consumption in device.consumes:
        known = sets.get(consumption.counter_set)
        if known is None:
            raise ValueError(f"{where}: counter set {consumption.counter_set} is not published")
        counters = [name for name, _ in consumption.counters]
        if not 0 < len(counters) <= MAX_COUNTERS_PER_DEVICE:
            raise ValueError(
                f"{where}: consumes {len(counters)} counters of {consumption.counter_set}, "
                f"the API allows 1 to {MAX_COUNTERS_PER_DEVICE}"
            )
        unknown = sorted(set(counters) - known)
        if unknown:
            raise ValueError(
                f"{where}: counter set {consumption.counter_set} has no counter {unknown[0]}"
            )
