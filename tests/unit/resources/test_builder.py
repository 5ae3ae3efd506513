"""Which resources a node gets: MIG strategies, replicas, MPS, digests, the size guard."""

from __future__ import annotations

from dataclasses import replace

import pytest

from devices.model import Inventory
from resources.builder import ResourceSet, build_resources, plan_resources
from resources.errors import ResourceError
from resources.model import Health
from resources.options import (
    DeviceListStrategy,
    MigStrategy,
    ResourceOptions,
    SharingOptions,
    SharingStrategy,
)

from .nodes import A100_MIB, gpu_uuid, inventory, make_gpu, mig_uuid, plain_node


def names(resources: tuple[ResourceSet, ...]) -> dict[str, list[str]]:
    return {r.name: [d.id for d in r.devices] for r in resources}


def build(node: Inventory, **kwargs: object) -> tuple[ResourceSet, ...]:
    return build_resources(node, ResourceOptions(**kwargs))  # type: ignore[arg-type]


def time_slicing(replicas: dict[str, int], **kwargs: object) -> SharingOptions:
    return SharingOptions(strategy=SharingStrategy.TIME_SLICING, replicas=replicas, **kwargs)  # type: ignore[arg-type]


# A100 40GB MIG layouts: (slot, profile, memory MiB).
ONE_G = [(0, "1g.5gb", 4864), (1, "1g.5gb", 4864)]
MIXED_PROFILES = [(0, "1g.5gb", 4864), (1, "3g.20gb", 19968)]


# ----------------------------------------------------------------------------- strategy none


def test_none_exposes_every_gpu_whole_with_its_minor_and_numa() -> None:
    node = inventory([make_gpu(0, minor=3, numa=1), make_gpu(1, minor=0, numa=-1)])
    (resource,) = build_resources(node)
    assert resource.name == "nvidia.com/gpu"
    first, second = resource.devices
    assert (first.id, first.uuid, first.gpu_uuid, first.index) == (
        gpu_uuid(0),
        gpu_uuid(0),
        gpu_uuid(0),
        "0",
    )
    assert first.paths == ("/dev/nvidia3",)
    assert first.numa_node == 1
    assert second.paths == ("/dev/nvidia0",)
    assert second.numa_node is None  # sysfs -1: no topology
    assert first.memory_mib == A100_MIB
    assert first.compute_capability == "8.0"


def test_none_exposes_mig_enabled_gpus_whole() -> None:
    node = inventory([make_gpu(0, migs=ONE_G), make_gpu(1)])
    assert names(build(node)) == {"nvidia.com/gpu": [gpu_uuid(0), gpu_uuid(1)]}


def test_display_devices_are_skipped_without_renumbering() -> None:
    node = inventory([make_gpu(0, name="NVIDIA DGX Display"), make_gpu(1), make_gpu(2)])
    (resource,) = build_resources(node)
    assert [d.index for d in resource.devices] == ["1", "2"]


def test_a_node_without_gpus_has_no_resources() -> None:
    assert build_resources(inventory([])) == ()


# ----------------------------------------------------------------------------- strategy single


def test_single_exposes_mig_devices_as_gpu() -> None:
    node = inventory([make_gpu(0, minor=2, migs=ONE_G), make_gpu(1, minor=5, migs=ONE_G)])
    (resource,) = build(node, mig_strategy=MigStrategy.SINGLE)
    assert resource.name == "nvidia.com/gpu"
    assert [d.id for d in resource.devices] == [
        mig_uuid(0, 0),
        mig_uuid(0, 1),
        mig_uuid(1, 0),
        mig_uuid(1, 1),
    ]
    device = resource.devices[1]
    assert device.index == "0:1"
    assert device.is_mig
    assert device.gpu_uuid == gpu_uuid(0)
    assert (device.gi, device.ci) == (2, 0)
    assert device.paths == (
        "/dev/nvidia2",
        "/dev/nvidia-caps/nvidia-cap302",
        "/dev/nvidia-caps/nvidia-cap303",
    )
    assert device.memory_mib == 4864
    assert resource.links is None  # MIG devices use the greedy policies


