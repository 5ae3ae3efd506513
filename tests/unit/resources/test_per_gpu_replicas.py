"""Replica counts per GPU: several sharing entries for one resource over disjoint devices.

The issue's example (``devices: [0, 1], replicas: 4`` beside ``devices: [2..7],
replicas: 2``) advertises 20 devices on an 8-GPU node; what only the node can
tell (an index in one entry, the same GPU's UUID in another; a count beside a
list) is refused here with the same line the config check uses.
"""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from resources.builder import ResourceSet, build_resources
from resources.errors import ResourceError
from resources.model import Health
from resources.options import (
    MigStrategy,
    ResourceOptions,
    ShareRule,
    SharingOptions,
    SharingStrategy,
)
from resources.replicas import replicate, select
from resources.wire import check_replication_fits, list_and_watch_size

from .nodes import gpu_uuid, inventory, make_gpu, mig_uuid, plain_node

GPU = "nvidia.com/gpu"
WHERE = "sharing.timeSlicing.resources[{}]"


def rule(position: int, devices: object, replicas: int, **kwargs: object) -> ShareRule:
    return ShareRule(
        name=kwargs.pop("name", GPU),  # type: ignore[arg-type]
        replicas=replicas,
        devices=devices,  # type: ignore[arg-type]
        where=WHERE.format(position),
        **kwargs,  # type: ignore[arg-type]
    )


def sliced(*rules: ShareRule, **kwargs: object) -> ResourceOptions:
    sharing = SharingOptions(strategy=SharingStrategy.TIME_SLICING, rules=rules, **kwargs)  # type: ignore[arg-type]
    return ResourceOptions(sharing=sharing, mps_root="/run/nvidia/mps")


def per_gpu(resource: ResourceSet) -> dict[str, int]:
    return dict(Counter(device.index for device in resource.devices))


def test_the_issue_example_advertises_twenty_devices_on_eight_gpus() -> None:
    options = sliced(rule(0, (0, 1), 4), rule(1, (2, 3, 4, 5, 6, 7), 2))
    (resource,) = build_resources(plain_node(8), options)
    assert resource.name == GPU
    assert len(resource.devices) == 20
    assert per_gpu(resource) == {"0": 4, "1": 4, **{str(i): 2 for i in range(2, 8)}}
    # Device order: by GPU index, then replica number; IDs are <uuid>::<n>.
    assert [d.id for d in resource.devices[:6]] == [
        *(f"{gpu_uuid(0)}::{n}" for n in range(4)),
        f"{gpu_uuid(1)}::0",
        f"{gpu_uuid(1)}::1",
    ]
    assert {d.replicas for d in resource.devices if d.index in "01"} == {4}
    assert {d.replicas for d in resource.devices if d.index not in "01"} == {2}


def test_references_by_uuid_and_by_count_select_the_same_gpus() -> None:
    by_uuid = sliced(rule(0, (gpu_uuid(0), gpu_uuid(1)), 4), rule(1, ("2", "3"), 2))
    by_count = sliced(rule(0, 2, 4), rule(1, (2, 3), 2))
    (first,) = build_resources(plain_node(4), by_uuid)
    (second,) = build_resources(plain_node(4), by_count)
    assert [d.id for d in first.devices] == [d.id for d in second.devices]
    assert per_gpu(first) == {"0": 4, "1": 4, "2": 2, "3": 2}


def test_devices_no_entry_selects_stay_whole_under_the_resource_name() -> None:
    (resource,) = build_resources(plain_node(3), sliced(rule(0, (1,), 3)))
    assert [d.id for d in resource.devices] == [
        gpu_uuid(0),
        *(f"{gpu_uuid(1)}::{n}" for n in range(3)),
        gpu_uuid(2),
    ]
    assert resource.behaviour.sharing is SharingStrategy.TIME_SLICING
    assert resource.links is None  # replicas on offer: the greedy policies


