"""Packing counter sets and their devices into ResourceSlices, on both sides of Kubernetes 1.35.

From 1.35 a slice holds counter sets or devices, never both; before, a device
consumes only from a counter set of its own slice. A 64-GPU node of
A100-40GBs in MIG mode (26 devices and a 15-counter set each) is packed both
ways, and every slice is held to the API's rules for that version
(`tests.unit.kube.slice_rules`) and to its schema (`kubernetes_validate`).
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from typing import Any

import kubernetes_validate
import pytest

from resources.dra_partitions import partitioned_devices
from resources.dra_slices import (
    MAX_COUNTER_SETS,
    MAX_DEVICES,
    MAX_DEVICES_WITH_TAINTS,
    CounterConsumption,
    CounterSet,
    counters_apart,
    pack,
    slice_devices,
    with_health,
)
from resources.options import MigStrategy
from tests.unit.kube.slice_rules import slice_problems

from .mig_a100 import PLACEMENTS_PER_GPU, dynamic_gpu
from .nodes import gpu_uuid, inventory, make_gpu

DRIVER = "gpu.nvidia.com"
NODE = "gpu-node-1"
OLD, NEW = (1, 34), (1, 35)
PER_GPU = 1 + PLACEMENTS_PER_GPU  # 26


def packed(gpus: int, *, apart: bool, tainted: int | None = None) -> list[dict[str, Any]]:
    node = inventory([dynamic_gpu(i) for i in range(gpus)])
    partitioned = partitioned_devices(node, MigStrategy.NONE)
    devices = partitioned.devices
    if tainted is not None:
        devices = tuple(with_health(devices, {gpu_uuid(tainted): ("xid 79", "")}))
    return pack(
        devices,
        driver=DRIVER,
        node=NODE,
        pool_generation=1,
        counter_sets=partitioned.counter_sets,
        counters_apart=apart,
    )


def devices_of(item: dict[str, Any]) -> list[dict[str, Any]]:
    return list(item["spec"].get("devices") or ())


def sets_of(item: dict[str, Any]) -> list[dict[str, Any]]:
    return list(item["spec"].get("sharedCounters") or ())


def test_the_version_decides_the_layout() -> None:
    assert counters_apart((1, 35))
    assert counters_apart((1, 36))
    assert counters_apart((2, 0))
    assert not counters_apart((1, 34))
    assert not counters_apart(None)  # unreadable: the older layout


@pytest.mark.parametrize("tainted", [None, 5], ids=["healthy", "a-tainted-gpu"])
def test_from_1_35_the_counter_sets_go_in_slices_of_their_own(tainted: int | None) -> None:
    slices = packed(64, apart=True, tainted=tainted)
    counter_slices = [s for s in slices if "sharedCounters" in s["spec"]]
    device_slices = [s for s in slices if "devices" in s["spec"]]
    # The counter sets first, 8 a slice; then the devices, two GPUs (52 devices) a slice.
    assert slices[: len(counter_slices)] == counter_slices
    assert [len(sets_of(s)) for s in counter_slices] == [MAX_COUNTER_SETS] * 8
    assert [len(devices_of(s)) for s in device_slices] == [2 * PER_GPU] * 32
    assert len(slices) == 40
    assert not [s for s in counter_slices if "devices" in s["spec"]]
    for item in slices:
        assert slice_problems(item, NEW) == [], item["metadata"]["name"]
    # The schema (slow on a slice of 52 devices): one slice of each kind.
    for item in (counter_slices[0], device_slices[0]):
        kubernetes_validate.validate(item, "1.35.0", strict=True)
    # The older server would refuse them: a device's counter set is in another slice.
    assert any(slice_problems(item, OLD) for item in device_slices)


@pytest.mark.parametrize("tainted", [None, 5], ids=["healthy", "a-tainted-gpu"])
def test_before_1_35_each_counter_set_goes_with_its_devices(tainted: int | None) -> None:
    slices = packed(64, apart=False, tainted=tainted)
    # 32 counters a slice in all its sets: two A100 sets (15 counters each) a slice.
    assert len(slices) == 32
    for item in slices:
        assert [s["name"] for s in sets_of(item)] == sorted(
            {c["counterSet"] for d in devices_of(item) for c in d["consumesCounters"]},
            key=lambda name: int(name.split("-")[1]),
        )
        assert len(devices_of(item)) == 2 * PER_GPU <= MAX_DEVICES_WITH_TAINTS
        assert slice_problems(item, OLD) == [], item["metadata"]["name"]
    kubernetes_validate.validate(slices[0], "1.34.0", strict=True)
    # The newer server would refuse them: sets and devices in one slice.
    assert all(slice_problems(item, NEW) for item in slices)


@pytest.mark.parametrize("apart", [True, False], ids=["1.35", "1.34"])
def test_every_device_and_counter_set_is_published_once_in_one_pool(apart: bool) -> None:
    slices = packed(64, apart=apart)
    names = Counter(d["name"] for s in slices for d in devices_of(s))
    assert len(names) == 64 * PER_GPU
    assert set(names.values()) == {1}
    sets = Counter(c["name"] for s in slices for c in sets_of(s))
    assert sets == {f"gpu-{i}-counter-set": 1 for i in range(64)}
    for index, item in enumerate(slices):
        assert item["metadata"]["name"] == f"{NODE}-{DRIVER}-{index}"
        assert item["spec"]["pool"] == {
            "name": NODE, "generation": 1, "resourceSliceCount": len(slices),
        }  # fmt: skip
        assert item["spec"]["nodeName"] == NODE
    # A GPU's devices are never split across slices.
    for gpu in range(64):
        mine = (f"gpu-{gpu}", f"gpu-{gpu}-mig-")
        holding = {s["metadata"]["name"] for s in slices for d in devices_of(s)
                   if d["name"] == mine[0] or d["name"].startswith(mine[1])}  # fmt: skip
        assert len(holding) == 1


def test_without_counter_sets_the_layout_is_todays_either_way() -> None:
    node = inventory([make_gpu(i) for i in range(300)])
    devices = slice_devices(node, MigStrategy.NONE)
    apart = pack(devices, driver=DRIVER, node=NODE, pool_generation=1, counters_apart=True)
    together = pack(devices, driver=DRIVER, node=NODE, pool_generation=1)
    assert apart == together
    assert [len(devices_of(s)) for s in apart] == [MAX_DEVICES, MAX_DEVICES, 44]
    assert all("sharedCounters" not in s["spec"] for s in apart)
    empty = pack([], driver=DRIVER, node=NODE, pool_generation=1, counters_apart=True)
    assert [s["spec"]["devices"] for s in empty] == [[]]


def test_plain_gpus_beside_dynamic_ones_fill_slices_too() -> None:
    node = inventory([dynamic_gpu(0), *(make_gpu(i, mig_capable=False) for i in range(1, 40))])
    partitioned = partitioned_devices(node, MigStrategy.NONE)
    for apart, version in ((True, NEW), (False, OLD)):
        slices = pack(partitioned.devices, driver=DRIVER, node=NODE, pool_generation=1,
                      counter_sets=partitioned.counter_sets, counters_apart=apart)  # fmt: skip
        assert sum(len(devices_of(s)) for s in slices) == PER_GPU + 39
        for item in slices:
            assert slice_problems(item, version) == []


def test_a_run_larger_than_a_slice_is_split_from_1_35_and_refused_before() -> None:
    counters = (("memory-slice-0", "1"),)
    counter_set = CounterSet("gpu-0-counter-set", counters)
    base = slice_devices(inventory([make_gpu(0)]), MigStrategy.NONE)[0]
    devices = [
        dataclasses.replace(base, name=f"gpu-0-part-{i}",
                            consumes=(CounterConsumption(counter_set.name, counters),))
        for i in range(100)
    ]  # fmt: skip
    slices = pack(devices, driver=DRIVER, node=NODE, pool_generation=1,
                  counter_sets=[counter_set], counters_apart=True)  # fmt: skip
    assert [len(devices_of(s)) for s in slices] == [0, 64, 36]
    assert all(slice_problems(item, NEW) == [] for item in slices)
    with pytest.raises(ValueError, match="do not fit one ResourceSlice"):
        pack(devices, driver=DRIVER, node=NODE, pool_generation=1, counter_sets=[counter_set])


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d, s: (d, [*s, s[0]]), "published twice"),
        (lambda d, s: (d, []), "is not published"),
        (lambda d, s: (d, [dataclasses.replace(s[0], counters=s[0].counters[:3])]),
         "has no counter"),
        (lambda d, s: (d, [dataclasses.replace(s[0], counters=tuple(
            (f"c-{i}", "1") for i in range(33)))]), "the API allows 1 to 32"),
        (lambda d, s: ([dataclasses.replace(d[0], consumes=d[0].consumes * 2), *d[1:]], s),
         "each once"),
    ],
    ids=["set-twice", "set-missing", "counter-missing", "set-too-large", "set-consumed-twice"],
)  # fmt: skip
def test_what_the_api_would_refuse_is_refused_here(change: Any, message: str) -> None:
    partitioned = partitioned_devices(inventory([dynamic_gpu(0)]), MigStrategy.NONE)
    devices, sets = change(list(partitioned.devices), list(partitioned.counter_sets))
    with pytest.raises(ValueError, match=message):
        pack(devices, driver=DRIVER, node=NODE, pool_generation=1, counter_sets=sets)
