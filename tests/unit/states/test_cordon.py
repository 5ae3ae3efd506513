"""The GPU cordon annotation: its entries, what they name, and the overlay on the health book.

The devices are the simulated `a100-mig-mixed` node (GPUs 0-4 and 7 in MIG
mode, 5 and 6 whole); the health book under the overlay is the real one,
moved by real XID events with the test's own clock.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from loguru import logger

from devices.health import EventKind, HealthEvent
from devices.library import ProbeResult
from devices.model import Gpu, Inventory
from devices.simulated import SimulatedLibrary
from resources.model import Health, PluginDevice
from states.cordon import (
    CORDON_ANNOTATION,
    MAX_WARNINGS,
    CordonBook,
    CordonEntry,
    EntryKind,
    bus_key,
    parse_cordon,
    resolve_cordon,
)
from states.health import DeviceHealth, HealthBook, HealthChange, HealthPolicy

QUIET = 30.0


@pytest.fixture(scope="module")
def inventory() -> Iterator[Inventory]:
    library = SimulatedLibrary.from_argument("a100-mig-mixed")
    library.init()
    yield library.inventory()
    library.shutdown()


def gpu(inventory: Inventory, index: int) -> Gpu:
    return inventory.gpus[index]


def whole(found: Gpu) -> tuple[str, ...]:
    return (found.uuid, *(mig.uuid for mig in found.mig_devices))


# -- parsing ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "kind", "key"),
    [
        ("GPU-b6b2b429-aca0-56f2-a9b6-93a71e65af3d", EntryKind.UUID,
         "gpu-b6b2b429-aca0-56f2-a9b6-93a71e65af3d"),
        ("gpu-B6B2B429-ACA0-56F2-A9B6-93A71E65AF3D", EntryKind.UUID,
         "gpu-b6b2b429-aca0-56f2-a9b6-93a71e65af3d"),
        ("MIG-25ca7cb9-2888-5d6e-87e2-4fdfdbeef358", EntryKind.UUID,
         "mig-25ca7cb9-2888-5d6e-87e2-4fdfdbeef358"),
        ("MIG-GPU-b6b2b429-aca0-56f2-a9b6-93a71e65af3d/7/0", EntryKind.UUID,
         "mig-gpu-b6b2b429-aca0-56f2-a9b6-93a71e65af3d/7/0"),
        ("3", EntryKind.INDEX, "3"),
        ("03", EntryKind.INDEX, "3"),
        ("0:1", EntryKind.MIG_INDEX, "0:1"),
        ("00000000:3B:00.0", EntryKind.BUS_ID, "0000:3b:00.0"),
        ("0000:3b:00.0", EntryKind.BUS_ID, "0000:3b:00.0"),
        ("3b:00.0", EntryKind.BUS_ID, "0000:3b:00.0"),
    ],
)  # fmt: skip
def test_each_entry_form_is_read_into_its_comparable_key(
    text: str, kind: EntryKind, key: str
) -> None:
    assert parse_cordon(text).entries == (CordonEntry(text, kind, key),)


def test_entries_are_split_on_commas_with_whitespace_and_empty_entries_skipped() -> None:
    request = parse_cordon(" 3 ,\tGPU-ab12 ,, 0:1,\n")
    assert [entry.text for entry in request.entries] == ["3", "GPU-ab12", "0:1"]
    assert request.invalid == ()


def test_a_repeated_entry_counts_once() -> None:
    assert [e.text for e in parse_cordon("3,3, 3").entries] == ["3"]


@pytest.mark.parametrize(
    "garbage",
    ["GPU 3", "gpu3", "GPU-", "-1", "1.5", "3b:00", "zz:00.0", "3b:00.9", "all", "0:1:2", "💥"],
)
def test_garbage_is_set_aside_as_invalid_and_the_other_entries_stand(garbage: str) -> None:
    request = parse_cordon(f"2,{garbage}")
    assert request.invalid == (garbage,)
    assert [entry.text for entry in request.entries] == ["2"]


def test_no_annotation_and_an_empty_one_cordon_nothing() -> None:
    assert parse_cordon(None).entries == parse_cordon("").entries == ()
    assert parse_cordon(" , ").invalid == ()


def test_bus_ids_of_every_writer_compare_equal() -> None:
    assert bus_key("00000000:3B:00.0") == bus_key("0000:3b:00.0") == bus_key("3B:00.0")
    assert bus_key("0001:3b:00.0") != bus_key("0000:3b:00.0")
    assert bus_key("nope") is None


# -- matching against the node ----------------------------------------------------------------


def test_a_gpu_named_by_uuid_index_or_bus_id_holds_the_gpu_and_all_its_mig_devices(
    inventory: Inventory,
) -> None:
    zero, seven = gpu(inventory, 0), gpu(inventory, 7)
    for value in (zero.uuid, "0", "0000:07:00.0", zero.pci_bus_id, zero.uuid.upper()):
        resolution = resolve_cordon(parse_cordon(value), inventory)
        assert resolution.devices == whole(zero), value
        assert resolution.gpus == (zero.uuid,)
        assert resolution.warnings == ()
    both = resolve_cordon(parse_cordon(f"7, {zero.uuid}"), inventory)
    assert both.devices == whole(zero) + whole(seven), "in the node's order, not the entries'"


def test_a_mig_device_named_by_uuid_or_index_holds_that_device_alone(inventory: Inventory) -> None:
    one = gpu(inventory, 1)
    mig = one.mig_devices[1]
    for value in (mig.uuid, mig.index):
        resolution = resolve_cordon(parse_cordon(value), inventory)
        assert resolution.devices == (mig.uuid,)
        assert resolution.gpus == (one.uuid,)


def test_entries_that_match_no_gpu_and_garbage_are_warnings_naming_the_entry(
    inventory: Inventory,
) -> None:
    resolution = resolve_cordon(parse_cordon("5, 12, GPU-0000, 9:0, 0000:ff:00.0, oops"), inventory)
    assert resolution.devices == (gpu(inventory, 5).uuid,)
    origin = f"annotation {CORDON_ANNOTATION}"
    assert resolution.warnings == (
        f'{origin}: "oops": not a GPU UUID, index or PCI bus ID',
        f'{origin}: "12": no such GPU on this node',
        f'{origin}: "GPU-0000": no such GPU on this node',
        f'{origin}: "9:0": no such GPU on this node',
        f'{origin}: "0000:ff:00.0": no such GPU on this node',
    )


def test_a_long_annotation_of_garbage_makes_a_bounded_list_of_warnings(
    inventory: Inventory,
) -> None:
    value = ",".join(f"bad{n}" for n in range(100)) + "," + "x" * 300
    warnings = resolve_cordon(parse_cordon(value), inventory).warnings
    assert len(warnings) == MAX_WARNINGS
    assert warnings[-1] == f"annotation {CORDON_ANNOTATION}: 86 more entries name no GPU"
    assert all(len(w) < 200 for w in warnings)


def test_before_any_inventory_every_entry_matches_nothing() -> None:
    assert resolve_cordon(parse_cordon("0"), None).devices == ()


# -- the overlay on the health book ------------------------------------------------------------


def ok(uuid: str) -> ProbeResult:
    return ProbeResult(ok=True)


class Node:
    """A health book, the cordon over it, and the advertised devices, moved by the test's clock."""

    def __init__(self, inventory: Inventory) -> None:
        self.inventory = inventory
        self.book = HealthBook(inventory, HealthPolicy(quiet_period=QUIET, probe_interval=5.0))
        self.cordon = CordonBook()
        self.cordon.follow(inventory)
        self.now = 0.0

    def healthy(self, uuid: str) -> bool:
        return self.book.kubelet_health(uuid) is Health.HEALTHY

    def annotate(self, value: str | None) -> list[HealthChange]:
        self.cordon.want(value)
        return self.cordon.settle(self.healthy)

    def xid(self, uuid: str, number: int) -> list[HealthChange]:
        event = HealthEvent(EventKind.XID, uuid, xid=number)
        return self.cordon.hold(self.book.apply(event, self.now))

    def after(self, seconds: float) -> list[HealthChange]:
        self.now += seconds
        return self.cordon.hold(self.book.tick(self.now, ok))

    def seen(self, device: PluginDevice) -> Health:
        """What the kubelet is sent for one advertised device."""
        checked = device.with_health(
            Health.HEALTHY if self.healthy(device.uuid) else Health.UNHEALTHY
        )
        return self.cordon.devices([checked])[0].health


