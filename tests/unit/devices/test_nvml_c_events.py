"""The NVML event loop's own paths, through real event sets of the fake `libnvidia-ml.so.1`.

What only the NVML watcher does (the simulated backend has no event sets):
the event record's instance ids for a MIG device, ECC kinds, a GPU that
cannot be registered and comes back, a GPU too old for events, and an event
stream that fails and is rebuilt. Each test waits for what the watcher
posts, bounded; an XID marker (1000 and up) shows that nothing else came
before it.
"""

from __future__ import annotations

import queue
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from itertools import count
from pathlib import Path

import pytest

from devices.health import EventKind, HealthEvent
from devices.health_nvml import NvmlHealthSource
from devices.model import Inventory
from devices.nvml import NvmlLibrary
from devices.xids import xid_policy
from foundation.backoff import Backoff
from tests.waiting import eventually_sync

from .fake_nvml_driver import FakeDriver

Install = Callable[[str | Path], FakeDriver]
WAIT = 5.0
MARK = 1000
UNKNOWN_ERROR = 999


@dataclass
class Watch:
    driver: FakeDriver
    library: NvmlLibrary
    inventory: Inventory
    source: NvmlHealthSource
    events: queue.Queue[HealthEvent]
    markers: Iterator[int]

    def next(self) -> HealthEvent:
        return self.events.get(timeout=WAIT)

    def until_marker(self) -> list[HealthEvent]:
        """Everything posted before a marker XID injected now (on GPU 0) comes out."""
        mark = MARK + next(self.markers)
        self.driver.xid(self.inventory.gpus[0].uuid, mark)
        got: list[HealthEvent] = []
        while (event := self.next()).xid != mark:
            if event.xid is None or event.xid < MARK:  # not a marker of an earlier attempt
                got.append(event)
        return got


@pytest.fixture
def watch(fake_driver: Install) -> Iterator[Callable[..., Watch]]:
    """Start the watcher on a node.

    `edit_node` may rewrite the node description before NVML starts;
    `before_start(driver)` may break the node after discovery, before watching.
    """
    started: list[Watch] = []

    def start(
        profile: str = "a100-mig-mixed",
        edit_node: Callable[[str], str] | None = None,
        before_start: Callable[[FakeDriver], None] | None = None,
    ) -> Watch:
        driver = fake_driver(profile)
        if edit_node is not None:
            driver.node_file.write_text(edit_node(driver.node_file.read_text()))
        library = NvmlLibrary(
            driver_root=str(driver.root), sysfs_root=driver.sysfs, mig_minors_path=driver.mig_minors
        )
        library.init()
        inventory = library.inventory()
        if before_start is not None:
            before_start(driver)
        source = NvmlHealthSource(
            library,
            inventory,
            policy=xid_policy(),
            wait_ms=20,
            reregister_seconds=0.05,
            backoff=Backoff(initial=0.01, cap=0.02),
        )
        events: queue.Queue[HealthEvent] = queue.Queue()
        one = Watch(driver, library, inventory, source, events, count(1))
        started.append(one)
        source.start(events.put)
        return one

    yield start
    for one in started:
        assert one.source.stop(timeout=WAIT)
        one.library.shutdown()


def wait_registered(watch: Watch) -> None:
    """Registration precedes the first wait: a marker that arrives proves it happened."""

    def delivers() -> bool:
        mark = MARK + next(watch.markers)
        watch.driver.xid(watch.inventory.gpus[0].uuid, mark)
        try:
            while watch.events.get(timeout=0.05).xid != mark:
                continue
        except queue.Empty:
            return False
        return True

    eventually_sync(delivers, what="the watcher to deliver an injected event", timeout=WAIT)


