"""Immutable views of what the kubelet simulator has seen, and their JSON form.

Tests wait on predicates over a `Snapshot` and the `kubelet-sim` CLI reads one back
from the JSON file a running simulator keeps up to date, so the same frozen types
serve both: nothing here refers to gRPC, and a snapshot can be held, compared and
asserted on after the simulator has moved on.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

SNAPSHOT_FORMAT = 1


class EventKind(StrEnum):
    """Everything the simulator logs, named as past-tense facts."""

    SERVING = "serving"
    REGISTERED = "registered"
    REJECTED = "rejected"
    STREAM_OPENED = "stream_opened"
    LIST_RECEIVED = "list_received"
    STREAM_CLOSED = "stream_closed"
    STREAM_ERROR = "stream_error"
    RESTARTED = "restarted"
    STOPPED = "stopped"
    # The DRA side (plugins_registry): `resource` holds the driver name, or the
    # registration socket's file name when no driver name could be learnt.
    DRA_REGISTERED = "dra_registered"
    DRA_REJECTED = "dra_rejected"
    DRA_DEREGISTERED = "dra_deregistered"
    # The DRA device-health stream (KEP-4680) of a registered driver: a complete
    # list received (`device_count`, `detail` counts the unhealthy and unknown), and
    # the stream's end (`detail` says why: ended, failed, or not served at all).
    DRA_HEALTH_RECEIVED = "dra_health_received"
    DRA_HEALTH_ENDED = "dra_health_ended"


@dataclass(frozen=True, slots=True)
class Event:
    """One entry of the event log.

    `seq` orders events totally; `at` is monotonic (for gaps and durations),
    `wall` is Unix time (for humans and the JSON file).
    """

    seq: int
    at: float
    wall: float
    kind: EventKind
    resource: str = ""
    detail: str = ""
    device_count: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "at": self.at,
            "wall": self.wall,
            "kind": self.kind.value,
            "resource": self.resource,
            "detail": self.detail,
            "device_count": self.device_count,
        }

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> Event:
        count = raw.get("device_count")
        return cls(
            seq=int(raw["seq"]),
            at=float(raw["at"]),
            wall=float(raw["wall"]),
            kind=EventKind(raw["kind"]),
            resource=str(raw.get("resource", "")),
            detail=str(raw.get("detail", "")),
            device_count=None if count is None else int(count),
        )


@dataclass(frozen=True, slots=True)
class DeviceInfo:
    """One device as last listed by the plugin; `numa_nodes` is empty when unset."""

    id: str
    health: str
    numa_nodes: tuple[int, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        # Mirrors the protobuf field names, so the file reads like the wire message.
        topology = {"nodes": [{"ID": n} for n in self.numa_nodes]} if self.numa_nodes else None
        return {"ID": self.id, "health": self.health, "topology": topology}

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> DeviceInfo:
        topology = raw.get("topology") or {}
        nodes = tuple(int(node["ID"]) for node in topology.get("nodes", ()))
        return cls(id=str(raw["ID"]), health=str(raw["health"]), numa_nodes=nodes)


@dataclass(frozen=True, slots=True)
class PluginOptions:
    """The DevicePluginOptions a plugin advertised (from GetDevicePluginOptions)."""

    pre_start_required: bool = False
    get_preferred_allocation_available: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "pre_start_required": self.pre_start_required,
            "get_preferred_allocation_available": self.get_preferred_allocation_available,
        }

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> PluginOptions:
        return cls(
            pre_start_required=bool(raw.get("pre_start_required", False)),
            get_preferred_allocation_available=bool(
                raw.get("get_preferred_allocation_available", False)
            ),
        )


@dataclass(frozen=True, slots=True)
class Counters:
    """Cumulative per-resource counts; they survive re-registration and restarts.

    They make "no re-registration and no gap" checkable: across a quiet period
    `registrations` and `streams_closed` stay put while `lists_received` may grow.
    """

    registrations: int = 0
    streams_opened: int = 0
    lists_received: int = 0
    streams_closed: int = 0
    stream_errors: int = 0

    def to_dict(self) -> dict[str, int]:
        return {
            "registrations": self.registrations,
            "streams_opened": self.streams_opened,
            "lists_received": self.lists_received,
            "streams_closed": self.streams_closed,
            "stream_errors": self.stream_errors,
        }

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> Counters:
        return cls(**{name: int(raw.get(name, 0)) for name in cls.__dataclass_fields__})


@dataclass(frozen=True, slots=True)
class ResourceView:
    """What the simulated device manager knows about one extended resource.

    `registered` is true while the resource has a registration accepted by the
    current kubelet incarnation (a restart clears it until the plugin registers
    again); `streaming` is true while its ListAndWatch stream is open.
    """

    name: str
    endpoint: str
    options: PluginOptions
    devices: tuple[DeviceInfo, ...]
    registered: bool
    streaming: bool
    counters: Counters

    def device(self, device_id: str) -> DeviceInfo | None:
        return next((d for d in self.devices if d.id == device_id), None)

    @property
    def healthy_ids(self) -> tuple[str, ...]:
        return tuple(d.id for d in self.devices if d.health == "Healthy")

    def to_dict(self) -> dict[str, Any]:
        return {
            "endpoint": self.endpoint,
            "registered": self.registered,
            "streaming": self.streaming,
            "options": self.options.to_dict(),
            "devices": [d.to_dict() for d in self.devices],
            "counters": self.counters.to_dict(),
        }

    @classmethod
    def from_dict(cls, name: str, raw: Mapping[str, Any]) -> ResourceView:
        return cls(
            name=name,
            endpoint=str(raw["endpoint"]),
            options=PluginOptions.from_dict(raw.get("options", {})),
            devices=tuple(DeviceInfo.from_dict(d) for d in raw.get("devices", ())),
            registered=bool(raw.get("registered", False)),
            streaming=bool(raw.get("streaming", False)),
            counters=Counters.from_dict(raw.get("counters", {})),
        )


@dataclass(frozen=True, slots=True)
class DraDeviceHealth:
    """One device of a DRA driver as its device-health stream last said it.

    `health` is `Healthy`, `Unhealthy` or `Unknown` (the words of the pod status);
    `last_updated` the Unix time the plugin said it determined it; `timeout` the
    `health_check_timeout_seconds` it gave (0: the kubelet's default).
    """

    pool: str
    device: str
    health: str
    message: str = ""
    last_updated: int = 0
    timeout: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "pool": self.pool,
            "device": self.device,
            "health": self.health,
            "message": self.message,
            "last_updated": self.last_updated,
            "timeout": self.timeout,
        }

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> DraDeviceHealth:
        return cls(
            pool=str(raw["pool"]),
            device=str(raw["device"]),
            health=str(raw["health"]),
            message=str(raw.get("message", "")),
            last_updated=int(raw.get("last_updated", 0)),
            timeout=int(raw.get("timeout", 0)),
        )


@dataclass(frozen=True, slots=True)
class DraDriverView:
    """What the simulated kubelet knows about one DRA driver's kubelet plugin.

    `endpoint` is the DRAPlugin socket the plugin named in GetInfo, `service` the
    version chosen from its `versions` (the first one the kubelet supports),
    `socket` the registration socket it came from. `registered` is true while that
    registration stands (its socket is there and the kubelet has not restarted
    since); `registrations` counts every accepted registration, re-dials included.

    The device-health stream: `health_service` is the DRAResourceHealth version
    being watched now ("" when none), `health` the devices of its latest list
    (emptied when the stream ends, as the kubelet forgets them), `health_lists`
    how many lists it sent, `health_note` why no stream is open ("" while one is,
    or before one was tried).
    """

    name: str
    endpoint: str
    versions: tuple[str, ...]
    service: str
    socket: str
    registered: bool
    registrations: int
    health_service: str = ""
    health: tuple[DraDeviceHealth, ...] = ()
    health_lists: int = 0
    health_note: str = ""

    def device_health(self, device: str, pool: str | None = None) -> DraDeviceHealth | None:
        """The latest health of `device` (of `pool`, if given), None if the stream has none."""
        return next(
            (d for d in self.health if d.device == device and (pool is None or d.pool == pool)),
            None,
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "endpoint": self.endpoint,
            "versions": list(self.versions),
            "service": self.service,
            "socket": self.socket,
            "registered": self.registered,
            "registrations": self.registrations,
            "health_service": self.health_service,
            "health": [d.to_dict() for d in self.health],
            "health_lists": self.health_lists,
            "health_note": self.health_note,
        }

    @classmethod
    def from_dict(cls, name: str, raw: Mapping[str, Any]) -> DraDriverView:
        return cls(
            name=name,
            endpoint=str(raw["endpoint"]),
            versions=tuple(str(v) for v in raw.get("versions", ())),
            service=str(raw.get("service", "")),
            socket=str(raw.get("socket", "")),
            registered=bool(raw.get("registered", False)),
            registrations=int(raw.get("registrations", 0)),
            health_service=str(raw.get("health_service", "")),
            health=tuple(DraDeviceHealth.from_dict(d) for d in raw.get("health", ())),
            health_lists=int(raw.get("health_lists", 0)),
            health_note=str(raw.get("health_note", "")),
        )


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Everything observable at one point; `version` grows by one per change."""

    directory: str
    serving: bool
    restarts: int
    version: int
    resources: tuple[ResourceView, ...] = ()
    events: tuple[Event, ...] = field(default=(), repr=False)
    #: The plugins_registry directory watched; "" when the DRA side is off.
    registry: str = ""
    dra_drivers: tuple[DraDriverView, ...] = ()

    def resource(self, name: str) -> ResourceView | None:
        return next((r for r in self.resources if r.name == name), None)

    def dra_driver(self, name: str) -> DraDriverView | None:
        return next((d for d in self.dra_drivers if d.name == name), None)

    def events_of(self, kind: EventKind, resource: str | None = None) -> tuple[Event, ...]:
        return tuple(
            e
            for e in self.events
            if e.kind is kind and (resource is None or e.resource == resource)
        )

    def to_dict(self, *, max_events: int | None = None) -> dict[str, Any]:
        events = self.events if max_events is None else self.events[-max_events:]
        return {
            "format": SNAPSHOT_FORMAT,
            "directory": self.directory,
            "serving": self.serving,
            "restarts": self.restarts,
            "version": self.version,
            "resources": {r.name: r.to_dict() for r in self.resources},
            "events": [e.to_dict() for e in events],
            "registry": self.registry,
            "dra_drivers": {d.name: d.to_dict() for d in self.dra_drivers},
        }

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> Snapshot:
        if raw.get("format") != SNAPSHOT_FORMAT:
            raise ValueError(f"unsupported snapshot format {raw.get('format')!r}")
        resources = raw.get("resources", {})
        drivers = raw.get("dra_drivers", {})
        return cls(
            directory=str(raw["directory"]),
            serving=bool(raw["serving"]),
            restarts=int(raw["restarts"]),
            version=int(raw["version"]),
            resources=tuple(ResourceView.from_dict(n, r) for n, r in sorted(resources.items())),
            events=tuple(Event.from_dict(e) for e in raw.get("events", ())),
            registry=str(raw.get("registry", "")),
            dra_drivers=tuple(DraDriverView.from_dict(n, d) for n, d in sorted(drivers.items())),
        )
