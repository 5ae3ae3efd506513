"""Immutable views of the running plugin, computed by the loop for the endpoint.

The endpoint serves the last snapshot as it is; building it here keeps every
read of live objects on the loop's own task.

The `/state` body of a node with thousands of devices is a megabyte of JSON
and takes tens of milliseconds to render, so `StateBody` renders it once per
change, in a worker thread, and every request until the next change gets the
same bytes: a version number moves only when a new snapshot differs from the
last one, and concurrent requests for a version share one rendering.
"""

from __future__ import annotations

import asyncio
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


class StateBody:
    """The rendered `/state` of the latest snapshot, cached per version."""

    def __init__(self) -> None:
        self.version = 0
        self.renders = 0  # how many times a body was rendered (for tests and benchmarks)
        self._snapshot: Snapshot | None = None
        self._rendering: tuple[int, asyncio.Future[bytes]] | None = None

    def update(self, snapshot: Snapshot) -> None:
        """Take a new snapshot; the version moves only if its state differs."""
        if self._snapshot is not None and snapshot.state == self._snapshot.state:
            return
        self._snapshot = snapshot
        self.version += 1

    async def body(self) -> bytes:
        """The JSON body of the current version, rendered at most once."""
        if self._snapshot is None:
            raise LookupError("no snapshot yet")
        rendering = self._rendering
        if rendering is None or rendering[0] != self.version:
            snapshot = self._snapshot
            future = asyncio.ensure_future(asyncio.to_thread(self._render, snapshot))
            rendering = self._rendering = (self.version, future)
        # Shielded: one impatient client going away must not cancel the
        # rendering that the others are waiting for.
        return await asyncio.shield(rendering[1])

    def _render(self, snapshot: Snapshot) -> bytes:
        self.renders += 1
        return snapshot.state_json()


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