@pytest.mark.parametrize(
    ("gpus", "message"),
    [
        pytest.param(
            [make_gpu(0, migs=ONE_G), make_gpu(1, migs=[])],
            "invalid MIG configuration: at least one device with migEnabled=true was not "
            "configured correctly: device 1 has no MIG devices configured",
            id="empty-mig-gpu",
        ),
        pytest.param(
            [make_gpu(0, migs=MIXED_PROFILES)],
            "invalid MIG configuration: more than one MIG device type present on node",
            id="two-profiles",
        ),
        pytest.param(
            [make_gpu(0, migs=[(0, "1g.5gb", 4864)]), make_gpu(1, migs=[(0, "1g.5gb", 4800)])],
            "invalid MIG configuration: more than one MIG device type present on node",
            id="same-profile-other-memory",
        ),
        pytest.param(
            [make_gpu(0, migs=ONE_G), make_gpu(1)],
            "all devices on the node must be configured with the same migEnabled value",
            id="mig-and-full",
        ),
        pytest.param(
            [make_gpu(0, migs=MIXED_PROFILES), make_gpu(1, migs=[])],
            "invalid MIG configuration: at least one device with migEnabled=true was not "
            "configured correctly: device 1 has no MIG devices configured",
            id="empty-gpu-reported-before-mixed-profiles",
        ),
    ],
)
def test_single_strategy_errors(gpus: list, message: str) -> None:  # type: ignore[type-arg]
    with pytest.raises(ResourceError) as error:
        build(inventory(gpus), mig_strategy=MigStrategy.SINGLE)
    assert str(error.value) == message


# ----------------------------------------------------------------------------- strategy mixed


def test_mixed_gives_one_resource_per_profile_and_keeps_full_gpus() -> None:
    node = inventory(
        [
            make_gpu(0, migs=[*ONE_G, (2, "3g.20gb", 19968)]),
            make_gpu(1),
            make_gpu(2, migs=[(0, "1g.10gb+me", 9984)]),
        ]
    )
    assert names(build(node, mig_strategy=MigStrategy.MIXED)) == {
        "nvidia.com/gpu": [gpu_uuid(1)],
        "nvidia.com/mig-1g.10gb.me": [mig_uuid(2, 0)],
        "nvidia.com/mig-1g.5gb": [mig_uuid(0, 0), mig_uuid(0, 1)],
        "nvidia.com/mig-3g.20gb": [mig_uuid(0, 2)],
    }


def test_mixed_only_warns_about_an_empty_mig_gpu() -> None:
    node = inventory([make_gpu(0, migs=[]), make_gpu(1)])
    plan = plan_resources(node, ResourceOptions(mig_strategy=MigStrategy.MIXED))
    assert names(plan.resources) == {"nvidia.com/gpu": [gpu_uuid(1)]}
    assert plan.warnings == ("device 0 has no MIG devices configured",)


def test_mixed_refuses_compute_instance_profiles() -> None:
    node = inventory([make_gpu(0, migs=[(0, "1c.2g.10gb", 9984)])])
    with pytest.raises(ResourceError, match=r"MIG profile '1c\.2g\.10gb' does not match any"):
        build(node, mig_strategy=MigStrategy.MIXED)


@pytest.mark.parametrize(
    ("field", "message"),
    [
        pytest.param(
            "gi_cap_minor",
            "missing MIG GPU instance capability path: "
            "/proc/driver/nvidia/capabilities/gpu4/mig/gi1/access",
            id="gi",
        ),
        pytest.param(
            "ci_cap_minor",
            "missing MIG compute instance capability path: "
            "/proc/driver/nvidia/capabilities/gpu4/mig/gi1/ci0/access",
            id="ci",
        ),
    ],
)
def test_mig_devices_need_their_capability_nodes(field: str, message: str) -> None:
    gpu = make_gpu(0, minor=4, migs=[(0, "1g.5gb", 4864)])
    instance = gpu.mig_devices[0]
    instance = (
        replace(instance, gi_cap_minor=None)
        if field == "gi_cap_minor"
        else replace(instance, ci_cap_minor=None)
    )
    broken = replace(gpu, mig_devices=(instance,))
    with pytest.raises(ResourceError) as error:
        build(inventory([broken]), mig_strategy=MigStrategy.MIXED)
    assert str(error.value) == message


# ----------------------------------------------------------------------------- replicas


def test_seed_example_eight_gpus_ten_replicas_is_eighty() -> None:
    (resource,) = build(plain_node(8), sharing=time_slicing({"nvidia.com/gpu": 10}))
    assert resource.name == "nvidia.com/gpu"
    assert len(resource.devices) == 80
    assert [d.id for d in resource.devices[:11]] == [
        *(f"{gpu_uuid(0)}::{n}" for n in range(10)),
        f"{gpu_uuid(1)}::0",
    ]
    replica = resource.devices[13]
    assert (replica.uuid, replica.index, replica.paths, replica.replicas) == (
        gpu_uuid(1),
        "1",
        ("/dev/nvidia1",),
        10,
    )
    assert resource.behaviour.sharing is SharingStrategy.TIME_SLICING
    assert resource.behaviour.sharing is SharingStrategy.TIME_SLICING
    assert resource.links is None  # replicas use the greedy policies


