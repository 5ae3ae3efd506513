"""A real HTTP Kubernetes API (kmock's emulator) for the official client to talk to.

kmock's emulator keeps objects in memory and streams watch events. What the
code under test relies on from a real API server is added here, so the tests
exercise that behaviour rather than kmock's simplifications:

- **resourceVersion**: every write stamps the object with the next revision,
  lists report the current one, and an update (PUT, or a patch naming a
  version) of a stale version is 409 Conflict. Creates get a `uid`.
- **Watches resume**: a watch from a resourceVersion streams only the events
  after it (from an event log); one older than the last `compact()` gets a
  410 Gone event, as after etcd compaction, and so does a watch open when
  it happens; a list afterwards reports a version to watch from. Without a
  version the watch starts with the current objects as ADDED.
- `timeoutSeconds` is honoured (the stream ends normally, with a BOOKMARK
  first when bookmarks were asked for), scaled by `time_scale` so the
  benchmark can run an hour of watches in seconds. A test ends the open
  watches this way whenever it chooses with `end_watches()`, rather than
  racing a short timeout.
- Field selectors filter lists and watches: `metadata.name` (and
  `metadata.namespace`) everywhere, `spec.nodeName` and `spec.driver` on
  ResourceSlices, `=` and `!=`; any other field is 400 Bad Request, as from a
  real server. An object modified into a watch's selection arrives ADDED,
  one modified out of it DELETED.
- DRA's `resource.k8s.io/v1` kinds: ResourceSlices (cluster-scoped) and
  ResourceClaims (namespaced, with a `status` subresource: creating or
  updating a claim never changes its status, only a PUT to `.../status`
  does). `ApiServer.create_claim` leaves a claim allocated to given devices,
  as the scheduler would.
- PUT replaces an object (kmock only knows PATCH).
- `GET /version` answers `handler.server_version` (default `v1.35.0`; None:
  404), and a ResourceSlice that breaks that release's count rules
  (`tests.unit.kube.slice_rules`: devices, counter sets, counters, devices
  and counter sets in one slice from 1.35; `handler.slice_rules` names
  another release) is refused with 422 Invalid.
- The server can be taken down and brought back on the same port, so
  "connection refused" and recovery are real socket behaviour.

The handler is `tests.unit.kube.emulator.NodeEmulator`; this module runs it on a
port. Faults (410 Gone, 500s, a server that never answers) are scripted as
kmock reactions in front of the emulator's behaviour, or with `fail()`, which
refuses the next requests of a verb before anything is stored. The code under
test runs in its own thread with the blocking client; the tests await its
callbacks through thread-safe queues, never by sleeping. `api_requests` and
the emulator's `tally` count what the code under test sent (by its
User-Agent), leaving out the tests' own requests.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import time
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any

import aiohttp.test_utils
import aiohttp.web_runner
import kmock
import pytest
from kmock._internal.rendering import Response

from kube.client import ApiAccess
from kube.resource_claims import AllocatedDevice, OpaqueConfig, allocation_status, claim_object
from tests.unit.kube.emulator import (
    AGENT,
    Fault,
    NodeEmulator,
    api_requests,
    request_counts,
    status,
)

__all__ = [
    "AGENT",
    "ApiServer",
    "Fault",
    "NodeEmulator",
    "Outage",
    "Recorder",
    "Script",
    "api_requests",
    "error_response",
    "kubeconfig",
    "request_counts",
    "running_apiserver",
    "status",
]

NODES = "/api/v1/nodes"
NODE_FEATURES = "nfd.k8s-sigs.io/v1alpha1/nodefeatures"
RESOURCE_SLICES = "/apis/resource.k8s.io/v1/resourceslices"
RESOURCE_SLICES_KIND = "resource.k8s.io/v1/resourceslices"


def resource_claims(namespace: str) -> str:
    return f"/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims"


class AbruptServer(aiohttp.test_utils.RawTestServer):
    """Going down drops open connections at once, as a crashed API server would.

    aiohttp otherwise waits up to a minute for in-flight watch streams to finish.
    """

    async def _make_runner(
        self, debug: bool = True, **kwargs: Any
    ) -> aiohttp.web_runner.ServerRunner:
        runner = await super()._make_runner(debug=debug, **kwargs)
        runner._shutdown_timeout = 0.05
        return runner


class ApiServer:
    """One emulated API server that can go down and come back on its port."""

    def __init__(self, handler: NodeEmulator) -> None:
        self.handler = handler
        self.port: int | None = None
        self._server: kmock.Server | None = None

    @property
    def url(self) -> str:
        assert self.port is not None
        return f"http://127.0.0.1:{self.port}"

    def access(self, agent: str = AGENT) -> ApiAccess:
        return ApiAccess.for_host(self.url, user_agent=agent)

    async def up(self) -> None:
        server = kmock.Server(self.handler, port=self.port, server_cls=AbruptServer)
        await server.__aenter__()
        self._server = server
        self.port = server.port

    async def down(self) -> None:
        if self._server is not None:
            server, self._server = self._server, None
            await server.__aexit__(None, None, None)

    async def add_node(
        self,
        name: str,
        labels: dict[str, str] | None = None,
        *,
        annotations: dict[str, str] | None = None,
    ) -> None:
        metadata: dict[str, Any] = {"name": name}
        if labels is not None:
            metadata["labels"] = labels
        if annotations is not None:
            metadata["annotations"] = annotations
        body = {"apiVersion": "v1", "kind": "Node", "metadata": metadata}
        response = await self.handler.post(NODES, json=body)
        assert response.status == 200, await response.text()

    async def set_annotations(self, name: str, annotations: dict[str, str | None]) -> None:
        """As `kubectl annotate node`: a value sets the key, None removes it."""
        response = await self.handler.patch(
            f"{NODES}/{name}", json={"metadata": {"annotations": annotations}}
        )
        assert response.status == 200, await response.text()

    async def set_labels(self, name: str, labels: dict[str, str | None]) -> None:
        response = await self.handler.patch(
            f"{NODES}/{name}", json={"metadata": {"labels": labels}}
        )
        assert response.status == 200, await response.text()

    async def delete_node(self, name: str) -> None:
        response = await self.handler.delete(f"{NODES}/{name}")
        assert response.status == 200, await response.text()

    async def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        response = await self.handler.post(path, json=body)
        assert response.status == 200, await response.text()
        return dict(await response.json())

    async def get(self, path: str) -> tuple[int, dict[str, Any]]:
        response = await self.handler.get(path)
        return response.status, dict(await response.json())

    async def create_claim(
        self,
        namespace: str,
        name: str,
        results: Sequence[AllocatedDevice],
        *,
        config: Sequence[OpaqueConfig] = (),
        device_class: str = "gpu.nvidia.com",
    ) -> dict[str, Any]:
        """A ResourceClaim allocated to `results`: created, then its status written."""
        body = claim_object(namespace, name, results, device_class=device_class, config=config)
        created = await self.create(resource_claims(namespace), body)
        created["status"] = allocation_status(results, config)
        response = await self.handler.put(
            f"{resource_claims(namespace)}/{name}/status", json=created
        )
        assert response.status == 200, await response.text()
        return dict(await response.json())

    async def slices(self) -> dict[str, dict[str, Any]]:
        """Every ResourceSlice the server holds, by name."""
        status, listed = await self.get(RESOURCE_SLICES)
        assert status == 200, listed
        return {item["metadata"]["name"]: item for item in listed["items"]}

    def stored_slices(self) -> list[dict[str, Any]]:
        """The ResourceSlices held now, read in process: no request, nothing counted."""
        resource = kmock.resource(RESOURCE_SLICES_KIND)
        return [
            obj.raw
            for (kind, _, _), obj in self.handler.objects.items()
            if kind == resource and not obj.deleted
        ]

    async def replace(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """A PUT, as another writer's update (body with the resourceVersion it read)."""
        response = await self.handler.put(path, json=body)
        assert response.status == 200, await response.text()
        return dict(await response.json())

    async def delete(self, path: str) -> None:
        response = await self.handler.delete(path)
        assert response.status == 200, await response.text()

    async def labels(self, name: str) -> dict[str, str]:
        response = await self.handler.get(f"{NODES}/{name}")
        assert response.status == 200, await response.text()
        data = await response.json()
        return dict(data["metadata"].get("labels") or {})


