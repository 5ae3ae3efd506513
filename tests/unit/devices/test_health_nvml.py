"""The NVML event loop and the NVML re-probe, against a pynvml-shaped fake with an event set.

The loop runs in its real thread; the fake's `nvmlEventSetWait_v2` blocks on a
queue for at most the requested time, like the driver, so tests feed it
events or errors and wait for what the loop posts.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import pynvml
import pytest

import devices.nvml
from devices.backends import open_health_source
from devices.health import EventKind, HealthEvent
from devices.health_nvml import NO_INSTANCE, NvmlHealthSource
from devices.library import ProbeResult
from devices.model import Inventory
from devices.xids import xid_policy
from foundation.backoff import Backoff
from tests.waiting import eventually_sync

from .conftest import FakeNode
from .fake_pynvml import FakeNvml

GPU0 = "GPU-00000000-0000-4000-8000-000000000000"
GPU2 = "GPU-22222222-0000-4000-8000-000000000000"
MIG0 = "MIG-11111111-0000-4000-8000-000000000001"
MIG2 = "MIG-11111111-0000-4000-8000-000000000002"
WAIT = 5.0
XID = pynvml.nvmlEventTypeXidCriticalError
DBE = pynvml.nvmlEventTypeDoubleBitEccError
SBE = pynvml.nvmlEventTypeSingleBitEccError


class EventNvml(FakeNvml):
    """The discovery fake plus event sets, UUID lookups and the probe's calls."""

    def __init__(self, base: FakeNvml) -> None:
        super().__init__(base.gpus)
        for name in dir(pynvml):
            if name.startswith("nvmlEventType"):
                setattr(self, name, getattr(pynvml, name))
        self.topology = base.topology
        self.supported: dict[str, int] = {}  # GPU UUID -> event mask (default: the three)
        self.waits: queue.Queue[Any] = queue.Queue()  # event data, or an int error code
        self.registered: list[tuple[str, int]] = []
        self.sets_created = 0
        self.sets_freed = 0
        self.retired_pending: dict[str, int] = {}
        self.rows: dict[str, tuple[int, int, int, int]] = {}
        self.lock = threading.Lock()

    def _by_uuid(self, uuid: str) -> tuple[Any, ...]:
        for index, gpu in enumerate(self.gpus):
            if gpu.uuid == uuid:
                return ("gpu", index)
            for slot, mig in gpu.migs.items():
                if mig.uuid == uuid:
                    return ("mig", index, slot)
        raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> tuple[Any, ...]:
        self._enter("nvmlDeviceGetHandleByUUID", uuid)
        return self._by_uuid(uuid)

    def nvmlDeviceGetSupportedEventTypes(self, handle: tuple[Any, ...]) -> int:
        self._enter("nvmlDeviceGetSupportedEventTypes", handle)
        return self.supported.get(self._gpu(handle).uuid, XID | DBE | SBE | 0x4)

    def nvmlEventSetCreate(self) -> str:
        self._enter("nvmlEventSetCreate")
        with self.lock:
            self.sets_created += 1
            return f"set-{self.sets_created}"

    def nvmlEventSetFree(self, event_set: str) -> None:
        self._enter("nvmlEventSetFree", event_set)
        with self.lock:
            self.sets_freed += 1

    def nvmlDeviceRegisterEvents(self, handle: tuple[Any, ...], mask: int, event_set: str) -> None:
        self._enter("nvmlDeviceRegisterEvents", handle, mask, event_set)
        with self.lock:
            self.registered.append((self._gpu(handle).uuid, mask))

    def nvmlEventSetWait_v2(self, event_set: str, timeout_ms: int) -> Any:
        self._enter("nvmlEventSetWait_v2", event_set, timeout_ms)
        try:
            item = self.waits.get(timeout=timeout_ms / 1000)
        except queue.Empty:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_TIMEOUT) from None
        if isinstance(item, int):
            raise pynvml.NVMLError(item)
        if isinstance(item, Exception):
            raise item
        return item

    def event(self, kind: int, gpu_index: int, data: int = 0, gi: int = NO_INSTANCE,
              ci: int = NO_INSTANCE) -> None:  # fmt: skip
        self.waits.put(
            SimpleNamespace(
                device=("gpu", gpu_index),
                eventType=kind,
                eventData=data,
                gpuInstanceId=gi,
                computeInstanceId=ci,
            )
        )

    # -- what the probe reads --------------------------------------------------------

    def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(self, handle: tuple[Any, ...]) -> Any:
        self._enter("nvmlDeviceGetDeviceHandleFromMigDeviceHandle", handle)
        return ("gpu", handle[1])

    def nvmlDeviceGetRetiredPagesPendingStatus(self, handle: tuple[Any, ...]) -> int:
        self._enter("nvmlDeviceGetRetiredPagesPendingStatus", handle)
        return self.retired_pending.get(self._gpu(handle).uuid, pynvml.NVML_FEATURE_DISABLED)

    def nvmlDeviceGetRemappedRows(self, handle: tuple[Any, ...]) -> tuple[int, int, int, int]:
        self._enter("nvmlDeviceGetRemappedRows", handle)
        return self.rows.get(self._gpu(handle).uuid, (0, 0, 0, 0))


