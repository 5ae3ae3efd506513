"""`/state` and readiness, composed from the frozen status of each part.

The endpoint serves the last snapshot as it is; the loop takes one after
every hint, from `Reconciler.status()` (a `LoopStatus` of frozen parts), so
building it never reads a live object. Every field of `/state` is described
in docs/inspection.md, and a test holds the two
together, so add a field there when adding one here.

Health has one spelling everywhere: ``Healthy`` / ``Unhealthy``, the kubelet's
words. The device health machine's own position (``healthy``, ``unhealthy``,
``recovering``) is shown as ``stage``, since a recovering device is still
Unhealthy to the kubelet.

A node with thousands of devices has thousands of per-device entries: the
resources and health sections are built again only when the part they come
from is a new object, so a hint that changes neither reuses them as they
are. The body itself is a megabyte of JSON and takes tens of milliseconds to
render, so `StateBody` renders it once per change, in a worker thread, and
every request until the next change gets the same bytes: a version number
moves only when a new snapshot differs from the last one, and concurrent
requests for a version share one rendering.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from reconciler.actuators.fleet import ResourceStatus
from reconciler.core.loop import HEARTBEAT_SECONDS
from reconciler.core.status import LoopStatus
from settings import Readiness
from states.health_status import HealthView
from states.history import now_rfc3339
from states.names import State

Section = Callable[[LoopStatus, "Snapshot | None"], object]
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
    # The parts each section was built from, to reuse a section while they last.
    built_from: Mapping[str, tuple[object, ...]] = field(default_factory=dict)

    def state_json(self) -> bytes:
        return json.dumps(self.state, indent=2, sort_keys=False).encode() + b"\n"


def _applied_at(status: LoopStatus, previous: Snapshot | None) -> str | None:
    """When the config in force was applied; kept from the previous snapshot while it lasts."""
    if status.desired is None:
        return None
    digest = status.desired.config.digest
    before = None if previous is None else previous.state.get("config")
    if isinstance(before, dict) and before.get("digest") == digest:
        kept = before.get("applied_at")
        if isinstance(kept, str):
            return kept
    return now_rfc3339()


def _resources(
    resources: tuple[ResourceStatus, ...], health: HealthView | None
) -> list[dict[str, object]]:
    # Every replica of a GPU has its GPU's health: looked up once per GPU.
    reasons: dict[tuple[str, str], dict[str, object]] = {}

    def reason_of(uuid: str, gpu_uuid: str) -> dict[str, object]:
        if health is None:
            return {}
        found = reasons.get((uuid, gpu_uuid))
        if found is None:
            reason, since = health.reason_of(uuid, gpu_uuid)
            found = reasons[(uuid, gpu_uuid)] = {
                "reason": reason,
                "since": since,
                "unmonitored": health.unmonitored_of(uuid),
            }
        return found

    return [
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
                    **reason_of(device.uuid, device.gpu_uuid),
                }
                for device in status.devices
            ],
        }
        for status in resources
    ]


class StateBody:
    """The rendered `/state` of the latest snapshot, cached per version.

    Two threads use it, and each writes its own fields only: the loop's
    `update` replaces `_latest` (a version and its snapshot, one value), and
    the endpoint's `body` keeps the rendering and counts it.
    """

    def __init__(self) -> None:
        self._latest: tuple[int, Snapshot | None] = (0, None)  # written by `update` only
        self.renders = 0  # bodies rendered (for tests and benchmarks); written by `body` only
        self._rendering: tuple[int, asyncio.Future[bytes]] | None = None  # `body` only

    @property
    def version(self) -> int:
        return self._latest[0]

    def update(self, snapshot: Snapshot) -> None:
        """Take a new snapshot; the version moves only if its state differs."""
        version, current = self._latest
        if current is not None and snapshot.state == current.state:
            return
        self._latest = (version + 1, snapshot)

    async def body(self) -> bytes:
        """The JSON body of the current version, rendered at most once."""
        version, snapshot = self._latest
        if snapshot is None:
            raise LookupError("no snapshot yet")
        rendering = self._rendering
        if rendering is None or rendering[0] != version:
            self.renders += 1
            future = asyncio.ensure_future(asyncio.to_thread(snapshot.state_json))
            rendering = self._rendering = (version, future)
        # Shielded: one impatient client going away must not cancel the
        # rendering that the others are waiting for.
        return await asyncio.shield(rendering[1])


def _config(status: LoopStatus, previous: Snapshot | None) -> dict[str, object] | None:
    if status.desired is None:
        return None
    config = status.desired.config
    return {
        "digest": config.digest,
        "applied_at": _applied_at(status, previous),
        "path": config.config_path,
        "values": {
            key: value
            for key, value in config.to_json().items()
            if key not in ("digest", "config_path", "sources", "warnings")
        },
        "sources": dict(config.sources),
        "warnings": list(config.warnings),
    }


def _plan(status: LoopStatus, previous: Snapshot | None) -> dict[str, object] | None:
    desired = status.desired
    if desired is None:
        return None
    return {
        "digest": desired.digest,
        "resources": desired.resource_names,
        "warnings": list(desired.warnings),
        # GPUs --include-devices/--exclude-devices leave out: not served, watched or labelled
        "excluded_gpus": [
            {"index": gpu.index, "uuid": gpu.uuid, "pci_bus_id": gpu.pci_bus_id}
            for gpu in (desired.selection.left_out if desired.selection else ())
        ],
    }


def _health(status: LoopStatus, previous: Snapshot | None) -> dict[str, object] | None:
    return None if status.health is None else status.health.to_json()


def _resources_section(status: LoopStatus, previous: Snapshot | None) -> object:
    return _resources(status.resources, status.health)


# Each section of `/state` built from part(s) of the status: rebuilt only when
# one of them is a new object (the parts are frozen and replaced on change).
_SECTIONS: dict[str, tuple[Callable[[LoopStatus], tuple[object, ...]], Section]] = {
    "config": (lambda status: (status.desired,), _config),
    "plan": (lambda status: (status.desired,), _plan),
    "resources": (lambda status: (status.resources, status.health), _resources_section),
    "health": (lambda status: (status.health,), _health),
}


def take(
    status: LoopStatus,
    previous: Snapshot | None = None,
    *,
    readiness: Readiness = Readiness.AUTO,
) -> Snapshot:
    mode = readiness_mode(readiness, status.fail_on_init_error)
    dra = status.dra
    serving = (
        status.state is State.SERVING
        and all(r.registered for r in status.resources)
        # In DRA mode the kubelet has to have registered the driver, as it does a
        # resource, and the node's slices have to be in the API.
        and (
            dra is None
            or not dra.serving
            or (dra.kubelet_registered is True and dra.slices is not None and dra.slices.converged)
        )
    )
    if mode is Readiness.SERVING:
        ready = serving
    else:
        # Running: the first start-up attempt is over (whatever its outcome,
        # which /state and the metrics report) and the plugin has not stopped.
        ready = bool(status.history) and status.state is not State.STOPPED
    built_from: dict[str, tuple[object, ...]] = {}
    sections: dict[str, object] = {}
    for name, (sources, build) in _SECTIONS.items():
        parts = built_from[name] = sources(status)
        before = None if previous is None else previous.built_from.get(name)
        if previous is not None and before is not None and _same(before, parts):
            sections[name] = previous.state[name]
        else:
            sections[name] = build(status, previous)
    state: dict[str, object] = {
        "state": str(status.state),
        "since": status.since,
        "reason": status.reason,
        "ready": ready,
        "readiness": str(mode),
        "config": sections["config"],
        "selection": status.choice.to_json(),
        "plan": sections["plan"],
        "resources": sections["resources"],
        "health": sections["health"],
        "dra": None if status.dra is None else status.dra.to_json(status.health),
        "history": [record.to_json() for record in status.history],
        "mailbox_depth": status.mailbox_depth,
        "runnables": [runnable.to_json() for runnable in status.runnables],
    }
    return Snapshot(state=state, ready=ready, built_from=built_from)


def _same(before: tuple[object, ...], now: tuple[object, ...]) -> bool:
    return len(before) == len(now) and all(a is b for a, b in zip(before, now, strict=True))
