"""An emulated API server that checks Events the way the real one does.

kmock's emulator stores whatever it is sent. A real API server validates an
`events.k8s.io/v1` Event on create (required fields, lengths, the namespace
rule for cluster-scoped subjects) and refuses to change its identifying
fields afterwards; a plugin that got any of that wrong would only find out in
a cluster. This emulator answers such requests with the same 422 Invalid, so
the tests prove the bodies are acceptable, not merely stored.

The checks follow the API's validation of Events as described in the spec on
node events; a Node's Event is accepted in `default` and, since it carries
an `eventTime`, `kube-system`.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import AsyncIterator
from typing import Any

import kmock

from tests.unit.kube.apiserver import ApiServer, NodeEmulator

EVENTS = "events.k8s.io/v1/events"
EVENTS_PATH = "/apis/events.k8s.io/v1/namespaces/{namespace}/events"
NODES = "/api/v1/nodes"
MICRO_TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}(Z|[+-]\d\d:\d\d)$")
REQUIRED = ("eventTime", "reportingController", "reportingInstance", "action", "reason", "type")
IMMUTABLE = (*REQUIRED[:-1], "regarding", "related")
CLUSTER_SCOPED_NAMESPACES = ("default", "kube-system")


def _invalid(message: str) -> kmock.KubernetesError:
    return kmock.KubernetesError(status=422, reason="Invalid", message=message)


def check_event(event: dict[str, Any], namespace: str | None) -> None:
    """Raise 422 for what the API server would reject in a new Event."""
    for field in REQUIRED:
        if not event.get(field):
            raise _invalid(f"Event.events.k8s.io is invalid: {field}: Required value")
    for field in ("eventTime",):
        if not MICRO_TIME.match(str(event[field])):
            raise _invalid(f"Event.events.k8s.io is invalid: {field}: not a MicroTime")
    if event["type"] not in ("Normal", "Warning"):
        raise _invalid("Event.events.k8s.io is invalid: type: Unsupported value")
    for field in ("reportingInstance", "action", "reason"):
        if len(str(event[field])) > 128:
            raise _invalid(f"Event.events.k8s.io is invalid: {field}: Too long")
    if len(str(event.get("note", "")).encode()) > 1024:
        raise _invalid("Event.events.k8s.io is invalid: note: Too long")
    regarding = event.get("regarding") or {}
    event_namespace = (event.get("metadata") or {}).get("namespace") or namespace
    wanted = regarding.get("namespace")
    if wanted is None and event_namespace not in CLUSTER_SCOPED_NAMESPACES:
        raise _invalid(
            "Event.events.k8s.io is invalid: involvedObject.namespace: Invalid value: "
            f'"": does not match event.namespace {event_namespace}'
        )
    if wanted is not None and wanted != event_namespace:
        raise _invalid("Event.events.k8s.io is invalid: does not match event.namespace")
    check_series(event.get("series"))


def check_series(series: Any) -> None:
    if series is None:
        return
    if not isinstance(series.get("count"), int) or series["count"] < 2:
        raise _invalid("Event.events.k8s.io is invalid: series.count: must be at least 2")
    if not MICRO_TIME.match(str(series.get("lastObservedTime", ""))):
        raise _invalid("Event.events.k8s.io is invalid: series.lastObservedTime: Required value")


class EventsEmulator(NodeEmulator):
    """The node emulator, plus the API server's validation of Events."""

    async def _handle(self, request: Any) -> Any:
        resource = request.resource
        if (
            resource is not None
            and resource.group == "events.k8s.io"
            and isinstance(request.data, dict)
        ):
            if request.action == kmock.action.CREATE:
                check_event(request.data, request.namespace)
            elif request.action == kmock.action.UPDATE:
                self._check_update(request)
        return await super()._handle(request)

    def _check_update(self, request: Any) -> None:
        key = (request.resource, request.namespace, request.name)
        if key not in self.objects or self.objects[key].deleted:
            return  # the emulator answers 404
        current = self.objects[key].raw
        for field in IMMUTABLE:
            if field in request.data and request.data[field] != current.get(field):
                raise _invalid(f"Event.events.k8s.io is invalid: {field}: field is immutable")
        check_series(request.data.get("series"))


class EventsApi(ApiServer):
    """An API server with nodes and Events, and helpers to read what was posted."""

    handler: EventsEmulator

    async def add_node_with_uid(self, name: str, uid: str) -> None:
        body = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "uid": uid}}
        response = await self.handler.post(NODES, json=body)
        assert response.status == 200, await response.text()

    def events(self, namespace: str = "default") -> list[dict[str, Any]]:
        """Every Event stored in `namespace`, oldest first."""
        found = [
            obj.raw
            for (resource, ns, _), obj in self.handler.objects.items()
            if resource == kmock.resource(EVENTS) and ns == namespace and not obj.deleted
        ]
        return sorted(found, key=lambda event: event["metadata"]["name"])

    def writes(self) -> list[Any]:
        """Every create and update of an Event, in order."""
        return [
            request
            for request in self.handler[kmock.resource(EVENTS)]
            if request.action in (kmock.action.CREATE, kmock.action.UPDATE)
        ]

    def delete_event(self, name: str, namespace: str = "default") -> None:
        """What the API server's event TTL does."""
        self.handler.objects[EVENTS, namespace, name].delete()


@contextlib.asynccontextmanager
async def running_events_api() -> AsyncIterator[EventsApi]:
    async with EventsEmulator() as handler:
        handler.resources["v1/nodes"] = kmock.ResourceInfo(namespaced=False, kind="Node")
        handler.resources[EVENTS] = kmock.ResourceInfo(namespaced=True, kind="Event")
        server = EventsApi(handler)
        await server.up()
        try:
            yield server
        finally:
            await server.down()
