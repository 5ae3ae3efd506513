"""Dynamic MIG as DRA partitionable devices (KEP-4815): counter sets and the devices that use them.

With `--dra-dynamic-mig` a GPU that has MIG mode on, known placements
(`Gpu.mig_placements`) and no MIG instance but those the plugin made for its
claims (`owned`: GPU UUID, GPU-instance id) is published as NVIDIA's DRA
driver publishes it with its DynamicMIG feature gate:

- **One counter set** `gpu-<minor>-counter-set`: each capacity of a MIG
  device as a counter (`multiprocessors`, `copy-engines`, `decoders`,
  `encoders`, `jpeg-engines`, `ofa-engines`, `memory`; the capacity's name in
  DNS-label form), valued at its largest over the GPU's placements, and one
  counter `memory-slice-<i>` of 1 per memory slice.
- **The full GPU** (`gpu-<minor>`, attributes and capacity as without dynamic
  MIG) consuming every counter of the set: allocating it leaves nothing for a
  placement, and a placement allocated leaves too little for it.
- **One device per placement of every profile**,
  `gpu-<minor>-mig-<profile>-<profile id>-<first memory slice>` (the name the
  MIG device will have), consuming its own capacities and its memory slices.
  Two placements that share a memory slice both consume that slice's
  counter of 1, so the scheduler's counter arithmetic never allocates both.
  Attributes: `type: mig`, `parentUUID`, `profile` and its GPU's common
  ones; no `uuid` (the MIG device does not exist yet). Its `uuid` as a
  `SliceDevice` is its GPU's, so the GPU's health is its health, and
  `placement` says what preparing it creates.

Every other GPU is published as without the flag (`dra_slices.slice_devices`
under the MIG strategy): a GPU with MIG off or not MIG-capable as the full
GPU, a GPU with MIG instances of someone else's as those instances. So is a
GPU whose partition would not fit the API's limits in one slice (never a
real GPU: an A100 has 25 placements and 15 counters).

Pure: the same inventory gives the same devices, in inventory order (each
dynamic GPU's full device first, then its placements by name, as NVIDIA's
driver orders them).
"""

from __future__ import annotations

from collections.abc import Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, replace

from devices.model import Gpu, Inventory, MigPlacement
from resources.devicemap import visible_gpus
from resources.dra_slices import (
    MAX_COUNTERS_PER_DEVICE,
    MAX_DEVICE_COUNTERS,
    MAX_DEVICES_WITH_TAINTS,
    MAX_SHARED_COUNTERS,
    Attribute,
    AttributeType,
    CounterConsumption,
    CounterSet,
    DeviceHealthView,
    Kind,
    SliceDevice,
    common_attributes,
    gpu_device,
    profile_label,
    slice_devices,
)
from resources.dra_values import quantity
from resources.options import MigStrategy

__all__ = [
    "CAPACITY_COUNTERS",
    "Owned",
    "Partitioned",
    "counter_set_name",
    "memory_slice_counter",
    "partitionable",
    "partitioned_devices",
    "placement_name",
]

_MIB = 1 << 20
# A MIG device's capacity -> its counter (NVIDIA's driver: the capacity name in DNS-label form).
CAPACITY_COUNTERS: tuple[tuple[str, str], ...] = (
    ("copyEngines", "copy-engines"),
    ("decoders", "decoders"),
    ("encoders", "encoders"),
    ("jpegEngines", "jpeg-engines"),
    ("memory", "memory"),
    ("multiprocessors", "multiprocessors"),
    ("ofaEngines", "ofa-engines"),
)

# Owned MIG instances: (GPU UUID, GPU-instance id).
Owned = AbstractSet[tuple[str, int]]


@dataclass(frozen=True)
class Partitioned:
    """The node's devices and the counter sets its dynamic MIG devices consume."""

    devices: tuple[SliceDevice, ...]
    counter_sets: tuple[CounterSet, ...] = ()


def counter_set_name(gpu: Gpu) -> str:
    """`gpu-<minor>-counter-set`, as NVIDIA's driver names a GPU's counter set."""
    return f"gpu-{gpu.minor}-counter-set"


def memory_slice_counter(index: int) -> str:
    """`memory-slice-<i>`: the counter of one memory slice (zero-based)."""
    return f"memory-slice-{index}"


def placement_name(gpu: Gpu, placement: MigPlacement) -> str:
    """`gpu-<minor>-mig-<profile>-<profile id>-<start>`: the device of one placement."""
    return (
        f"gpu-{gpu.minor}-mig-{profile_label(placement.profile)}-"
        f"{placement.profile_id}-{placement.start}"
    )


def partitionable(gpu: Gpu, owned: Owned = frozenset()) -> bool:
    """Whether `gpu` is published as dynamic MIG: MIG on, placements known, no foreign instance.

    A partition that would not fit one slice within the API's limits is not.
    """
    if not gpu.mig_enabled or not gpu.mig_placements:
        return False
    if any((gpu.uuid, mig.gi) not in owned for mig in gpu.mig_devices):
        return False
    return _fits(gpu)


