"""End to end without a kubelet: events file -> source thread -> queue -> health book -> devices.

This is the path a running plugin takes with `--mock-nvml-events`, minus the
reconcile loop: the source thread posts into an `EventQueue`, whose notify
callback stands in for the mailbox; the test plays the loop, applying events
and ticking with its own `now`.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from devices.backends import open_health_source
from devices.health import EventKind, EventQueue, HealthEvent
from devices.model import Inventory
from devices.simulated import SimulatedLibrary
from devices.xids import xid_policy
from resources.model import Health, PluginDevice
from states.health import DeviceHealth, HealthBook, HealthPolicy, with_health

WAIT = 5.0


class Loop:
    """Plays the reconcile loop's part: wake on notify, drain, apply, tick."""

    def __init__(self, library: SimulatedLibrary, inventory: Inventory, path: Path) -> None:
        self.library = library
        self.path = path
        self.woken = threading.Event()
        self.queue = EventQueue(self.woken.set)
        self.book = HealthBook(inventory, HealthPolicy(quiet_period=30.0, probe_interval=5.0))
        self.source = open_health_source(
            library, inventory, events_file=str(path), policy=xid_policy()
        )
        self.now = 0.0

    def inject(self, line: dict[str, object], *, expect: int = 1) -> list[HealthEvent]:
        with self.path.open("a") as file:
            file.write(json.dumps(line) + "\n")
        taken: list[HealthEvent] = []
        while len(taken) < expect:
            assert self.woken.wait(WAIT), "the source posted nothing"
            self.woken.clear()
            taken.extend(self.queue.take())
        for event in taken:
            self.book.apply(event, self.now)
        return taken

    def advance(self, seconds: float) -> None:
        self.now += seconds
        self.book.tick(self.now, self.library.probe)


@pytest.fixture
def loop(tmp_path: Path) -> Iterator[Loop]:
    library = SimulatedLibrary.from_argument("a100-mig-mixed")
    library.init()
    path = tmp_path / "events.jsonl"
    path.touch()
    running = Loop(library, library.inventory(), path)
    running.source.start(running.queue.put)
    yield running
    assert running.source.stop(timeout=WAIT)
    library.shutdown()


def devices_of(inventory: Inventory) -> list[PluginDevice]:
    """Full GPUs (two replicas each) and MIG devices, as the `mixed` strategy advertises them."""
    advertised: list[PluginDevice] = []
    for gpu in inventory.gpus:
        for n in range(0 if gpu.mig_enabled else 2):
            advertised.append(
                PluginDevice(f"{gpu.uuid}::{n}", gpu.uuid, gpu.uuid, str(gpu.index), ())
            )
        for mig in gpu.mig_devices:
            advertised.append(
                PluginDevice(mig.uuid, mig.uuid, gpu.uuid, mig.index, (), gi=mig.gi, ci=mig.ci)
            )
    return advertised


def unhealthy(loop: Loop) -> set[str]:
    inventory = loop.library.inventory()
    return {
        d.id for d in with_health(devices_of(inventory), loop.book) if d.health is Health.UNHEALTHY
    }


def test_injected_sticky_error_stays_until_reset(loop: Loop) -> None:
    gpu = next(g for g in loop.library.inventory().gpus if not g.mig_devices)
    loop.inject({"uuid": gpu.uuid, "xid": 79})
    assert unhealthy(loop) == {f"{gpu.uuid}::0", f"{gpu.uuid}::1"}
    status = loop.book.status(gpu.uuid)
    assert status is not None
    assert (status.health, status.reason) == (DeviceHealth.UNHEALTHY, "xid 79")
    loop.advance(0)  # baseline probe
    loop.advance(300)
    assert unhealthy(loop) == {f"{gpu.uuid}::0", f"{gpu.uuid}::1"}
    loop.inject({"uuid": gpu.uuid, "reset": True})
    loop.advance(0)
    assert unhealthy(loop) == set()


def test_injected_instance_error_marks_one_mig_device_and_recovers(loop: Loop) -> None:
    gpu = next(g for g in loop.library.inventory().gpus if len(g.mig_devices) > 1)
    target = gpu.mig_devices[1]
    loop.inject({"uuid": gpu.uuid, "xid": 94, "gi": target.gi, "ci": target.ci})
    assert unhealthy(loop) == {target.uuid}
    loop.advance(29)
    assert unhealthy(loop) == {target.uuid}
    loop.advance(1)
    assert unhealthy(loop) == set()


def test_lost_gpu_takes_its_mig_devices_until_found(loop: Loop) -> None:
    gpu = next(g for g in loop.library.inventory().gpus if g.mig_devices)
    loop.inject({"uuid": gpu.uuid, "lost": True})
    assert unhealthy(loop) == {m.uuid for m in gpu.mig_devices}
    loop.advance(60)
    assert unhealthy(loop) == {m.uuid for m in gpu.mig_devices}
    taken = loop.inject({"uuid": gpu.uuid, "lost": False})
    assert [e.kind for e in taken] == [EventKind.FOUND]
    loop.advance(0)
    assert unhealthy(loop) == set()
    status = loop.book.status(gpu.mig_devices[0].uuid)
    assert status is not None
    assert [(t.source, t.dest, t.reason) for t in status.history] == [
        (DeviceHealth.HEALTHY, DeviceHealth.UNHEALTHY, "lost"),
        (DeviceHealth.UNHEALTHY, DeviceHealth.RECOVERING, "device answers again"),
        (DeviceHealth.RECOVERING, DeviceHealth.HEALTHY, "probe passed"),
    ]


def test_event_queue_is_bounded_and_counts_what_it_dropped() -> None:
    woken = threading.Event()
    events = EventQueue(woken.set, limit=3)
    for n in range(5):
        events.put(HealthEvent(EventKind.XID, "GPU-x", xid=n))
    assert woken.is_set()
    assert [e.xid for e in events.take()] == [2, 3, 4]
    assert events.dropped == 2
    assert events.take() == []