@pytest.fixture
def node(inventory: Inventory) -> Node:
    return Node(inventory)


def replica(found: Gpu, n: int) -> PluginDevice:
    return PluginDevice(f"{found.uuid}::{n}", found.uuid, found.uuid, str(found.index), ())


def moves(changes: list[HealthChange]) -> list[tuple[str, str, str, str, bool]]:
    return [(c.uuid, str(c.source), str(c.dest), c.reason, c.kubelet_changed) for c in changes]


def test_cordoning_a_healthy_gpu_makes_it_and_its_replicas_unhealthy_as_cordoned(
    node: Node, inventory: Inventory
) -> None:
    five = gpu(inventory, 5)
    changes = node.annotate("5")
    assert moves(changes) == [(five.uuid, "healthy", "unhealthy", "cordoned", True)]
    assert changes[0].cordon is True
    assert [node.seen(replica(five, n)) for n in range(3)] == [Health.UNHEALTHY] * 3
    assert node.seen(replica(gpu(inventory, 6), 0)) is Health.HEALTHY, "other GPUs untouched"
    status = node.cordon.statuses(node.book.statuses())[five.uuid]
    assert (status.health, status.kubelet_health, status.reason, status.cordoned) == (
        DeviceHealth.HEALTHY,
        Health.UNHEALTHY,
        "cordoned",
        True,
    )
    assert node.book.status(five.uuid) == node.book.statuses()[five.uuid], "the book is unwritten"
    assert node.book.kubelet_health(five.uuid) is Health.HEALTHY


