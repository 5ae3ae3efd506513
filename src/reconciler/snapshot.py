"""Immutable views of the running plugin, computed by the loop for the endpoint.

The endpoint serves the last snapshot as it is; building it here keeps every
read of live objects on the loop's own task.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

from reconciler.loop import HEARTBEAT_SECONDS, Reconciler
from states.names import State

STALE_HEARTBEAT_SECONDS = 6 * HEARTBEAT_SECONDS


def alive(heartbeat: float) -> bool:
    """The loop drains its mailbox at least every HEARTBEAT_SECONDS while it is healthy."""
    return time.monotonic() - heartbeat < STALE_HEARTBEAT_SECONDS


@dataclass(frozen=True)
class Snapshot:
    state: dict[str, object]
    ready: bool

    def state_json(self) -> bytes:
        return json.dumps(self.state, indent=2, sort_keys=False).encode() + b"\n"


def take(reconciler: Reconciler) -> Snapshot:
    lifecycle = reconciler.lifecycle
    fleet = reconciler.fleet
    resources = [] if fleet is None else list(fleet.status())
    plan = reconciler.plan
    health = reconciler.inputs.health
    config = reconciler.config
    state: dict[str, object] = {
        "state": str(lifecycle.state),
        "since": lifecycle.since,
        "reason": lifecycle.reason,
        "plan": None
        if plan is None
        else {
            "digest": plan.digest,
            "resources": plan.resource_names,
            "warnings": list(plan.warnings),
        },
        "config": None
        if config is None
        else {"digest": config.digest, "sources": dict(config.sources)},
        "resources": [
            {
                "name": status.name,
                "endpoint": status.endpoint,
                "running": status.running,
                "registered": status.registered,
                "error": status.last_error,
                "devices": [
                    {
                        "id": device.id,
                        "health": str(device.health),
                        "index": device.index,
                        **(health.reason(device) if health is not None else {}),
                    }
                    for device in status.devices
                ],
            }
            for status in resources
        ],
        "selection": reconciler.inputs.config.describe(),
        "health": None if health is None or health.book is None else health.book.to_json(),
        "history": [record.to_json() for record in lifecycle.history.snapshot()],
        "mailbox_depth": reconciler.mailbox.depth,
    }
    ready = lifecycle.state is State.SERVING and all(s.registered for s in resources)
    return Snapshot(state=state, ready=ready)
