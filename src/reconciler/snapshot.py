"""Immutable views of the running plugin, computed by the loop for the endpoint.

The endpoint serves the last snapshot as it is; building it here keeps every
read of live objects on the loop's own task. Every field of `/state` is
described in the README's inspection endpoint section, and a test holds the
two together, so add a field there when adding one here.

Health has one spelling everywhere: ``Healthy`` / ``Unhealthy``, the kubelet's
words. The device health machine's own position (``healthy``, ``unhealthy``,
``recovering``) is shown as ``stage``, since a recovering device is still
Unhealthy to the kubelet.

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
from resources.model import PluginDevice
from settings import Readiness
from states.health import HealthBook
from states.history import now_rfc3339
from states.names import State

STALE_HEARTBEAT_SECONDS = 6 * HEARTBEAT_SECONDS


def alive(heartbeat: float) -> bool:
    """The loop drains its mailbox at least every HEARTBEAT_SECONDS while it is healthy."""
    return time.monotonic() - heartbeat < STALE_HEARTBEAT_SECONDS


def readiness_mode(flag: Readiness, fail_on_init_error: bool) -> Readiness:
    """`auto` resolved: a node that may block must not hold back a rolling update."""
    if flag is not Readiness.AUTO:
        return flag
    return Readiness.SERVING if fail_on_init_error else Readiness.RUNNING


@dataclass(frozen=True)
class Snapshot:
    state: dict[str, object]
    ready: bool

    def state_json(self) -> bytes:
        return json.dumps(self.state, indent=2, sort_keys=False).encode() + b"\n"


def _applied_at(reconciler: Reconciler, previous: Snapshot | None) -> str | None:
    """When the config in force was applied; kept from the previous snapshot while it lasts."""
    plan, config = reconciler.plan, reconciler.config
    if plan is None or config is None or plan.config.digest != config.digest:
        return None  # loaded, but nothing built from it is serving (yet)
    before = None if previous is None else previous.state.get("config")
    if isinstance(before, dict) and before.get("digest") == config.digest:
        kept = before.get("applied_at")
        if isinstance(kept, str):
            return kept
    return now_rfc3339()


def _health_section(book: HealthBook | None) -> dict[str, object] | None:
    if book is None:
        return None
    devices: dict[str, object] = {}
    for uuid, status in book.statuses().items():
        devices[uuid] = {
            "health": str(status.kubelet_health),
            "stage": str(status.health),
            "reason": status.reason,
            "since": status.since,
            "detail": status.detail,
            "errors": status.errors,
            "history": [t.to_json() for t in status.history],
        }
    return {"monitoring": book.monitoring.to_json(), "devices": devices}


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


def take(
    reconciler: Reconciler,
    previous: Snapshot | None = None,
    *,
    readiness: Readiness = Readiness.AUTO,
) -> Snapshot:
    lifecycle = reconciler.lifecycle
    fleet = reconciler.fleet
    resources = [] if fleet is None else list(fleet.status())
    plan = reconciler.plan
    health = reconciler.inputs.health
    config = reconciler.config
    history = lifecycle.history.snapshot()
    # Every replica of a GPU has its GPU's health: asked once per GPU, not
    # once per device (thousands of replicas, on the loop, after each hint).
    reasons: dict[tuple[str, str], dict[str, object]] = {}

    def reason_of(device: PluginDevice) -> dict[str, object]:
        if health is None:
            return {}
        key = (device.uuid, device.gpu_uuid)
        found = reasons.get(key)
        if found is None:
            found = reasons[key] = health.reason(device)
        return found

    mode = readiness_mode(readiness, reconciler.fail_on_init_error)
    serving = lifecycle.state is State.SERVING and all(s.registered for s in resources)
    if mode is Readiness.SERVING:
        ready = serving
    else:
        # Running: the first start-up attempt is over (whatever its outcome,
        # which /state and the metrics report) and the plugin has not stopped.
        ready = bool(history) and lifecycle.state is not State.STOPPED
    state: dict[str, object] = {
        "state": str(lifecycle.state),
        "since": lifecycle.since,
        "reason": lifecycle.reason,
        "ready": ready,
        "readiness": str(mode),
        "config": None
        if config is None
        else {
            "digest": config.digest,
            "applied_at": _applied_at(reconciler, previous),
            "path": config.config_path,
            "values": {
                key: value
                for key, value in config.to_json().items()
                if key not in ("digest", "config_path", "sources", "warnings")
            },
            "sources": dict(config.sources),
            "warnings": list(config.warnings),
        },
        "selection": reconciler.inputs.config.describe(),
        "plan": None
        if plan is None
        else {
            "digest": plan.digest,
            "resources": plan.resource_names,
            "warnings": list(plan.warnings),
        },
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
                        "uuid": device.uuid,
                        "index": device.index,
                        "health": str(device.health),
                        **reason_of(device),
                    }
                    for device in status.devices
                ],
            }
            for status in resources
        ],
        "health": _health_section(None if health is None else health.book),
        "history": [record.to_json() for record in history],
        "mailbox_depth": reconciler.mailbox.depth,
    }
    return Snapshot(state=state, ready=ready)
