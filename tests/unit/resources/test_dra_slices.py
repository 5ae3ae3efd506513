"""The node's DRA devices and their ResourceSlices: names, attributes, taints, limits, packing."""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import kubernetes_validate
import pytest

from devices.model import Gpu, Inventory, MigAttributes, MigDevice
from devices.simulated import SimulatedLibrary, available_profiles
from resources.dra_slices import (
    MAX_ATTRIBUTES_AND_CAPACITIES,
    Attribute,
    Kind,
    SliceDevice,
    pack,
    slice_devices,
    slice_name,
)
from resources.dra_values import architecture, label_value, pci_bus_id, quantity, semver
from resources.errors import ResourceError
from resources.options import MigStrategy

from .nodes import gpu_uuid, make_gpu, mig_uuid

DRIVER = "gpu.nvidia.com"
NODE = "gpu-node-1"
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
ENGINES = MigAttributes(
    multiprocessors=42, gi_slices=3, ci_slices=3, copy_engines=3, decoders=2, encoders=0, jpegs=0,
    ofas=0,
)  # fmt: skip


def inventory_of(profile: str) -> Inventory:
    library = SimulatedLibrary.from_argument(profile)
    library.init()
    return library.inventory()


def node(*gpus: Gpu, driver: str = "550.54.15", cuda: str = "12.4") -> Inventory:
    return Inventory(driver_version=driver, cuda_driver_version=cuda, gpus=gpus)


def mig(gpu: int, slot: int, profile: str = "3g.20gb", **changes: Any) -> MigDevice:
    fields: dict[str, Any] = {
        "uuid": mig_uuid(gpu, slot),
        "parent_index": gpu,
        "slot": slot,
        "gi": slot + 1,
        "ci": 0,
        "profile": profile,
        "memory_mib": 19968,
        "attributes": ENGINES,
        "profile_id": 9,
        "placement_start": 4 * slot,
        "gi_cap_minor": 100 + 2 * slot,
        "ci_cap_minor": 101 + 2 * slot,
    }
    fields.update(changes)
    return MigDevice(**fields)


def with_migs(gpu: Gpu, *migs: MigDevice) -> Gpu:
    return dataclasses.replace(gpu, mig_enabled=True, mig_devices=migs)


def attrs(device: SliceDevice) -> dict[str, Attribute]:
    return dict(device.attributes)


def names(devices: list[SliceDevice]) -> list[str]:
    return [device.name for device in devices]


# -- which devices, and their names ------------------------------------------------


@pytest.mark.parametrize(
    ("profile", "strategy", "expected"),
    [
        ("dgx-a100", MigStrategy.NONE, [f"gpu-{i}" for i in range(8)]),
        ("hgx-16", MigStrategy.NONE, [f"gpu-{i}" for i in range(16)]),
        ("a100-mig-mixed", MigStrategy.NONE, [f"gpu-{i}" for i in range(8)]),
        (
            "a100-mig-mixed",
            MigStrategy.MIXED,
            [f"gpu-0-mig-1g5gb-19-{start}" for start in range(7)]
            + ["gpu-1-mig-2g10gb-14-0", "gpu-1-mig-2g10gb-14-2", "gpu-1-mig-2g10gb-14-4"]
            + ["gpu-2-mig-3g20gb-9-0", "gpu-2-mig-3g20gb-9-4", "gpu-3-mig-7g40gb-0-0"]
            + ["gpu-4-mig-4g20gb-5-0", "gpu-4-mig-2g10gb-14-4", "gpu-4-mig-1g5gb-19-6"]
            + ["gpu-5", "gpu-6"]
            + ["gpu-7-mig-2g10gb-14-0", "gpu-7-mig-2g10gb-14-2", "gpu-7-mig-1g10gb-15-4"]
            + ["gpu-7-mig-1g5gb-me-20-6"],
        ),
        (
            "a100-mig-single",
            MigStrategy.SINGLE,
            [f"gpu-{g}-mig-1g5gb-19-{start}" for g in range(8) for start in range(7)],
        ),
    ],
)
def test_devices_and_names_per_profile_and_mig_strategy(
    profile: str, strategy: MigStrategy, expected: list[str]
) -> None:
    assert names(slice_devices(inventory_of(profile), strategy)) == expected