def test_uncordoning_makes_the_gpu_healthy_again(node: Node, inventory: Inventory) -> None:
    five = gpu(inventory, 5)
    node.annotate(f"{five.uuid}")
    changes = node.annotate(None)
    assert moves(changes) == [(five.uuid, "unhealthy", "healthy", "uncordoned", True)]
    assert changes[0].cordon is False
    assert node.seen(replica(five, 0)) is Health.HEALTHY
    assert node.cordon.statuses(node.book.statuses())[five.uuid].cordoned is False


def test_the_same_value_again_moves_nothing(node: Node) -> None:
    assert node.annotate("5")
    assert node.annotate("5") == []
    assert node.annotate(" 5 ,") == [], "the same entries written differently"


def test_editing_the_annotation_moves_only_the_gpus_whose_entries_changed(
    node: Node, inventory: Inventory
) -> None:
    five, six = gpu(inventory, 5), gpu(inventory, 6)
    node.annotate("5")
    assert moves(node.annotate("5,6")) == [(six.uuid, "healthy", "unhealthy", "cordoned", True)]
    assert moves(node.annotate("6")) == [(five.uuid, "unhealthy", "healthy", "uncordoned", True)]


def test_an_xid_gpu_cordoned_and_released_keeps_its_xid(node: Node, inventory: Inventory) -> None:
    five = gpu(inventory, 5)
    node.xid(five.uuid, 79)
    cordoned = node.annotate("5")
    assert moves(cordoned) == [(five.uuid, "unhealthy", "unhealthy", "cordoned", False)]
    status = node.cordon.statuses(node.book.statuses())[five.uuid]
    assert (status.reason, status.cordoned) == ("xid 79", True), "the device's own error first"
    released = node.annotate("")
    assert moves(released) == [(five.uuid, "unhealthy", "unhealthy", "uncordoned", False)]
    assert node.seen(replica(five, 0)) is Health.UNHEALTHY
    assert node.cordon.statuses(node.book.statuses())[five.uuid].reason == "xid 79"


def test_an_xid_while_cordoned_is_held_and_its_recovery_leaves_the_gpu_cordoned(
    node: Node, inventory: Inventory
) -> None:
    six = gpu(inventory, 6)
    node.annotate("6")
    hit = node.xid(six.uuid, 31 + 1)  # a transient XID
    assert moves(hit) == [(six.uuid, "healthy", "unhealthy", "xid 32", False)]
    assert hit[0].held
    recovered = node.after(QUIET + 1)
    assert [c.dest for c in recovered][-1] is DeviceHealth.HEALTHY
    assert not any(c.kubelet_changed for c in recovered), "the cordon still holds it"
    assert node.seen(replica(six, 0)) is Health.UNHEALTHY
    assert moves(node.annotate(None)) == [(six.uuid, "unhealthy", "healthy", "uncordoned", True)]