@contextlib.asynccontextmanager
async def running_apiserver() -> AsyncIterator[ApiServer]:
    """An emulated API server with nodes declared, up on a local port for the block."""
    async with NodeEmulator() as handler:
        # Declared up front so listing works before the first node exists.
        handler.resources["v1/nodes"] = kmock.ResourceInfo(namespaced=False, kind="Node")
        handler.resources["v1/pods"] = kmock.ResourceInfo(namespaced=True, kind="Pod")
        handler.resources["apps/v1/daemonsets"] = kmock.ResourceInfo(
            namespaced=True, kind="DaemonSet"
        )
        handler.resources[NODE_FEATURES] = kmock.ResourceInfo(namespaced=True, kind="NodeFeature")
        handler.resources[RESOURCE_SLICES_KIND] = kmock.ResourceInfo(
            namespaced=False, kind="ResourceSlice"
        )
        handler.resources["resource.k8s.io/v1/resourceclaims"] = kmock.ResourceInfo(
            namespaced=True, kind="ResourceClaim"
        )
        server = ApiServer(handler)
        await server.up()
        try:
            yield server
        finally:
            await server.down()


def kubeconfig(path: Path, url: str) -> Path:
    """A kubeconfig for `url` with a bearer token, as a plugin outside the cluster uses."""
    path.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: test\n"
        f"clusters:\n- name: test\n  cluster:\n    server: {url}\n"
        "users:\n- name: test\n  user:\n    token: test-token\n"
        "contexts:\n- name: test\n  context:\n    cluster: test\n    user: test\n"
    )
    return path