@dataclass
class Node:
    nvml: EventNvml
    node: FakeNode
    inventory: Inventory


@pytest.fixture
def node(fake_node: FakeNode, monkeypatch: pytest.MonkeyPatch) -> Iterator[Node]:
    nvml = EventNvml(fake_node.nvml)
    monkeypatch.setattr(devices.nvml, "pynvml", nvml)
    fake_node.library.init()
    inventory = fake_node.library.inventory()
    yield Node(nvml, fake_node, inventory)
    fake_node.library.shutdown()


class Watch:
    """A started NVML source and what it posted."""

    def __init__(self, source: NvmlHealthSource) -> None:
        self.source = source
        self.events: queue.Queue[HealthEvent] = queue.Queue()

    def next(self) -> HealthEvent:
        return self.events.get(timeout=WAIT)


def start(node: Node, **options: Any) -> Watch:
    options.setdefault("policy", xid_policy())
    source = NvmlHealthSource(
        node.node.library,
        node.inventory,
        nvml=node.nvml,
        wait_ms=20,
        backoff=Backoff(initial=0.01, cap=0.02),
        **options,
    )
    watch = Watch(source)
    source.start(watch.events.put)
    return watch


@pytest.fixture
def watch(node: Node) -> Iterator[Watch]:
    started = start(node)
    yield started
    assert started.source.stop(timeout=WAIT)


def registered(node: Node) -> list[tuple[str, int]]:
    with node.nvml.lock:
        return list(node.nvml.registered)


def wait_until_registered(node: Node, count: int) -> None:
    # The first bounded wait starts only after registration: wait for it.
    node.nvml.event(XID, 0, data=13)  # disabled by default: nothing is posted for it
    eventually_sync(
        lambda: len(registered(node)) >= count and node.nvml.waits.empty(),
        what=f"{count} GPU(s) registered and the first wait taken",
        timeout=WAIT,
        detail=lambda: registered(node),
    )


# -- registration -----------------------------------------------------------------------


def test_each_physical_gpu_is_registered_once_with_the_supported_mask(
    node: Node, watch: Watch
) -> None:
    wait_until_registered(node, 2)
    assert sorted(registered(node)) == [(GPU0, XID | DBE | SBE), (GPU2, XID | DBE | SBE)]
    assert node.nvml.sets_created == 1