def partitioned_devices(
    inventory: Inventory,
    mig_strategy: MigStrategy,
    owned: Owned = frozenset(),
    health: DeviceHealthView | None = None,
) -> Partitioned:
    """The node's devices with every partitionable GPU as dynamic MIG, and their counter sets.

    Raises:
        ResourceError: the GPUs that are not partitioned cannot be offered under
            `mig_strategy` (the device plugin's own checks, e.g. `single` on a
            mixed node).
    """
    health = health or {}
    gpus = visible_gpus(inventory)
    dynamic = {gpu.uuid for gpu in gpus if partitionable(gpu, owned)}
    others = replace(inventory, gpus=tuple(g for g in inventory.gpus if g.uuid not in dynamic))
    static: dict[str, list[SliceDevice]] = {}
    for device in slice_devices(others, mig_strategy, health):
        static.setdefault(device.parent_uuid, []).append(device)
    devices: list[SliceDevice] = []
    sets: list[CounterSet] = []
    for gpu in gpus:
        if gpu.uuid not in dynamic:
            devices += static.get(gpu.uuid, [])
            continue
        counter_set = _counter_set(gpu)
        sets.append(counter_set)
        common = common_attributes(inventory, gpu)
        full = gpu_device(gpu, common, health.get(gpu.uuid))
        consumes = (CounterConsumption(counter_set.name, counter_set.counters),)
        devices.append(replace(full, consumes=consumes))
        placements = [_placement_device(gpu, p, common, full) for p in _placements(gpu)]
        devices += sorted(placements, key=lambda device: device.name)
    return Partitioned(tuple(devices), tuple(sets))


# -- one GPU -------------------------------------------------------------------


def _placements(gpu: Gpu) -> list[MigPlacement]:
    """The GPU's placements, one per device name (the first, should two share one)."""
    seen: dict[str, MigPlacement] = {}
    for placement in gpu.mig_placements:
        seen.setdefault(placement_name(gpu, placement), placement)
    return list(seen.values())


def _capacities(placement: MigPlacement) -> dict[str, int]:
    """A placement's capacities as numbers (memory in bytes), by capacity name."""
    engines = placement.attributes
    return {
        "copyEngines": engines.copy_engines,
        "decoders": engines.decoders,
        "encoders": engines.encoders,
        "jpegEngines": engines.jpegs,
        "memory": placement.memory_mib * _MIB,
        "multiprocessors": engines.multiprocessors,
        "ofaEngines": engines.ofas,
    }


def _capacity_counters(values: dict[str, int]) -> list[tuple[str, str]]:
    return [(counter, quantity(values[capacity])) for capacity, counter in CAPACITY_COUNTERS]


def _slice_counters(start: int, size: int) -> list[tuple[str, str]]:
    return [(memory_slice_counter(i), "1") for i in range(start, start + size)]


def _counter_set(gpu: Gpu) -> CounterSet:
    """Each capacity at its largest over the placements, and one counter per memory slice."""
    placements = _placements(gpu)
    largest = {name: max(_capacities(p)[name] for p in placements) for name, _ in CAPACITY_COUNTERS}
    counters = _capacity_counters(largest) + _slice_counters(0, gpu.memory_slices)
    return CounterSet(counter_set_name(gpu), tuple(counters))


def _placement_device(
    gpu: Gpu,
    placement: MigPlacement,
    common: Sequence[tuple[str, Attribute]],
    full: SliceDevice,
) -> SliceDevice:
    values = _capacities(placement)
    attributes = [
        ("type", Attribute(AttributeType.STRING, str(Kind.MIG))),
        ("parentUUID", Attribute(AttributeType.STRING, gpu.uuid)),
        ("profile", Attribute(AttributeType.STRING, placement.profile)),
        *common,
    ]
    capacity = [(name, quantity(values[name])) for name, _ in CAPACITY_COUNTERS]
    counters = _capacity_counters(values) + _slice_counters(placement.start, placement.size)
    return SliceDevice(
        name=placement_name(gpu, placement),
        kind=Kind.MIG,
        uuid=gpu.uuid,  # no MIG device yet: its health is its GPU's
        parent_uuid=gpu.uuid,
        attributes=tuple(sorted(attributes, key=lambda item: item[0])),
        capacity=tuple(capacity),
        taints=full.taints,
        consumes=(CounterConsumption(counter_set_name(gpu), tuple(counters)),),
        placement=placement,
    )


def _fits(gpu: Gpu) -> bool:
    """Whether the GPU's counter set and devices fit one slice, in either layout."""
    placements = _placements(gpu)
    set_counters = len(CAPACITY_COUNTERS) + gpu.memory_slices
    per_device = [len(CAPACITY_COUNTERS) + p.size for p in placements]
    return (
        set_counters <= MAX_SHARED_COUNTERS
        and 1 + len(placements) <= MAX_DEVICES_WITH_TAINTS
        and max(per_device, default=0) <= MAX_COUNTERS_PER_DEVICE
        and set_counters + sum(per_device) <= MAX_DEVICE_COUNTERS
        and all(p.start >= 0 and p.size > 0 for p in placements)
    )
