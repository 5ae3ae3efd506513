"""Dynamic MIG as partitionable devices: counter sets, placements, what the scheduler adds up.

One A100-SXM4-40GB in MIG mode without instances (its placements from NVIDIA's
MIG user guide, `mig_a100`) publishes a counter set of 15 counters, the full
GPU consuming all of it and 25 placements. The scheduler allocates a set of
devices only while, counter by counter, what they consume stays within the
set (`fits` below does its arithmetic): two placements sharing a memory slice
never fit together, nor does the full GPU with any placement.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections import Counter
from collections.abc import Iterable

import pytest

from devices.model import Gpu, MigPlacement
from resources.dra_partitions import (
    CAPACITY_COUNTERS,
    counter_set_name,
    partitionable,
    partitioned_devices,
    placement_name,
)
from resources.dra_slices import (
    MAX_COUNTERS_PER_SET,
    CounterSet,
    Kind,
    SliceDevice,
    slice_devices,
    with_health,
)
from resources.dra_values import quantity
from resources.errors import ResourceError
from resources.options import MigStrategy

from .mig_a100 import A100_40GB_PROFILES, PLACEMENTS_PER_GPU, a100_placements, dynamic_gpu
from .nodes import gpu_uuid, inventory, make_gpu

MIB = 1 << 20
SET = "gpu-0-counter-set"
SLICES = [f"memory-slice-{i}" for i in range(8)]


def one_gpu(**kwargs: object) -> tuple[list[SliceDevice], CounterSet]:
    partitioned = partitioned_devices(inventory([dynamic_gpu(0, **kwargs)]), MigStrategy.NONE)
    (counter_set,) = partitioned.counter_sets
    return list(partitioned.devices), counter_set


def value(text: str) -> int:
    """A canonical quantity as a number (`40192Mi`, `7`)."""
    return int(text[:-2]) * MIB if text.endswith("Mi") else int(text)


def fits(devices: Iterable[SliceDevice], counter_set: CounterSet) -> bool:
    """The scheduler's counter arithmetic: every counter's consumption within the set's value."""
    available = {name: value(amount) for name, amount in counter_set.counters}
    used: Counter[str] = Counter()
    for device in devices:
        for consumption in device.consumes:
            assert consumption.counter_set == counter_set.name
            used.update({name: value(amount) for name, amount in consumption.counters})
    return all(used[name] <= available[name] for name in used)


def by_name(devices: Iterable[SliceDevice]) -> dict[str, SliceDevice]:
    return {device.name: device for device in devices}


def placements_of(devices: Iterable[SliceDevice]) -> list[SliceDevice]:
    return [device for device in devices if device.placement is not None]


def placement(device: SliceDevice) -> MigPlacement:
    assert device.placement is not None
    return device.placement


def by_placement(devices: Iterable[SliceDevice]) -> dict[str, SliceDevice]:
    """`1g.5gb@3` -> the device of that placement."""
    return {f"{placement(d).profile}@{placement(d).start}": d for d in placements_of(devices)}


# --- one A100-40GB ------------------------------------------------------------------------


def test_an_a100_publishes_the_full_gpu_and_every_placement_of_every_profile() -> None:
    devices, _ = one_gpu()
    assert len(devices) == 1 + PLACEMENTS_PER_GPU == 26
    assert devices[0].name == "gpu-0"
    assert devices[0].kind is Kind.GPU
    assert devices[0].placement is None
    per_profile = Counter(d.placement.profile for d in devices if d.placement is not None)
    assert per_profile == {
        "1g.5gb": 7, "1g.5gb+me": 7, "1g.10gb": 4, "2g.10gb": 3, "3g.20gb": 2, "4g.20gb": 1,
        "7g.40gb": 1,
    }  # fmt: skip
    names = [d.name for d in devices[1:]]
    assert names == sorted(names)  # as NVIDIA's driver orders a GPU's devices
    assert {"gpu-0-mig-1g5gb-19-6", "gpu-0-mig-1g5gb-me-20-0", "gpu-0-mig-1g10gb-15-6",
            "gpu-0-mig-2g10gb-14-4", "gpu-0-mig-3g20gb-9-4", "gpu-0-mig-4g20gb-5-0",
            "gpu-0-mig-7g40gb-0-0"} <= set(names)  # fmt: skip


def test_the_counter_set_has_each_capacity_at_its_largest_and_a_counter_per_memory_slice() -> None:
    _, counter_set = one_gpu()
    assert counter_set.name == SET == counter_set_name(make_gpu(0))
    assert dict(counter_set.counters) == {
        "multiprocessors": "98", "copy-engines": "7", "decoders": "5", "encoders": "0",
        "jpeg-engines": "1", "ofa-engines": "1", "memory": "40192Mi",
        **{name: "1" for name in SLICES},
    }  # fmt: skip
    assert len(counter_set.counters) == 15 <= MAX_COUNTERS_PER_SET