def error_response(code: int, reason: str, message: str) -> Any:
    """An HTTP error answer whose body is a Status, for a kmock reaction to return."""
    return Response(status=code, payload=status(code, reason, message))


class Script:
    """A kmock payload that answers the first `times` requests, then steps aside.

    Returning NotImplemented makes kmock disable the reaction and fall through
    to the emulator, so later requests see normal behaviour.
    """

    def __init__(self, answer: Callable[[], Any], *, times: int = 1) -> None:
        self._answer = answer
        self.left = times
        self.served = 0

    def __call__(self, request: Any) -> Any:
        if self.left <= 0:
            return NotImplemented
        self.left -= 1
        self.served += 1
        return self._answer()


class Outage:
    """A kmock payload that answers with an error (or hangs) until `end()` is called."""

    def __init__(self, answer: Callable[[], Any] | None = None) -> None:
        self._answer = answer
        self._over = asyncio.Event()
        self.reached = asyncio.Event()
        self.served = 0

    def end(self) -> None:
        self._over.set()

    def __call__(self, request: Any) -> Any:
        if self._over.is_set():
            return NotImplemented
        self.served += 1
        self.reached.set()
        return self._answer() if self._answer is not None else self.hang()

    async def hang(self) -> Any:
        # The client gives up first; the server handler is cancelled when it does.
        await self._over.wait()
        return NotImplemented


class Recorder:
    """Collects the watch's callbacks from its thread for the async test to await."""

    def __init__(self) -> None:
        self.values: queue.Queue[str | None] = queue.Queue()
        self.errors: queue.Queue[str] = queue.Queue()

    def on_value(self, value: str | None) -> None:
        self.values.put(value)

    def on_error(self, message: str) -> None:
        self.errors.put(message)

    async def next_value(self, timeout: float = 5.0) -> str | None:
        try:
            return await asyncio.to_thread(self.values.get, True, timeout)
        except queue.Empty:
            pytest.fail(f"no label value posted within {timeout} s; errors: {self.drain_errors()}")

    async def next_error(self, timeout: float = 5.0) -> str:
        try:
            return await asyncio.to_thread(self.errors.get, True, timeout)
        except queue.Empty:
            pytest.fail(f"no error reported within {timeout} s")

    async def value_becomes(self, expected: str | None, timeout: float = 5.0) -> list[str | None]:
        """Wait for `expected`, returning everything posted before it."""
        deadline = time.monotonic() + timeout
        seen: list[str | None] = []
        while True:
            value = await self.next_value(max(0.01, deadline - time.monotonic()))
            if value == expected:
                return seen
            seen.append(value)

    async def error_matching(self, text: str, timeout: float = 5.0) -> str:
        deadline = time.monotonic() + timeout
        while True:
            message = await self.next_error(max(0.01, deadline - time.monotonic()))
            if text in message:
                return message

    def drain_errors(self) -> list[str]:
        found: list[str] = []
        with contextlib.suppress(queue.Empty):
            while True:
                found.append(self.errors.get_nowait())
        return found