def test_seed_example_rename_by_default_advertises_gpu_shared() -> None:
    sharing = time_slicing({"nvidia.com/gpu": 10}, rename_by_default=True)
    resources = build(plain_node(8), sharing=sharing)
    assert [(r.name, len(r.devices)) for r in resources] == [("nvidia.com/gpu.shared", 80)]


def test_mixed_strategy_resources_can_be_time_sliced() -> None:
    node = inventory([make_gpu(0, migs=[*ONE_G, (2, "3g.20gb", 19968)]), make_gpu(1)])
    sharing = time_slicing({"nvidia.com/mig-1g.5gb": 2, "nvidia.com/absent": 4})
    assert names(build(node, mig_strategy=MigStrategy.MIXED, sharing=sharing)) == {
        "nvidia.com/gpu": [gpu_uuid(1)],
        "nvidia.com/mig-1g.5gb": [
            f"{mig_uuid(0, 0)}::0",
            f"{mig_uuid(0, 0)}::1",
            f"{mig_uuid(0, 1)}::0",
            f"{mig_uuid(0, 1)}::1",
        ],
        "nvidia.com/mig-3g.20gb": [mig_uuid(0, 2)],
    }


@pytest.mark.parametrize(
    ("sharing", "expected"),
    [
        pytest.param(time_slicing({"nvidia.com/gpu": 2}), False, id="time-slicing-default"),
        pytest.param(
            time_slicing({"nvidia.com/gpu": 2}, fail_requests_greater_than_one=True),
            True,
            id="time-slicing-set",
        ),
        pytest.param(
            SharingOptions(strategy=SharingStrategy.MPS, replicas={"nvidia.com/gpu": 2}),
            True,
            id="mps-default",
        ),
        pytest.param(
            SharingOptions(
                strategy=SharingStrategy.MPS,
                replicas={"nvidia.com/gpu": 2},
                fail_requests_greater_than_one=False,
            ),
            False,
            id="mps-unset-explicitly",
        ),
    ],
)
def test_fail_requests_greater_than_one_defaults(sharing: SharingOptions, expected: bool) -> None:
    (resource,) = build(plain_node(1), sharing=sharing, mps_root="/run/nvidia/mps")
    assert resource.behaviour.fail_requests_greater_than_one is expected


def test_mps_resources_carry_their_pipe_and_shm_paths() -> None:
    sharing = SharingOptions(
        strategy=SharingStrategy.MPS, replicas={"nvidia.com/gpu": 4}, rename_by_default=True
    )
    (resource,) = build(plain_node(2), sharing=sharing, mps_root="/run/nvidia/mps")
    mps = resource.behaviour.mps
    assert mps is not None
    assert mps.pipe_dir == "/mps/nvidia.com/gpu.shared/pipe"
    assert mps.host_pipe_dir == "/run/nvidia/mps/nvidia.com/gpu.shared/pipe"
    assert mps.host_shm == "/run/nvidia/mps/shm"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        pytest.param(
            {
                "mig_strategy": MigStrategy.SINGLE,
                "sharing": SharingOptions(
                    strategy=SharingStrategy.MPS, replicas={"nvidia.com/gpu": 2}
                ),
                "mps_root": "/run/nvidia/mps",
            },
            "sharing using MPS is not supported for MIG devices",
            id="mps-with-mig",
        ),
        pytest.param(
            {
                "mig_strategy": MigStrategy.MIXED,
                "sharing": SharingOptions(
                    strategy=SharingStrategy.MPS, replicas={"nvidia.com/gpu": 2}
                ),
                "mps_root": "/run/nvidia/mps",
            },
            "using --mig-strategy=mixed is not supported with MPS",
            id="mps-with-mixed",
        ),
        pytest.param(
            {"sharing": SharingOptions(strategy=SharingStrategy.MPS, replicas={"x": 2})},
            "using MPS requires --mps-root to be specified",
            id="mps-without-root",
        ),
        pytest.param(
            {"sharing": time_slicing({"nvidia.com/gpu": 1})},
            "number of replicas must be >= 2",
            id="one-replica",
        ),
        pytest.param(
            {"imex_channel_ids": (1,)},
            "invalid IMEX channel IDs: invalid IMEX config: channelIDs must be [] or [0]; "
            "found [1]",
            id="imex-channel-1",
        ),
    ],
)
def test_start_up_refusals(kwargs: dict[str, object], message: str) -> None:
    node = inventory([make_gpu(0, migs=ONE_G)])
    with pytest.raises(ResourceError) as error:
        build(node, **kwargs)
    assert str(error.value).startswith(message)


# ----------------------------------------------------------------------------- digests