def test_single_strategy_refuses_a_non_uniform_node_as_the_device_plugin_does() -> None:
    with pytest.raises(ResourceError, match=r"^invalid MIG configuration: more than one MIG"):
        slice_devices(inventory_of("a100-mig-mixed"), MigStrategy.SINGLE)
    gpus = (with_migs(make_gpu(0), mig(0, 0)), make_gpu(1))
    with pytest.raises(ResourceError, match="same migEnabled value"):
        slice_devices(node(*gpus), MigStrategy.SINGLE)


def test_mixed_strategy_offers_nothing_of_a_mig_enabled_gpu_without_mig_devices() -> None:
    empty = with_migs(make_gpu(0))
    assert names(slice_devices(node(empty, make_gpu(1)), MigStrategy.MIXED)) == ["gpu-1"]


def test_a_gpu_is_named_after_its_minor_not_its_index() -> None:
    devices = slice_devices(node(make_gpu(0, minor=4), make_gpu(1, minor=2)), MigStrategy.NONE)
    assert names(devices) == ["gpu-4", "gpu-2"]


def test_display_controllers_are_never_devices() -> None:
    display = dataclasses.replace(make_gpu(1), name="DGX Display")
    assert names(slice_devices(node(make_gpu(0), display), MigStrategy.NONE)) == ["gpu-0"]


@pytest.mark.parametrize(
    ("device", "expected"),
    [
        (mig(0, 1, profile_id=9, placement_start=4), "gpu-0-mig-3g20gb-9-4"),
        (mig(0, 1, "1g.5gb+me", profile_id=20, placement_start=6), "gpu-0-mig-1g5gb-me-20-6"),
        (mig(0, 1, "1c.3g.20gb", profile_id=9, placement_start=0), "gpu-0-mig-1c3g20gb-9-0"),
        (mig(0, 1, profile_id=None), "gpu-0-mig-3g20gb-gi2-ci0"),  # id unknown
        (mig(0, 1, placement_start=None), "gpu-0-mig-3g20gb-gi2-ci0"),  # placement unknown
    ],
)
def test_mig_device_names(device: MigDevice, expected: str) -> None:
    (found,) = slice_devices(node(with_migs(make_gpu(0), device)), MigStrategy.MIXED)
    assert found.name == expected
    assert DNS_LABEL.fullmatch(found.name)


def test_compute_instances_sharing_a_gpu_instance_are_named_after_their_instances() -> None:
    first = mig(0, 0, "1c.2g.10gb", gi=3, ci=0, profile_id=14, placement_start=2)
    second = mig(0, 1, "1c.2g.10gb", gi=3, ci=1, profile_id=14, placement_start=2)
    other = mig(0, 2, "2g.10gb", gi=4, profile_id=14, placement_start=4)
    devices = slice_devices(node(with_migs(make_gpu(0), first, second, other)), MigStrategy.MIXED)
    assert names(devices) == [
        "gpu-0-mig-1c2g10gb-gi3-ci0",
        "gpu-0-mig-1c2g10gb-gi3-ci1",
        "gpu-0-mig-2g10gb-14-4",
    ]


# -- attributes and capacity -----------------------------------------------------


def test_a_full_gpu_has_nvidias_attributes_with_their_types() -> None:
    (gpu,) = slice_devices(inventory_of("dgx-a100"), MigStrategy.NONE)[:1]
    assert {key: value.to_json() for key, value in gpu.attributes} == {
        "type": {"string": "gpu"},
        "uuid": {"string": "GPU-a0bba3c3-c007-582d-8278-aefa736de776"},
        "productName": {"string": "NVIDIA A100-SXM4-40GB"},
        "brand": {"string": "Nvidia"},
        "architecture": {"string": "Ampere"},
        "cudaComputeCapability": {"version": "8.0.0"},
        "driverVersion": {"version": "550.54.15"},
        "cudaDriverVersion": {"version": "12.4.0"},
        "resource.kubernetes.io/pciBusID": {"string": "0000:07:00.0"},
    }
    assert dict(gpu.capacity) == {"memory": "40Gi"}
    assert (gpu.kind, gpu.uuid, gpu.parent_uuid) == (Kind.GPU, gpu.uuid, gpu.uuid)