def test_rename_by_default_moves_only_the_replicas() -> None:
    options = sliced(rule(0, (1,), 3), rename_by_default=True)
    whole, shared = build_resources(plain_node(3), options)
    assert (whole.name, [d.id for d in whole.devices]) == (GPU, [gpu_uuid(0), gpu_uuid(2)])
    assert whole.behaviour.sharing is SharingStrategy.NONE
    assert shared.name == f"{GPU}.shared"
    assert [d.id for d in shared.devices] == [f"{gpu_uuid(1)}::{n}" for n in range(3)]


def test_mig_devices_are_selected_by_mig_index_and_both_uuid_forms() -> None:
    layout = [(0, "1g.5gb", 4864), (1, "1g.5gb", 4864), (2, "1g.5gb", 4864)]
    node = inventory([make_gpu(0, migs=layout)])
    legacy = f"MIG-{gpu_uuid(0)}/3/0"  # slot 2 is GPU instance 3, compute instance 0
    sharing = SharingOptions(
        strategy=SharingStrategy.TIME_SLICING,
        rules=(
            rule(0, ("0:0",), 2, name="nvidia.com/mig-1g.5gb"),
            rule(1, (mig_uuid(0, 1), legacy), 3, name="nvidia.com/mig-1g.5gb"),
        ),
    )
    options = ResourceOptions(mig_strategy=MigStrategy.MIXED, sharing=sharing)
    (resource,) = build_resources(node, options)
    assert dict(Counter(d.uuid for d in resource.devices)) == {
        mig_uuid(0, 0): 2,
        mig_uuid(0, 1): 3,
        mig_uuid(0, 2): 3,
    }


@pytest.mark.parametrize(
    ("rules", "message"),
    [
        pytest.param(
            (rule(0, (0,), 4), rule(1, (gpu_uuid(0),), 2)),
            f"{WHERE.format(1)}.devices: overlaps {WHERE.format(0)}.devices for {GPU}: "
            f"both select device 0 ({gpu_uuid(0)})",
            id="index-and-uuid-of-one-gpu",
        ),
        pytest.param(
            (rule(0, 2, 4), rule(1, (1, 2), 2)),
            f"{WHERE.format(1)}.devices: overlaps {WHERE.format(0)}.devices for {GPU}: "
            f"both select device 1 ({gpu_uuid(1)})",
            id="count-and-list",
        ),
        pytest.param(
            (rule(0, (9,), 4),),
            f"{WHERE.format(0)}.devices: no matching device at index: 9",
            id="index-not-on-the-node",
        ),
        pytest.param(
            (rule(0, ("GPU-00000000-0000-0000-0000-0000000000ff",), 4),),
            f"{WHERE.format(0)}.devices: no matching device with UUID: "
            "GPU-00000000-0000-0000-0000-0000000000ff",
            id="uuid-not-on-the-node",
        ),
        pytest.param(
            (rule(0, 5, 4),),
            f"{WHERE.format(0)}.devices: requested 5 devices to be replicated, "
            "but only 4 devices available",
            id="count-larger-than-the-node",
        ),
    ],
)
def test_what_only_the_node_shows_is_refused_naming_the_entries(
    rules: tuple[ShareRule, ...], message: str
) -> None:
    with pytest.raises(ResourceError) as caught:
        build_resources(plain_node(4), sliced(*rules))
    assert str(caught.value) == message


def test_a_reference_listed_twice_in_one_entry_counts_once() -> None:
    (resource,) = build_resources(plain_node(2), sliced(rule(0, (1, "1", gpu_uuid(1)), 2)))
    assert [d.id for d in resource.devices] == [
        gpu_uuid(0),
        f"{gpu_uuid(1)}::0",
        f"{gpu_uuid(1)}::1",
    ]


def test_entries_for_a_resource_the_node_lacks_are_skipped_even_with_a_device_list() -> None:
    options = sliced(rule(0, (7,), 2, name="nvidia.com/mig-1g.5gb"), rule(1, (0,), 2))
    (resource,) = build_resources(plain_node(2), options)
    assert per_gpu(resource) == {"0": 2, "1": 1}