def test_the_full_gpu_consumes_every_counter_and_keeps_its_own_attributes() -> None:
    devices, counter_set = one_gpu()
    full = devices[0]
    (consumption,) = full.consumes
    assert consumption.counter_set == SET
    assert consumption.counters == counter_set.counters
    # Described as without dynamic MIG, so selectors written for the GPU still match.
    (plain,) = slice_devices(inventory([make_gpu(0)]), MigStrategy.NONE)
    assert dataclasses.replace(full, consumes=()) == plain


@pytest.mark.parametrize("profile", list(A100_40GB_PROFILES))
def test_a_placement_consumes_its_capacities_and_its_memory_slices(profile: str) -> None:
    devices, _ = one_gpu()
    profile_id, starts, size, memory, engines, _ = A100_40GB_PROFILES[profile]
    mine = [d for d in placements_of(devices) if placement(d).profile == profile]
    assert [placement(d).start for d in mine] == sorted(starts)
    sms, copy, dec, enc, jpeg, ofa = engines
    capacity = {
        "multiprocessors": str(sms), "copyEngines": str(copy), "decoders": str(dec),
        "encoders": str(enc), "jpegEngines": str(jpeg), "ofaEngines": str(ofa),
        "memory": quantity(memory * MIB),
    }  # fmt: skip
    for device in mine:
        start = placement(device).start
        label = profile.replace(".", "").replace("+", "-")
        assert device.name == f"gpu-0-mig-{label}-{profile_id}-{start}"
        assert dict(device.capacity) == capacity
        (consumption,) = device.consumes
        assert consumption.counter_set == SET
        counters = dict(consumption.counters)
        assert {counter: counters.pop(counter) for _, counter in CAPACITY_COUNTERS} == {
            counter: capacity[name] for name, counter in CAPACITY_COUNTERS
        }
        assert counters == {f"memory-slice-{i}": "1" for i in range(start, start + size)}
        attributes = dict(device.attributes)
        assert attributes["type"].value == "mig"
        assert attributes["profile"].value == profile
        assert attributes["parentUUID"].value == gpu_uuid(0)
        assert "uuid" not in attributes  # no MIG device exists yet
        assert device.uuid == device.parent_uuid == gpu_uuid(0)  # its health is its GPU's


def test_placements_sharing_a_memory_slice_never_fit_together() -> None:
    devices, counter_set = one_gpu()
    placements = placements_of(devices)
    for a, b in itertools.combinations(placements, 2):
        pa, pb = a.placement, b.placement
        assert pa is not None
        assert pb is not None
        overlap = pa.start < pb.start + pb.size and pb.start < pa.start + pa.size
        slices_only = CounterSet(SET, tuple((name, "1") for name in SLICES))
        only = [
            dataclasses.replace(d, consumes=tuple(
                dataclasses.replace(c, counters=tuple(
                    item for item in c.counters if item[0].startswith("memory-slice-")))
                for c in d.consumes))
            for d in (a, b)
        ]  # fmt: skip
        assert fits(only, slices_only) is not overlap, (a.name, b.name)
        if overlap:
            assert not fits([a, b], counter_set), (a.name, b.name)


def test_the_full_gpu_fits_alone_and_never_beside_a_placement() -> None:
    devices, counter_set = one_gpu()
    full = devices[0]
    assert fits([full], counter_set)
    for placement in placements_of(devices):
        assert fits([placement], counter_set)
        assert not fits([full, placement], counter_set), placement.name


@pytest.mark.parametrize(
    "layout",
    [
        ["1g.5gb@0", "1g.5gb@1", "1g.5gb@2", "1g.5gb@3", "1g.5gb@4", "1g.5gb@5", "1g.5gb@6"],
        ["1g.10gb@0", "1g.10gb@2", "1g.10gb@4", "1g.10gb@6"],
        ["2g.10gb@0", "2g.10gb@2", "2g.10gb@4", "1g.5gb@6"],
        ["3g.20gb@0", "3g.20gb@4"],
        ["4g.20gb@0", "3g.20gb@4"],
        ["4g.20gb@0", "2g.10gb@4", "1g.5gb@6"],
        ["2g.10gb@0", "2g.10gb@2", "1g.10gb@4", "1g.5gb@6"],
        ["2g.10gb@0", "2g.10gb@2", "1g.10gb@4", "1g.5gb+me@6"],
        ["7g.40gb@0"],
    ],
    ids=lambda layout: "+".join(layout),
)
def test_every_layout_an_a100_can_hold_fits_the_counters(layout: list[str]) -> None:
    """NVIDIA's A100-40GB configurations (the MIG user guide's table) all add up."""
    devices, counter_set = one_gpu()
    named = by_placement(devices)
    assert fits([named[item] for item in layout], counter_set)


def test_one_media_extension_at_a_time_and_no_eighth_compute_slice() -> None:
    devices, counter_set = one_gpu()
    named = by_placement(devices)
    # An A100 has one set of JPEG and OFA engines: a second 1g.5gb+me does not fit.
    assert not fits([named["1g.5gb+me@0"], named["1g.5gb+me@1"]], counter_set)
    # 7 compute slices: 4g.20gb + 2g.10gb + 2g.10gb would need 8.
    assert not fits([named["4g.20gb@0"], named["2g.10gb@4"], named["2g.10gb@2"]], counter_set)