def test_gpu_supporting_none_of_the_events_is_unmonitored_not_lost(node: Node) -> None:
    node.nvml.supported[GPU2] = 0x4  # only a P-state event: nothing we watch
    watch = start(node)
    try:
        wait_until_registered(node, 1)
        assert registered(node) == [(GPU0, XID | DBE | SBE)]
        unmonitored = watch.next()
        assert (unmonitored.kind, unmonitored.uuid) == (EventKind.UNMONITORED, GPU2)
        assert unmonitored.detail == "supports none of the XID and ECC events"
        node.nvml.event(XID, 0, data=79)
        assert watch.next().uuid == GPU0  # and nothing else was posted about GPU2 before it
    finally:
        assert watch.source.stop(timeout=WAIT)


@pytest.mark.parametrize(
    ("function", "detail"),
    [
        pytest.param("nvmlDeviceRegisterEvents", "nvmlDeviceRegisterEvents: Not Supported",
                     id="register"),
        pytest.param("nvmlDeviceGetSupportedEventTypes",
                     "nvmlDeviceGetSupportedEventTypes: Not Supported", id="supported-types"),
    ],
)  # fmt: skip
def test_not_supported_registration_is_unmonitored_healthy_and_not_retried(
    node: Node, function: str, detail: str
) -> None:
    gpu2 = ("gpu", 2)
    node.nvml.fail(function, pynvml.NVML_ERROR_NOT_SUPPORTED, lambda handle, *_: handle == gpu2)
    watch = start(node, reregister_seconds=0.0)  # a retry would come at every wait
    try:
        unmonitored = watch.next()
        assert (unmonitored.kind, unmonitored.uuid, unmonitored.detail) == (
            EventKind.UNMONITORED, GPU2, detail
        )  # fmt: skip
        wait_until_registered(node, 1)
        for _ in range(3):  # several bounded waits go by: no retry, no LOST
            wait_until_registered(node, 1)
        node.nvml.event(XID, 0, data=79)
        following = watch.next()
        assert (following.kind, following.uuid, following.xid) == (EventKind.XID, GPU0, 79)
        assert registered(node) == [(GPU0, XID | DBE | SBE)]
    finally:
        assert watch.source.stop(timeout=WAIT)


def test_registration_failure_is_that_gpu_only_and_is_retried(node: Node) -> None:
    node.nvml.fail(
        "nvmlDeviceGetHandleByUUID", pynvml.NVML_ERROR_GPU_IS_LOST, lambda uuid: uuid == GPU2
    )
    watch = start(node, reregister_seconds=0.0)
    try:
        lost, unmonitored = watch.next(), watch.next()
        assert (lost.kind, lost.uuid) == (EventKind.LOST, GPU2)
        assert "GPU is lost" in lost.detail
        assert (unmonitored.kind, unmonitored.uuid) == (EventKind.UNMONITORED, GPU2)
        assert unmonitored.detail == lost.detail
        node.nvml.failures.clear()
        while (found := watch.next()).kind in (EventKind.LOST, EventKind.UNMONITORED):
            assert found.uuid == GPU2  # retried and still failing, until the fault is cleared
        again = watch.next()
        assert [(found.kind, found.uuid), (again.kind, again.uuid)] == [
            (EventKind.WATCHED, GPU2),
            (EventKind.FOUND, GPU2),
        ]
        assert sorted(uuid for uuid, _ in registered(node)) == [GPU0, GPU2]
    finally:
        assert watch.source.stop(timeout=WAIT)


def test_a_rebuilt_event_set_that_registers_an_unmonitored_gpu_reports_it_watched(
    node: Node,
) -> None:
    node.nvml.fail(
        "nvmlDeviceGetHandleByUUID", pynvml.NVML_ERROR_GPU_IS_LOST, lambda uuid: uuid == GPU2
    )
    watch = start(node, reregister_seconds=3600.0)  # no periodic retry in this test
    try:
        assert [watch.next().kind, watch.next().kind] == [EventKind.LOST, EventKind.UNMONITORED]
        node.nvml.failures.clear()
        for _ in range(3):  # failed waits in a row: the set is rebuilt, every GPU registered
            node.nvml.waits.put(pynvml.NVML_ERROR_UNKNOWN)
        kinds = []
        while (event := watch.next()).kind is not EventKind.WATCHED:
            kinds.append(event.kind)
        assert event.uuid == GPU2
        assert kinds == [EventKind.DEGRADED]
        assert node.nvml.sets_created == 2
    finally:
        assert watch.source.stop(timeout=WAIT)


