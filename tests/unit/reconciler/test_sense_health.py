"""The health hint's facts: what the kubelet sees moved, or only the health machine's view.

A DRA node also tells the kubelet `Unknown` and why (an unmonitored GPU, a
monitoring condition), which moves no device between Healthy and Unhealthy:
such a step is sensed as `health_seen`, so a pass sends the new list
(`plan_step`), and a step that moved nothing is sensed as nothing.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from devices.health import EventKind, HealthEvent
from devices.simulated import SimulatedLibrary
from reconciler.actuators.health import HealthMonitor
from reconciler.core.mailbox import Hint, Mailbox
from reconciler.core.sense import LoopParts, Senses
from states.health import HealthBook


def senses(health: HealthMonitor) -> Senses:
    async def never(*_: Any) -> Any:
        raise AssertionError("no probe is due")

    unused: Any = SimpleNamespace()
    parts = LoopParts(
        intake=SimpleNamespace(nvml=SimpleNamespace(call=never)),  # type: ignore[arg-type]
        lifecycle=unused,
        actuators=unused,
        retries=unused,
        mailbox=Mailbox(),
        probes=unused,
        health=health,
        dra=None,
        reason_pending=lambda: False,
    )
    return Senses(parts, lambda _: None)


def monitor() -> tuple[HealthMonitor, str]:
    library = SimulatedLibrary.from_argument("dgx-a100")
    library.init()
    inventory = library.inventory()
    health = HealthMonitor(notify=lambda: None)
    health.book = HealthBook(inventory)
    return health, inventory.gpus[0].uuid


async def test_an_unmonitored_mark_is_seen_though_no_device_changed_for_the_kubelet() -> None:
    health, gpu = monitor()
    health.status()  # the view as `/state` last took it
    health._queue.put(HealthEvent(EventKind.UNMONITORED, gpu, detail="Not Supported"))
    facts = (await senses(health).sense(Hint.HEALTH, None)).facts
    assert (facts.health_seen, facts.health_changed) == (True, False)
    view = health.status()
    assert view is not None
    assert view.devices[gpu].unmonitored == "Not Supported"


async def test_a_step_that_moved_nothing_is_not_seen() -> None:
    health, _ = monitor()
    facts = (await senses(health).sense(Hint.HEALTH, None)).facts
    assert (facts.health_seen, facts.health_changed) == (False, False)


async def test_an_xid_is_a_change_for_the_kubelet_and_seen() -> None:
    health, gpu = monitor()
    health._queue.put(HealthEvent(EventKind.XID, gpu, xid=79))
    facts = (await senses(health).sense(Hint.HEALTH, None)).facts
    assert (facts.health_seen, facts.health_changed) == (True, True)