def test_a_mig_device_has_its_parents_attributes_and_its_own_capacities() -> None:
    devices = slice_devices(inventory_of("a100-mig-mixed"), MigStrategy.MIXED)
    device = next(d for d in devices if d.name == "gpu-2-mig-3g20gb-9-4")
    assert {key: value.to_json() for key, value in device.attributes} == {
        "type": {"string": "mig"},
        "uuid": {"string": "MIG-ad3b93ce-8f79-5879-8f5d-124e23a90ad9"},
        "parentUUID": {"string": "GPU-c4747562-db5a-515e-ad7a-f5462e9d5343"},
        "profile": {"string": "3g.20gb"},
        "productName": {"string": "NVIDIA A100-SXM4-40GB"},
        "brand": {"string": "Nvidia"},
        "architecture": {"string": "Ampere"},
        "cudaComputeCapability": {"version": "8.0.0"},
        "driverVersion": {"version": "550.54.15"},
        "cudaDriverVersion": {"version": "12.4.0"},
        "resource.kubernetes.io/pciBusID": {"string": "0000:47:00.0"},
    }
    assert dict(device.capacity) == {
        "memory": "19968Mi",
        "multiprocessors": "42",
        "copyEngines": "3",
        "decoders": "2",
        "encoders": "0",
        "jpegEngines": "0",
        "ofaEngines": "0",
    }


def test_what_the_inventory_does_not_know_is_left_out() -> None:
    gpu = dataclasses.replace(make_gpu(0), brand=None, compute_capability="11.0")
    device = with_migs(gpu, mig(0, 0, attributes=None))
    (found,) = slice_devices(node(device, driver="570.x-beta"), MigStrategy.MIXED)
    keys = set(attrs(found))
    assert not keys & {"brand", "architecture", "driverVersion"}
    assert {"cudaComputeCapability", "cudaDriverVersion", "productName"} <= keys
    assert dict(found.capacity) == {"memory": "19968Mi"}  # engines unknown: memory only


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("550.54.15", "550.54.15"),
        ("535.104.05", "535.104.5"),  # semver forbids leading zeros
        ("8.0", "8.0.0"),
        ("12.4", "12.4.0"),
        ("12", "12.0.0"),
        ("1.2.3.4", None),
        ("570.86.15-beta", None),
        ("", None),
    ],
)
def test_versions_become_strict_semver(text: str, expected: str | None) -> None:
    assert semver(text) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (42949672960, "40Gi"),
        (81559 << 20, "81559Mi"),
        (4864 << 20, "4864Mi"),
        (14, "14"),
        (0, "0"),
        (1024, "1Ki"),
        (1025, "1025"),
        (1 << 60, "1Ei"),
        (1 << 70, "1024Ei"),
    ],
)
def test_quantities_are_written_as_the_api_server_stores_them(value: int, expected: str) -> None:
    assert quantity(value) == expected


@pytest.mark.parametrize(
    ("cc", "expected"),
    [
        ("7.0", "Volta"),
        ("7.5", "Turing"),
        ("8.0", "Ampere"),
        ("8.6", "Ampere"),
        ("8.9", "Ada Lovelace"),
        ("9.0", "Hopper"),
        ("10.0", "Blackwell"),
        ("12.0", "Blackwell"),
        ("11.0", None),
        ("x", None),
    ],
)
def test_architecture_of_a_compute_capability(cc: str, expected: str | None) -> None:
    assert architecture(cc) == expected