# -- events -------------------------------------------------------------------------------


def test_xid_on_a_gpu(node: Node, watch: Watch) -> None:
    node.nvml.event(XID, 2, data=79)
    got = watch.next()
    assert (got.kind, got.uuid, got.xid, got.gi, got.ci) == (EventKind.XID, GPU2, 79, None, None)


def test_xid_on_a_mig_instance_carries_the_instance_ids(node: Node, watch: Watch) -> None:
    node.nvml.event(XID, 0, data=94, gi=13, ci=0)
    got = watch.next()
    assert (got.uuid, got.xid, got.gi, got.ci) == (GPU0, 94, 13, 0)


def test_disabled_xids_single_bit_ecc_and_unnamed_devices_are_dropped(
    node: Node, watch: Watch
) -> None:
    node.nvml.event(XID, 0, data=13)  # application error
    node.nvml.event(SBE, 0)  # corrected ECC
    node.nvml.fail("nvmlDeviceGetUUID", pynvml.NVML_ERROR_UNKNOWN, lambda h: h == ("gpu", 2))
    node.nvml.event(XID, 2, data=79)  # cannot tell which GPU: dropped, nobody else marked
    node.nvml.event(DBE, 0)
    got = watch.next()
    assert (got.kind, got.uuid, got.reason) == (EventKind.ECC, GPU0, "double-bit ECC error")


def test_enable_all_reports_application_xids(node: Node) -> None:
    watch = start(node, policy=xid_policy(enable="all"))
    try:
        node.nvml.event(XID, 0, data=13)
        assert watch.next().xid == 13
    finally:
        assert watch.source.stop(timeout=WAIT)


# -- failures of the loop itself ---------------------------------------------------------------


def test_wait_error_degrades_once_then_restores_without_touching_devices(
    node: Node, watch: Watch
) -> None:
    node.nvml.waits.put(pynvml.NVML_ERROR_UNKNOWN)
    node.nvml.waits.put(pynvml.NVML_ERROR_UNKNOWN)
    degraded = watch.next()
    assert (degraded.kind, degraded.uuid) == (EventKind.DEGRADED, "")
    assert degraded.detail == "waiting for events failed: Unknown Error"
    restored = watch.next()  # the same error twice is said once; then a clean (timed out) wait
    assert restored.kind is EventKind.RESTORED
    node.nvml.event(XID, 0, data=79)
    assert watch.next().kind is EventKind.XID


def test_repeated_wait_errors_rebuild_the_event_set(node: Node, watch: Watch) -> None:
    wait_until_registered(node, 2)
    for _ in range(3):
        node.nvml.waits.put(pynvml.NVML_ERROR_GPU_IS_LOST)
    assert watch.next().kind is EventKind.DEGRADED
    assert watch.next().kind is EventKind.RESTORED
    assert node.nvml.sets_created == 2
    assert node.nvml.sets_freed == 1
    assert len(registered(node)) == 4  # both GPUs registered again on the fresh set


def test_nvml_that_cannot_start_degrades_and_retries(node: Node) -> None:
    node.nvml.fail("nvmlEventSetCreate", pynvml.NVML_ERROR_UNINITIALIZED)
    watch = start(node)
    try:
        got = watch.next()
        assert got.kind is EventKind.DEGRADED
        assert got.detail.startswith("cannot watch events: ")
        node.nvml.failures.clear()
        assert watch.next().kind is EventKind.RESTORED
    finally:
        assert watch.source.stop(timeout=WAIT)


def test_a_crash_in_the_thread_is_posted_not_lost(node: Node, watch: Watch) -> None:
    node.nvml.waits.put(RuntimeError("boom"))
    got = watch.next()
    assert (got.kind, got.detail) == (EventKind.DEGRADED, "health-nvml crashed: boom")
    watch.source.stop(timeout=WAIT)
    assert not watch.source.running