def test_mps_refuses_whole_gpus_beside_replicas_under_one_name() -> None:
    sharing = SharingOptions(
        strategy=SharingStrategy.MPS,
        rules=(ShareRule(name=GPU, replicas=2, devices=(0,), where="sharing.mps.resources[0]"),),
    )
    with pytest.raises(ResourceError) as caught:
        build_resources(plain_node(2), ResourceOptions(sharing=sharing, mps_root="/m"))
    assert str(caught.value) == (
        "sharing.mps.resources: with MPS, devices of nvidia.com/gpu that no entry selects "
        "(device 1) cannot be served whole beside its replicas; select them too or set "
        "renameByDefault: true"
    )
    renamed = SharingOptions(
        strategy=SharingStrategy.MPS, rules=sharing.rules, rename_by_default=True
    )
    whole, shared = build_resources(plain_node(2), ResourceOptions(sharing=renamed, mps_root="/m"))
    assert (whole.name, whole.behaviour.mps) == (GPU, None)
    assert shared.behaviour.mps is not None


def test_distinct_devices_is_a_behaviour_of_the_resource_its_entries_share() -> None:
    options = sliced(rule(0, (0,), 4, distinct_devices=True), rule(1, (1,), 2))
    (resource,) = build_resources(plain_node(2), options)
    assert resource.behaviour.distinct_devices is True
    (plain,) = build_resources(plain_node(2), sliced(rule(0, (0,), 4), rule(1, (1,), 2)))
    assert plain.behaviour.distinct_devices is False
    # A sharing edit: the device list and allocator change in place, no restart.
    assert resource.behaviour_digest == plain.behaviour_digest
    assert resource.devices_digest != plain.devices_digest


def test_a_resource_with_no_replicas_is_never_distinct() -> None:
    options = sliced(rule(0, (0,), 2, distinct_devices=True), rename_by_default=True)
    whole, shared = build_resources(plain_node(2), options)
    assert (whole.behaviour.distinct_devices, shared.behaviour.distinct_devices) == (False, True)


def test_the_size_guard_names_the_per_gpu_shape() -> None:
    options = sliced(rule(0, (0, 1), 9000), rule(1, (2, 3, 4, 5, 6, 7), 8000))
    with pytest.raises(ResourceError) as caught:
        build_resources(plain_node(8), options)
    message = str(caught.value)
    assert message.startswith(
        "the device list of resource 'nvidia.com/gpu' (2 x 9000 + 6 x 8000 replicas = 66000 "
        "devices) encodes to "
    )
    most = int(message.rpartition("; at most ")[2].removesuffix(" replicas fit"))
    # The advice is a count per device that does fit, and the next one does not.
    build_resources(plain_node(8), sliced(rule(0, "all", most)))
    with pytest.raises(ResourceError):
        build_resources(plain_node(8), sliced(rule(0, "all", most + 1)))


@settings(max_examples=60, deadline=None)
@given(
    counts=st.lists(st.sampled_from([0, 2, 3, 7]), min_size=1, max_size=6),
    rename=st.booleans(),
)
def test_the_size_estimate_is_exact_for_per_gpu_counts(counts: list[int], rename: bool) -> None:
    tables = {GPU: build_resources(plain_node(len(counts)))[0].devices}
    rules = tuple(
        rule(position, (index,), count)
        for position, (index, count) in enumerate((i, c) for i, c in enumerate(counts) if c)
    )
    sharing = SharingOptions(
        strategy=SharingStrategy.TIME_SLICING, rules=rules, rename_by_default=rename
    )
    selected = select(tables, sharing)
    built = replicate(tables, selected)
    assert sum(len(devices) for devices in built.values()) == sum(c or 1 for c in counts)
    largest = max(list_and_watch_size(d, health=Health.UNHEALTHY) for d in built.values())
    check_replication_fits(tables, selected, limit=largest)
    with pytest.raises(ResourceError):
        check_replication_fits(tables, selected, limit=largest - 1)