@pytest.mark.parametrize(
    ("bus", "expected"),
    [
        ("00000000:07:00.0", "0000:07:00.0"),
        ("00000000:BD:00.0", "0000:bd:00.0"),
        ("0000:3b:00.1", "0000:3b:00.1"),
        ("not a bus", None),
    ],
)
def test_pci_bus_ids_take_the_standard_attributes_form(bus: str, expected: str | None) -> None:
    assert pci_bus_id(bus) == expected


def test_no_device_of_a_shipped_profile_passes_the_apis_attribute_limit() -> None:
    for profile in available_profiles():
        try:
            inventory = inventory_of(profile)
        except Exception:
            continue
        for strategy in (MigStrategy.NONE, MigStrategy.MIXED):
            for device in slice_devices(inventory, strategy):
                count = len(device.attributes) + len(device.capacity)
                assert count <= MAX_ATTRIBUTES_AND_CAPACITIES, (profile, device.name, count)


def test_pack_refuses_a_device_over_the_attribute_limit() -> None:
    (device,) = slice_devices(node(make_gpu(0)), MigStrategy.NONE)
    extra = tuple((f"extra{i}", Attribute(device.attributes[0][1].type, "x")) for i in range(30))
    bloated = dataclasses.replace(device, attributes=device.attributes + extra)
    count = len(bloated.attributes) + len(bloated.capacity)
    assert count > MAX_ATTRIBUTES_AND_CAPACITIES
    with pytest.raises(
        ValueError, match=f"gpu-0: {count} attributes and capacities, the API allows 32"
    ):
        pack([bloated], driver=DRIVER, node=NODE, pool_generation=1)


# -- health as taints --------------------------------------------------------------


@pytest.mark.parametrize(
    ("reason", "expected"),
    [
        ("xid 79", {"key": "gpu.nvidia.com/xid", "value": "79"}),
        ("lost", {"key": "gpu.nvidia.com/gpu-lost"}),
        (
            "double-bit ECC error",
            {"key": "gpu.nvidia.com/unhealthy", "value": "double-bit-ECC-error"},
        ),
        ("nvml: GPU is lost (!)", {"key": "gpu.nvidia.com/unhealthy", "value": "nvml-GPU-is-lost"}),
    ],
)
def test_an_unhealthy_device_carries_a_taint_named_after_its_reason(
    reason: str, expected: dict[str, str]
) -> None:
    health = {gpu_uuid(0): (reason, "2024-06-01T12:00:00.123Z")}
    tainted, healthy = slice_devices(node(make_gpu(0), make_gpu(1)), MigStrategy.NONE, health)
    assert [taint.to_json() for taint in tainted.taints] == [
        {**expected, "effect": "NoSchedule", "timeAdded": "2024-06-01T12:00:00Z"}
    ]
    assert healthy.taints == ()


def test_taints_follow_the_health_of_each_mig_device_on_its_own() -> None:
    gpu = with_migs(make_gpu(0), mig(0, 0, placement_start=0), mig(0, 1, placement_start=4))
    health = {mig_uuid(0, 1): ("xid 94", "2024-06-01T12:00:00+02:00")}
    first, second = slice_devices(node(gpu), MigStrategy.MIXED, health)
    assert first.taints == ()
    assert [t.to_json() for t in second.taints] == [
        {"key": "gpu.nvidia.com/xid", "value": "94", "effect": "NoSchedule",
         "timeAdded": "2024-06-01T10:00:00Z"}
    ]  # fmt: skip