def test_event_records_name_the_gpu_and_the_instance_of_a_mig_device(
    watch: Callable[..., Watch],
) -> None:
    w = watch()
    wait_registered(w)
    gpu = w.inventory.gpus[1]
    mig = gpu.mig_devices[2]
    w.driver.xid(mig.uuid, 94)  # a MIG device's error arrives on its parent, with its ids
    w.driver.xid(gpu.uuid, 79)  # a GPU-wide one carries no instance
    w.driver.inject(f"sbe {gpu.uuid}")  # corrected: registered for, never reported
    w.driver.ecc(gpu.uuid)
    got = [(e.kind, e.uuid, e.xid, e.gi, e.ci) for e in w.until_marker()]
    assert got == [
        (EventKind.XID, gpu.uuid, 94, mig.gi, mig.ci),
        (EventKind.XID, gpu.uuid, 79, None, None),
        (EventKind.ECC, gpu.uuid, None, None, None),
    ]


def test_a_gpu_lost_when_watching_starts_is_reported_and_found_again_after_a_reset(
    watch: Callable[..., Watch],
) -> None:
    lost: list[str] = []

    def lose_gpu_3(driver: FakeDriver) -> None:
        lost.append(driver.inventory.gpus[3].uuid)
        driver.lost(lost[0])

    w = watch(before_start=lose_gpu_3)
    event, unmonitored = w.next(), w.next()
    assert (event.kind, event.uuid) == (EventKind.LOST, lost[0])
    assert "GPU is lost" in event.detail
    assert (unmonitored.kind, unmonitored.uuid) == (EventKind.UNMONITORED, lost[0])
    w.driver.reset(lost[0])
    while (event := w.next()).kind in (EventKind.LOST, EventKind.UNMONITORED):
        continue  # retries before the reset was seen
    assert (event.kind, event.uuid) == (EventKind.WATCHED, lost[0])
    event = w.next()
    assert (event.kind, event.uuid) == (EventKind.FOUND, lost[0])
    w.driver.xid(lost[0], 48)  # registered again: its events arrive
    assert [(e.kind, e.uuid, e.xid) for e in w.until_marker()] == [(EventKind.XID, lost[0], 48)]


def _on_gpu_2(change: Callable[[str], str]) -> Callable[[str], str]:
    def edit(text: str) -> str:
        gpus = text.split("\ngpu ")
        gpus[3] = change(gpus[3])  # [0] is the node's own lines
        return "\ngpu ".join(gpus)

    return edit


@pytest.mark.parametrize(
    ("change", "detail"),
    [
        pytest.param(lambda gpu: gpu.replace("events 0x1f", "events 0x4"),
                     "supports none of the XID and ECC events", id="only-pstate-events"),
        pytest.param(lambda gpu: gpu + "\nregistererror 3",
                     "nvmlDeviceRegisterEvents: Not Supported", id="register-not-supported"),
    ],
)  # fmt: skip
def test_a_gpu_without_event_support_is_unmonitored_and_left_unwatched(
    watch: Callable[..., Watch], change: Callable[[str], str], detail: str
) -> None:
    w = watch(edit_node=_on_gpu_2(change))
    old = w.inventory.gpus[2].uuid
    first = w.next()  # registration comes before the first wait
    assert (first.kind, first.uuid, first.detail) == (EventKind.UNMONITORED, old, detail)
    wait_registered(w)
    w.driver.xid(old, 79)  # never registered: the set does not hear of it
    assert w.until_marker() == []  # and it is not retried: no LOST, no second UNMONITORED


def test_a_failing_event_stream_is_one_degraded_event_then_rebuilt(
    watch: Callable[..., Watch],
) -> None:
    w = watch()
    wait_registered(w)
    w.driver.wait_error(UNKNOWN_ERROR, 5)
    degraded = w.next()
    assert degraded.kind is EventKind.DEGRADED
    assert degraded.detail == "waiting for events failed: Unknown Error"
    restored = w.next()
    assert restored.kind is EventKind.RESTORED
    gpu = w.inventory.gpus[5].uuid
    w.driver.xid(gpu, 79)  # the rebuilt set has every GPU registered again
    assert [(e.kind, e.uuid) for e in w.until_marker()] == [(EventKind.XID, gpu)]
