"""Health through the NVML event API: the real watcher thread on the fake `libnvidia-ml.so.1`.

The same story of hardware faults is told to both backends, each in its own
language: to the simulated one as lines of its events file, to the fake NVML
as control lines (an XID delivered through an event set, a GPU fallen off the
bus, rows waiting to be remapped, a reset). Each backend's events drive its
own `HealthBook` on the same clock, with re-probes through its own library,
and after every step the two books must agree on every device: its health,
its reason and the transitions that led there.

Steps end with a marker XID (1000 and up), which both sources pass on and
the test keeps from the books: once it arrives, everything the step caused
has.
"""

from __future__ import annotations

import json
import queue
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from itertools import count
from pathlib import Path
from typing import Any

import pytest

from devices.health import EventKind, HealthEvent, ThreadedSource
from devices.health_nvml import NvmlHealthSource
from devices.library import DeviceLibrary
from devices.model import Inventory
from devices.nvml import NvmlLibrary
from devices.simulated import SimulatedLibrary
from devices.simulated_events import SimulatedEventSource
from devices.xids import xid_policy
from states.health import DeviceHealth, HealthBook, HealthPolicy
from tests.waiting import eventually_sync

from .fake_nvml_driver import FakeDriver

Install = Callable[[str], FakeDriver]
# ("xid", uuid, xid[, gi, ci]) or ("ecc" | "lost" | "reset" | "pending", uuid)
Action = tuple[Any, ...]
WAIT = 5.0
QUIET = 5.0
MARK = 1000
POLICY = HealthPolicy(quiet_period=QUIET, probe_interval=1.0)


def nvml_lines(action: Action) -> list[str]:
    return [" ".join(str(part) for part in action)]


def simulated_lines(action: Action) -> list[str]:
    kind, uuid, *rest = action
    if kind == "xid":
        xid, *instance = rest
        line: dict[str, object] = {"uuid": uuid, "xid": xid}
        if instance:
            line.update(gi=instance[0], ci=instance[1])
        return [json.dumps(line)]
    if kind == "pending":
        return []  # the simulated backend has no memory repairs: its probe never fails on them
    if kind == "reset":
        # A reset brings a GPU that fell off the bus back; the simulated backend is told
        # both facts, as it keeps "lost" until told otherwise.
        return [
            json.dumps({"uuid": uuid, "lost": False}),
            json.dumps({"uuid": uuid, "reset": True}),
        ]
    return [json.dumps({"uuid": uuid, kind: True})]


@dataclass
class Watched:
    """One backend: its library, its running health source and its book."""

    library: DeviceLibrary
    source: ThreadedSource
    control: Path
    translate: Callable[[Action], list[str]]
    book: HealthBook
    marker_uuid: str
    events: queue.Queue[HealthEvent] = field(default_factory=queue.Queue)
    markers: Iterator[int] = field(default_factory=lambda: count(1))

    def _tell(self, actions: list[Action]) -> int:
        mark = MARK + next(self.markers)
        lines = [line for action in actions for line in self.translate(action)]
        lines += self.translate(("xid", self.marker_uuid, mark))
        with self.control.open("a") as control:
            control.write("".join(f"{line}\n" for line in lines))
        return mark

    def _until(self, mark: int, timeout: float = WAIT) -> list[HealthEvent]:
        got: list[HealthEvent] = []
        while True:
            event = self.events.get(timeout=timeout)
            if event.kind is EventKind.XID and event.xid == mark:
                return got
            # Markers of earlier attempts never reach the book.
            if not (event.kind is EventKind.XID and event.xid is not None and event.xid > MARK):
                got.append(event)

    def start(self) -> None:
        """Start the source, and return once it demonstrably delivers what is injected."""
        self.source.start(self.events.put)

        def delivers() -> bool:
            try:
                self._until(self._tell([]), timeout=0.1)
            except queue.Empty:
                return False
            return True

        eventually_sync(
            delivers, what=f"{self.source.name} to deliver an injected event", timeout=WAIT
        )

    def step(self, actions: list[Action], now: float) -> list[HealthEvent]:
        events = self._until(self._tell(actions))
        for event in events:
            self.book.apply(event, now)
        return events

    def tick(self, now: float) -> None:
        self.book.tick(now, self.library.probe)

    def view(self) -> dict[str, tuple[str, str | None, tuple[tuple[str, str, str], ...]]]:
        return {
            uuid: (
                str(status.health),
                status.reason,
                tuple((str(t.source), str(t.dest), t.reason) for t in status.history),
            )
            for uuid, status in self.book.statuses().items()
        }