def test_a_reason_longer_than_a_label_value_is_cut_to_63_characters() -> None:
    value = label_value("nvml error: " + "x" * 100)
    assert len(value) == 63
    assert re.fullmatch(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?", value)


# -- packing -----------------------------------------------------------------------


def big_node(count: int) -> Inventory:
    return node(*(make_gpu(i) for i in range(count)))


@pytest.mark.parametrize(
    ("count", "sizes"),
    [(0, [0]), (1, [1]), (128, [128]), (129, [128, 1]), (300, [128, 128, 44])],
)
def test_devices_fill_slices_of_at_most_128(count: int, sizes: list[int]) -> None:
    slices = pack(
        slice_devices(big_node(count), MigStrategy.NONE),
        driver=DRIVER,
        node=NODE,
        pool_generation=3,
    )
    assert [len(s["spec"]["devices"]) for s in slices] == sizes
    assert {s["spec"]["pool"]["resourceSliceCount"] for s in slices} == {len(sizes)}
    assert {s["spec"]["pool"]["generation"] for s in slices} == {3}
    assert [s["metadata"]["name"] for s in slices] == [
        f"{NODE}-{DRIVER}-{i}" for i in range(len(sizes))
    ]


def test_a_slice_holding_a_tainted_device_holds_at_most_64() -> None:
    health = {gpu_uuid(100): ("xid 79", "2024-06-01T12:00:00Z")}
    devices = slice_devices(big_node(300), MigStrategy.NONE, health)
    slices = pack(devices, driver=DRIVER, node=NODE, pool_generation=1)
    sizes = [len(s["spec"]["devices"]) for s in slices]
    assert sizes == [100, 64, 128, 8]
    tainted = [any("taints" in d for d in s["spec"]["devices"]) for s in slices]
    assert tainted == [False, True, False, False]
    assert [d["name"] for s in slices for d in s["spec"]["devices"]] == names(devices)


def test_a_slice_names_the_node_pool_driver_and_its_owner() -> None:
    (only,) = pack(
        slice_devices(node(make_gpu(0)), MigStrategy.NONE),
        driver=DRIVER, node=NODE, pool_generation=7, owner_uid="node-uid-1",
    )  # fmt: skip
    assert only["apiVersion"] == "resource.k8s.io/v1"
    assert only["kind"] == "ResourceSlice"
    assert only["metadata"]["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Node", "name": NODE, "uid": "node-uid-1", "controller": True}
    ]
    assert only["spec"]["driver"] == DRIVER
    assert only["spec"]["nodeName"] == NODE
    assert only["spec"]["pool"] == {"name": NODE, "generation": 7, "resourceSliceCount": 1}


def test_without_the_nodes_uid_a_slice_has_no_owner() -> None:
    (only,) = pack([], driver=DRIVER, node=NODE, pool_generation=1)
    assert "ownerReferences" not in only["metadata"]
    assert only["spec"]["devices"] == []


def test_the_same_inputs_give_the_same_slices() -> None:
    health = {gpu_uuid(3): ("lost", "2024-06-01T12:00:00Z")}

    def build() -> list[dict[str, Any]]:
        devices = slice_devices(inventory_of("a100-mig-mixed"), MigStrategy.MIXED, health)
        return pack(devices, driver=DRIVER, node=NODE, pool_generation=2, owner_uid="u")

    assert build() == build()


def test_a_slice_name_stays_a_dns_subdomain_for_the_longest_node_names() -> None:
    long_node = "n" * 250
    name = slice_name(long_node, DRIVER, 2)
    assert len(name) <= 253
    assert SUBDOMAIN.fullmatch(name)
    assert name.endswith("-2")
    assert name != slice_name("n" * 249, DRIVER, 2)


@pytest.mark.parametrize(
    ("profile", "strategy"),
    [
        ("dgx-a100", MigStrategy.NONE),
        ("hgx-16", MigStrategy.NONE),
        ("a100-mig-mixed", MigStrategy.MIXED),
        ("a100-mig-single", MigStrategy.SINGLE),
    ],
)
def test_slices_validate_against_the_kubernetes_schema(profile: str, strategy: MigStrategy) -> None:
    health = {gpu.uuid: ("xid 48", "2024-06-01T12:00:00Z") for gpu in inventory_of(profile).gpus}
    devices = slice_devices(inventory_of(profile), strategy, health)
    for item in pack(devices, driver=DRIVER, node=NODE, pool_generation=1, owner_uid="uid"):
        kubernetes_validate.validate(item, kubernetes_validate.latest_version(), strict=True)
        for device in item["spec"]["devices"]:
            assert DNS_LABEL.fullmatch(device["name"])
            assert len(device["name"]) <= 63