def test_digests_separate_device_changes_from_behaviour_changes() -> None:
    node = plain_node(2)
    (base,) = build_resources(node)
    (again,) = build_resources(node)
    assert base == again
    assert hash(base) == hash(again)
    assert base.digest == again.digest

    sick = replace(base, devices=(base.devices[0].with_health(Health.UNHEALTHY), base.devices[1]))
    assert sick.devices_digest != base.devices_digest
    assert sick.behaviour_digest == base.behaviour_digest

    (cdi,) = build(node, device_list_strategy=(DeviceListStrategy.CDI_CRI,))
    assert cdi.devices_digest == base.devices_digest
    assert cdi.behaviour_digest != base.behaviour_digest
    assert cdi.digest != base.digest
    assert replace(cdi, devices=()) != replace(base, devices=())


def test_digests_are_computed_once_per_resource_and_not_carried_into_copies() -> None:
    (base,) = build_resources(plain_node(2))
    first = base.devices_digest
    assert base.devices_digest is first  # the same string: not computed again
    assert base.behaviour_digest is base.behaviour_digest
    assert base.digest is base.digest
    sick = replace(base, devices=(base.devices[0].with_health(Health.UNHEALTHY), base.devices[1]))
    assert sick.devices_digest != first
    assert replace(sick, devices=base.devices).devices_digest == first
    (again,) = build_resources(plain_node(2))
    assert again == base  # equality is still the fields'


def test_sharing_edits_are_device_list_updates_of_the_resource_they_concern() -> None:
    node = inventory([make_gpu(0, migs=ONE_G), make_gpu(1, mig_capable=False)])
    mixed = {"mig_strategy": MigStrategy.MIXED}
    plain = {r.name: r for r in build(node, **mixed)}
    two = {r.name: r for r in build(node, **mixed, sharing=time_slicing({"nvidia.com/gpu": 2}))}
    four = {r.name: r for r in build(node, **mixed, sharing=time_slicing({"nvidia.com/gpu": 4}))}
    mig = "nvidia.com/mig-1g.5gb"
    # The MIG resource is not shared by any of these edits: nothing of it changes.
    assert plain[mig].digest == two[mig].digest == four[mig].digest
    # Turning sharing on, and changing the replica count, keep the resource's options:
    # the kubelet gets a new list on the open stream, no re-registration.
    gpu = "nvidia.com/gpu"
    assert plain[gpu].behaviour_digest == two[gpu].behaviour_digest == four[gpu].behaviour_digest
    assert len({plain[gpu].devices_digest, two[gpu].devices_digest, four[gpu].devices_digest}) == 3
    assert two[gpu].behaviour.sharing is SharingStrategy.TIME_SLICING
    assert plain[mig].behaviour.sharing is SharingStrategy.NONE
    # failRequestsGreaterThanOne changes what Allocate accepts: part of the sharing update
    strict = time_slicing({"nvidia.com/gpu": 2}, fail_requests_greater_than_one=True)
    (shared, *_) = build(node, **mixed, sharing=strict)
    assert shared.behaviour_digest == two[gpu].behaviour_digest
    assert shared.devices_digest != two[gpu].devices_digest


def test_whole_gpu_resources_carry_link_scores() -> None:
    (resource,) = build_resources(plain_node(2))
    assert resource.links is not None
    assert resource.links.uuids == (gpu_uuid(0), gpu_uuid(1))


# ----------------------------------------------------------------------------- size guard


def test_device_lists_over_the_kubelet_message_limit_are_refused() -> None:
    sharing = time_slicing({"nvidia.com/gpu": 9000})
    with pytest.raises(ResourceError) as error:
        build(plain_node(8), sharing=sharing)
    text = str(error.value)
    assert "'nvidia.com/gpu' (8 x 9000 replicas = 72000 devices)" in text
    assert "4194304-byte message limit" in text


def test_gpus_coming_and_going_change_the_device_list_not_the_behaviour() -> None:
    (four,) = build_resources(plain_node(4))
    (two,) = build_resources(plain_node(2))
    assert replace(four, devices=()) == replace(two, devices=())
    assert four.behaviour_digest == two.behaviour_digest
    assert four.devices_digest != two.devices_digest


def test_a_link_change_alone_changes_the_device_digest() -> None:
    plain = inventory([make_gpu(0), make_gpu(1)])
    linked = inventory([make_gpu(0, nvlinks={1: 4}), make_gpu(1, nvlinks={0: 4})])
    (before,) = build_resources(plain)
    (after,) = build_resources(linked)
    assert before.devices == after.devices
    assert before.devices_digest != after.devices_digest
    assert before.behaviour_digest == after.behaviour_digest