def test_a_gpu_that_recovers_while_cordoned_is_released_healthy(
    node: Node, inventory: Inventory
) -> None:
    five = gpu(inventory, 5)
    node.xid(five.uuid, 32)
    node.annotate("5")
    node.after(QUIET + 1)
    assert node.healthy(five.uuid)
    assert moves(node.annotate(None)) == [(five.uuid, "unhealthy", "healthy", "uncordoned", True)]


def test_mig_devices_follow_their_gpu_and_a_mig_entry_holds_one_device(
    node: Node, inventory: Inventory
) -> None:
    one = gpu(inventory, 1)
    changes = node.annotate("1")
    assert [c.uuid for c in changes] == list(whole(one))
    assert all(c.kubelet_changed and c.reason == "cordoned" for c in changes[1:])
    mig = one.mig_devices[2]
    advertised = PluginDevice(mig.uuid, mig.uuid, one.uuid, mig.index, ())
    assert node.seen(advertised) is Health.UNHEALTHY
    released = node.annotate(mig.index)
    assert [c.uuid for c in released] == [one.uuid, *(m.uuid for m in one.mig_devices[:2])]
    assert node.seen(advertised) is Health.UNHEALTHY, "the one MIG device named stays cordoned"


def test_a_new_inventory_is_matched_afresh_and_a_gpu_gone_is_released_silently(
    node: Node, inventory: Inventory
) -> None:
    node.annotate("5, 7")
    smaller = Inventory(
        driver_version=inventory.driver_version,
        cuda_driver_version=inventory.cuda_driver_version,
        gpus=inventory.gpus[:6],
    )
    node.cordon.follow(smaller)
    assert node.cordon.settle(node.healthy) == [], "GPU 7 is gone: nobody to tell"
    assert not node.cordon.holds(gpu(inventory, 7).uuid)
    assert node.cordon.view().warnings == (
        f'annotation {CORDON_ANNOTATION}: "7": no such GPU on this node',
    )
    node.cordon.follow(inventory)
    assert [c.uuid for c in node.cordon.settle(node.healthy)] == list(whole(gpu(inventory, 7)))


def test_nothing_moves_before_the_devices_are_known() -> None:
    cordon = CordonBook()
    cordon.want("0")
    assert cordon.settle(lambda uuid: True) == []
    assert cordon.view().value == "0"
    assert cordon.view().devices == ()


def test_a_value_is_said_once_in_the_log_with_its_warnings(node: Node) -> None:
    lines: list[tuple[str, str]] = []
    handler = logger.add(lambda m: lines.append((m.record["level"].name, m.record["message"])))
    try:
        node.annotate("5, nope, 42")
        node.annotate("5,nope,42")
        node.annotate(None)
    finally:
        logger.remove(handler)
    origin = f"annotation {CORDON_ANNOTATION}"
    assert lines == [
        ("WARNING", f'{origin}: "nope": not a GPU UUID, index or PCI bus ID; '
                    f'{origin}: "42": no such GPU on this node'),
        ("INFO", f"{origin}: 1 device(s) cordoned, on {node.inventory.gpus[5].uuid}"),
        ("INFO", f"{origin}: no GPU is cordoned"),
    ]  # fmt: skip


def test_the_view_shows_the_value_the_gpus_and_the_warnings(
    node: Node, inventory: Inventory
) -> None:
    node.cordon.off = None
    node.annotate("3:0, 6, x")
    assert node.cordon.view().to_json() == {
        "annotation": CORDON_ANNOTATION,
        "value": "3:0, 6, x",
        "gpus": [gpu(inventory, 3).uuid, gpu(inventory, 6).uuid],
        "devices": [gpu(inventory, 3).mig_devices[0].uuid, gpu(inventory, 6).uuid],
        "warnings": [f'annotation {CORDON_ANNOTATION}: "x": not a GPU UUID, index or PCI bus ID'],
        "off": None,
    }