@pytest.fixture
def both(fake_driver: Install, tmp_path: Path) -> Iterator[tuple[Watched, Watched]]:
    """The a100-mig-mixed node behind the fake NVML and behind the simulated backend."""
    driver = fake_driver("a100-mig-mixed")
    nvml = NvmlLibrary(
        driver_root=str(driver.root), sysfs_root=driver.sysfs, mig_minors_path=driver.mig_minors
    )
    nvml.init()
    inventory = nvml.inventory()
    simulated = SimulatedLibrary.from_argument("a100-mig-mixed")
    simulated.init()
    assert simulated.inventory().gpus[0].mig_devices == inventory.gpus[0].mig_devices
    events = tmp_path / "events.jsonl"
    events.touch()
    marker = inventory.gpus[5].uuid
    watched = (
        Watched(
            nvml,
            NvmlHealthSource(nvml, inventory, policy=xid_policy(), wait_ms=50),
            driver.control,
            nvml_lines,
            HealthBook(inventory, POLICY),
            marker,
        ),
        Watched(
            simulated,
            SimulatedEventSource(
                events, faults=simulated.faults, inventory=inventory, policy=xid_policy(),
                poll_seconds=0.01,
            ),
            events,
            simulated_lines,
            HealthBook(inventory, POLICY),
            marker,
        ),
    )  # fmt: skip
    try:
        for one in watched:
            one.start()
        yield watched
    finally:
        for one in watched:
            assert one.source.stop(timeout=WAIT)
        nvml.shutdown()


def unhealthy(watched: Watched) -> set[str]:
    return {u for u, s in watched.book.statuses().items() if s.health is not DeviceHealth.HEALTHY}


def test_faults_move_the_same_devices_the_same_way_on_both_backends(
    both: tuple[Watched, Watched],
) -> None:
    nvml, simulated = both
    inventory: Inventory = nvml.library.inventory()
    gpu = [g.uuid for g in inventory.gpus]
    gpu0_gi7 = next(m.uuid for m in inventory.gpus[0].mig_devices if m.gi == 7)
    gpu1_mig = inventory.gpus[1].mig_devices[1]
    gpu4_all = {gpu[4], *(m.uuid for m in inventory.gpus[4].mig_devices)}

    story: list[Action] = [
        ("xid", gpu[5], 79),  # fell off the bus ...
        ("lost", gpu[5]),  # ... and NVML cannot reach it
        ("xid", gpu[6], 13),  # an application's own error: ignored at the source
        ("ecc", gpu[6]),  # double-bit ECC ...
        ("pending", gpu[6]),  # ... with rows waiting to be remapped
        ("xid", gpu[0], 94, 7, 0),  # contained ECC error in GPU instance 7 only
        ("xid", gpu[1], 94, gpu1_mig.gi, gpu1_mig.ci),  # ... and in another GPU's instance
        ("xid", gpu[4], 74),  # NVLink error on a whole MIG-enabled GPU
    ]
    for watched in both:
        watched.step(story, now=0.0)
        watched.tick(0.0)
    assert nvml.view() == simulated.view()
    down = unhealthy(nvml)
    assert {gpu[5], gpu[6], gpu0_gi7, gpu1_mig.uuid} | gpu4_all <= down
    assert not down & {m.uuid for m in inventory.gpus[0].mig_devices if m.gi != 7}
    assert inventory.gpus[1].mig_devices[0].uuid not in down
    assert nvml.book.status(gpu[6]).reason == "double-bit ECC error"  # type: ignore[union-attr]

    # The quiet period passes: the contained errors recover, the sticky ones wait for a reset.
    for watched in both:
        watched.tick(QUIET + 0.5)
    assert nvml.view() == simulated.view()
    assert not {gpu0_gi7, gpu1_mig.uuid} & unhealthy(nvml)
    assert {gpu[5], gpu[6]} | gpu4_all <= unhealthy(nvml)

    # GPUs 5 and 6 are reset; GPU 4's NVLink error left no trace a probe could see clear.
    for watched in both:
        watched.step([("reset", gpu[5]), ("reset", gpu[6])], now=QUIET + 1.0)
        watched.tick(QUIET + 2.0)
    assert nvml.view() == simulated.view()
    assert unhealthy(nvml) == gpu4_all
    history = nvml.view()[gpu[5]][2]
    assert history == (
        ("healthy", "unhealthy", "xid 79"),
        ("unhealthy", "recovering", "reset detected"),
        ("recovering", "healthy", "probe passed"),
    )