def test_stop_joins_promptly_and_releases_nvml(node: Node) -> None:
    shutdowns = node.nvml.shutdowns
    watch = start(node)
    wait_until_registered(node, 2)
    assert watch.source.running
    assert watch.source.stop(timeout=WAIT)
    assert not watch.source.running
    assert node.nvml.sets_freed == 1
    # the source held its own reference: NVML stays up for the discovery user
    assert node.nvml.shutdowns == shutdowns
    assert node.node.library.probe(GPU0).ok


def test_open_health_source_picks_the_nvml_loop(node: Node) -> None:
    source = open_health_source(
        node.node.library, node.inventory, events_file="/tmp/ignored", policy=xid_policy()
    )
    assert isinstance(source, NvmlHealthSource)
    empty = Inventory(driver_version="1", cuda_driver_version="12.4")
    assert source.name == "health-nvml"
    none = open_health_source(node.node.library, empty, events_file=None, policy=xid_policy())
    assert none.name == "health-off"


# -- the re-probe ----------------------------------------------------------------------------------


def test_probe_of_healthy_gpu_and_mig_device(node: Node) -> None:
    assert node.node.library.probe(GPU0) == ProbeResult(
        True, "checked handle, memory, retired pages, row remapping", 0
    )
    assert node.node.library.probe(MIG2).ok
    assert "nvmlDeviceGetDeviceHandleFromMigDeviceHandle" in node.nvml.calls


@pytest.mark.parametrize(
    ("breakage", "detail"),
    [
        pytest.param(
            lambda n: n.fail("nvmlDeviceGetHandleByUUID", pynvml.NVML_ERROR_GPU_IS_LOST),
            "nvmlDeviceGetHandleByUUID failed: GPU is lost",
            id="lost",
        ),
        pytest.param(
            lambda n: n.fail("nvmlDeviceGetMemoryInfo", pynvml.NVML_ERROR_UNKNOWN),
            "nvmlDeviceGetMemoryInfo failed: Unknown Error",
            id="read-fails",
        ),
        pytest.param(
            lambda n: n.retired_pending.update({GPU0: pynvml.NVML_FEATURE_ENABLED}),
            "retired pages pending (a reset is required)",
            id="retired-pages",
        ),
        pytest.param(
            lambda n: n.rows.update({GPU0: (0, 1, 1, 0)}),
            "row remapping pending (a reset is required)",
            id="remap-pending",
        ),
        pytest.param(
            lambda n: n.rows.update({GPU0: (0, 1, 0, 1)}), "row remapping failed", id="remap-failed"
        ),
    ],
)
def test_probe_failures_and_the_reset_they_imply(node: Node, breakage: Any, detail: str) -> None:
    library = node.node.library
    breakage(node.nvml)
    assert library.probe(GPU0) == ProbeResult(False, detail, 0)
    assert not library.probe(MIG0).ok  # a MIG device is no better than its GPU
    node.nvml.failures.clear()
    node.nvml.retired_pending.clear()
    node.nvml.rows.clear()
    assert library.probe(GPU0) == ProbeResult(
        True, "checked handle, memory, retired pages, row remapping", 1
    )
    assert library.probe(GPU0).generation == 1  # one failure, one reset


def test_probe_skips_checks_the_gpu_does_not_offer(node: Node) -> None:
    node.nvml.fail("nvmlDeviceGetRetiredPagesPendingStatus", pynvml.NVML_ERROR_NOT_SUPPORTED)
    node.nvml.fail("nvmlDeviceGetRemappedRows", pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
    assert node.node.library.probe(GPU2) == ProbeResult(True, "checked handle, memory", 0)


def test_probe_of_unknown_device(node: Node) -> None:
    result = node.node.library.probe("GPU-nope")
    assert not result.ok
    assert result.detail == "nvmlDeviceGetHandleByUUID failed: Not Found"