# --- which GPUs are partitioned ----------------------------------------------------------


def test_gpus_without_mig_mode_or_not_mig_capable_publish_the_full_gpu_as_today() -> None:
    node = inventory([
        dynamic_gpu(0),
        make_gpu(1, mig_capable=False),
        make_gpu(2),  # MIG-capable, MIG off
    ])  # fmt: skip
    partitioned = partitioned_devices(node, MigStrategy.NONE)
    assert [s.name for s in partitioned.counter_sets] == ["gpu-0-counter-set"]
    found = by_name(partitioned.devices)
    today = by_name(slice_devices(inventory([make_gpu(1, mig_capable=False), make_gpu(2)]),
                                  MigStrategy.NONE))  # fmt: skip
    assert found["gpu-1"] == today["gpu-1"]
    assert found["gpu-2"] == today["gpu-2"]
    assert not found["gpu-1"].consumes
    assert not found["gpu-2"].consumes
    assert [d.name for d in partitioned.devices][-2:] == ["gpu-1", "gpu-2"]  # inventory order


def test_a_gpu_with_mig_instances_of_someone_else_is_published_as_its_instances() -> None:
    theirs = dataclasses.replace(make_gpu(0, migs=[(0, "3g.20gb", 19968)]),
                                 mig_placements=a100_placements())  # fmt: skip
    assert not partitionable(theirs)
    node = inventory([theirs, dynamic_gpu(1)])
    partitioned = partitioned_devices(node, MigStrategy.MIXED)
    assert [s.name for s in partitioned.counter_sets] == ["gpu-1-counter-set"]
    static = [d for d in partitioned.devices if d.parent_uuid == gpu_uuid(0)]
    assert [d.kind for d in static] == [Kind.MIG]
    assert static == slice_devices(inventory([theirs]), MigStrategy.MIXED)
    # The plugin's own instances (made for its claims) do not stop the partitioning.
    owned = {(gpu_uuid(0), theirs.mig_devices[0].gi)}
    assert partitionable(theirs, owned)
    mine = partitioned_devices(node, MigStrategy.MIXED, owned=owned)
    assert [s.name for s in mine.counter_sets] == ["gpu-0-counter-set", "gpu-1-counter-set"]
    assert len(mine.devices) == 2 * (1 + PLACEMENTS_PER_GPU)


def test_mig_mode_without_known_placements_is_published_as_today() -> None:
    gpu = make_gpu(0, migs=[])
    assert not partitionable(gpu)
    partitioned = partitioned_devices(inventory([gpu]), MigStrategy.NONE)
    assert partitioned.counter_sets == ()
    assert list(partitioned.devices) == slice_devices(inventory([gpu]), MigStrategy.NONE)


def test_a_partition_beyond_the_api_limits_is_not_made() -> None:
    # 40 memory slices would make a counter set of 47 counters: more than one set may hold.
    wide = tuple(
        MigPlacement("1g.1gb", 1, start, 1, 1024, a100_placements()[0].attributes)
        for start in range(40)
    )
    gpu = dataclasses.replace(dynamic_gpu(0), mig_placements=wide)
    assert gpu.memory_slices == 40
    assert not partitionable(gpu)
    assert partitioned_devices(inventory([gpu]), MigStrategy.NONE).counter_sets == ()


def test_dynamic_gpus_leave_the_single_strategy_check_to_the_others() -> None:
    node = inventory([dynamic_gpu(0), make_gpu(1, migs=[(0, "3g.20gb", 19968)])])
    assert len(partitioned_devices(node, MigStrategy.SINGLE).devices) == 1 + PLACEMENTS_PER_GPU + 1
    mixed = inventory([
        dynamic_gpu(0), make_gpu(1, migs=[(0, "3g.20gb", 19968), (1, "1g.5gb", 4864)]),
    ])  # fmt: skip
    with pytest.raises(ResourceError):
        partitioned_devices(mixed, MigStrategy.SINGLE)


def test_an_unhealthy_gpu_taints_its_full_device_and_every_placement() -> None:
    devices, _ = one_gpu()
    tainted = with_health(devices, {gpu_uuid(0): ("xid 79", "2024-06-01T12:00:00Z")})
    assert all(d.taints and d.taints[0].key == "gpu.nvidia.com/xid" for d in tainted)
    partitioned = partitioned_devices(
        inventory([dynamic_gpu(0)]), MigStrategy.NONE, health={gpu_uuid(0): ("lost", "")}
    )
    assert {d.taints[0].key for d in partitioned.devices} == {"gpu.nvidia.com/gpu-lost"}


def test_names_are_dns_labels_and_follow_the_minor() -> None:
    gpu: Gpu = dynamic_gpu(3, minor=11)
    partitioned = partitioned_devices(inventory([gpu]), MigStrategy.NONE)
    assert partitioned.counter_sets[0].name == "gpu-11-counter-set"
    for device in partitioned.devices:
        assert device.name.startswith("gpu-11")
        assert len(device.name) <= 63
        if device.placement is not None:
            assert device.name == placement_name(gpu, device.placement)
