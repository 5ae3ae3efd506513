"""A real HTTP Kubernetes API (kmock's emulator) for the official client to talk to.

kmock's emulator keeps objects in memory and streams watch events. What the
code under test relies on from a real API server is added here, so the tests
exercise that behaviour rather than kmock's simplifications:

- **resourceVersion**: every write stamps the object with the next revision,
  lists report the current one, and an update (PUT, or a patch naming a
  version) of a stale version is 409 Conflict. Creates get a `uid`.
- **Watches resume**: a watch from a resourceVersion streams only the events
  after it (from an event log); one older than the last `compact()` gets a
  410 Gone event, as after etcd compaction. Without a version the watch
  starts with the current objects as ADDED.
- `timeoutSeconds` is honoured (the stream ends normally, with a BOOKMARK
  first when bookmarks were asked for), scaled by `time_scale` so the
  benchmark can run an hour of watches in seconds.
- `fieldSelector=metadata.name=...` filters lists and watches.
- PUT replaces an object (kmock only knows PATCH).
- The server can be taken down and brought back on the same port, so
  "connection refused" and recovery are real socket behaviour.

Faults (410 Gone, 500s, a server that never answers) are scripted as kmock
reactions in front of the emulator's behaviour, or with `fail()`, which
refuses a write before anything is stored. The code under test runs in its own
thread with the blocking client; the tests await its callbacks through
thread-safe queues, never by sleeping. `api_requests` counts what the code
under test sent (by its User-Agent), leaving out the tests' own requests.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import copy
import queue
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp.test_utils
import aiohttp.web_runner
import kmock
import pytest
from kmock._internal.rendering import Response

from kube.client import ApiAccess

NODES = "/api/v1/nodes"
NODE_FEATURES = "nfd.k8s-sigs.io/v1alpha1/nodefeatures"
AGENT = "test-agent/1"  # the User-Agent of the code under test (see `ApiServer.access`)
_WRITES = (kmock.action.CREATE, kmock.action.UPDATE, kmock.action.DELETE)


@dataclass
class _Logged:
    revision: int
    resource: Any
    namespace: str | None
    name: str
    event: dict[str, Any]


@dataclass
class Fault:
    """Refuse the next `times` requests of `verb` with `status` (before anything is stored).

    Verbs as `request_counts` names them: get, list, watch, create, patch, update, delete.
    """

    verb: str
    status: int
    reason: str
    message: str
    times: int = 1
    served: int = 0


class NodeEmulator(kmock.KubernetesEmulator):
    """kmock's stateful emulator with resourceVersions, resumable watches and PUT."""

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        self.fallback[kmock.method.PUT] << self._serve_replace
        self.revision = 0
        self.compacted = 0
        self.time_scale = 1.0
        self.faults: list[Fault] = []
        self._log: list[_Logged] = []
        self._logged: asyncio.Condition | None = None
        self._arrived: asyncio.Condition | None = None
        # (User-Agent, verb) -> requests; kept whole even when the log is trimmed.
        self.tally: collections.Counter[tuple[str, str]] = collections.Counter()
        # kmock matches each request against every request recorded before it, so
        # a long run (the benchmark) keeps only this many; None keeps them all.
        self.keep_requests: int | None = None

    def fail(self, verb: str, status: int, reason: str, message: str, *, times: int = 1) -> Fault:
        fault = Fault(verb, status, reason, message, times)
        self.faults.append(fault)
        return fault

    def compact(self) -> None:
        """Forget the event history: watches from any version seen so far get 410 Gone."""
        self.compacted = self.revision + 1

    def _next_revision(self) -> str:
        self.revision += 1
        return str(self.revision)

    def _condition(self) -> asyncio.Condition:
        if self._logged is None:
            self._logged = asyncio.Condition()
        return self._logged

    async def requests_reach(
        self, predicate: Callable[[list[Any]], bool], timeout: float = 10.0
    ) -> None:
        """Wait until `predicate(requests of the code under test)` holds."""
        if self._arrived is None:
            self._arrived = asyncio.Condition()
        async with asyncio.timeout(timeout), self._arrived:
            await self._arrived.wait_for(lambda: predicate(api_requests(self)))

    async def _notify(self) -> None:
        if self._arrived is not None:
            async with self._arrived:
                self._arrived.notify_all()

    async def _handle(self, request: Any) -> Any:
        self.tally[(str(request.headers.get("User-Agent", "")), _verb(request))] += 1
        if self.keep_requests is not None and len(self._requests) > self.keep_requests:
            del self._requests[: len(self._requests) - self.keep_requests]
        await self._notify()
        for fault in self.faults:
            if fault.times > 0 and _verb(request) == fault.verb:
                fault.times -= 1
                fault.served += 1
                raise kmock.KubernetesError(
                    status=fault.status, reason=fault.reason, message=fault.message
                )
        key = (request.resource, request.namespace, request.name)
        # The body is stamped in place for kmock to store, and restored afterwards:
        # the recorded request keeps what the client sent.
        sent = copy.deepcopy(request.data) if isinstance(request.data, dict) else None
        if request.action == kmock.action.UPDATE and isinstance(request.data, dict):
            # A patch that names a resourceVersion applies only to that version: a
            # writer working from a stale read gets 409 Conflict, as from a real server.
            wanted = (request.data.get("metadata") or {}).get("resourceVersion")
            if wanted is not None and key in self.objects and not self.objects[key].deleted:
                self._check_version(key, wanted)
            if key in self.objects and not self.objects[key].deleted:
                request.data.setdefault("metadata", {})["resourceVersion"] = self._next_revision()
        if request.action == kmock.action.CREATE and isinstance(request.data, dict):
            metadata = request.data.setdefault("metadata", {})
            metadata["resourceVersion"] = self._next_revision()
            metadata.setdefault("uid", str(uuid.uuid4()))
        before = None
        if request.action == kmock.action.DELETE and key in self.objects:
            before = self.objects[key]
            before = None if before.deleted else copy.deepcopy(before.raw)
        try:
            response = await super()._handle(request)
            if 200 <= getattr(response, "status", 500) < 300:
                await self._record(request, before)
        finally:
            if sent is not None:
                request.data.clear()
                request.data.update(sent)
        return response

    def _check_version(self, key: Any, wanted: object) -> None:
        current = (self.objects[key].get("metadata") or {}).get("resourceVersion")
        if current != wanted:
            raise kmock.KubernetesError(
                status=409,
                reason="Conflict",
                message="the object has been modified; please apply your changes "
                "to the latest version and try again",
            )

    async def _serve_replace(self, request: Any) -> Any:
        if request.resource is None or request.name is None or not isinstance(request.data, dict):
            raise kmock.KubernetesError(status=405, reason="MethodNotAllowed", message="PUT")
        key = (request.resource, request.namespace, request.name)
        if key not in self.objects or self.objects[key].deleted:
            raise kmock.KubernetesError(
                status=404, reason="NotFound", message=f'"{request.name}" not found'
            )
        metadata = request.data.setdefault("metadata", {})
        if not metadata.get("resourceVersion"):
            raise kmock.KubernetesError(
                status=422,
                reason="Invalid",
                message="metadata.resourceVersion: Invalid value: 0x0: must be specified "
                "for an update",
            )
        self._check_version(key, metadata["resourceVersion"])
        old = self.objects[key].raw.get("metadata") or {}
        metadata["resourceVersion"] = self._next_revision()
        for managed in ("uid", "creationTimestamp"):
            if managed in old:
                metadata[managed] = old[managed]
        self.objects[key].create(request.data)
        return self.objects[key].raw

    async def _record(self, request: Any, before: dict[str, Any] | None) -> None:
        key = (request.resource, request.namespace, request.name)
        kind = {kmock.action.CREATE: "ADDED", kmock.action.DELETE: "DELETED"}.get(
            request.action, "MODIFIED"
        )
        if request.action == kmock.action.CREATE:
            metadata = request.data.get("metadata") or {}
            key = (request.resource, request.namespace or metadata.get("namespace"),
                   metadata.get("name"))  # fmt: skip
        if kind == "DELETED":
            if before is None:
                return
            obj = before
            obj.setdefault("metadata", {})["resourceVersion"] = self._next_revision()
        elif request.action in _WRITES or request.method == kmock.method.PUT:
            if key not in self.objects or self.objects[key].deleted:
                return
            obj = copy.deepcopy(self.objects[key].raw)
        else:
            return
        revision = int((obj.get("metadata") or {}).get("resourceVersion") or self.revision)
        condition = self._condition()
        async with condition:
            event = {"type": kind, "object": obj}
            self._log.append(_Logged(revision, request.resource, key[1], str(key[2]), event))
            condition.notify_all()

    async def _serve_list(self, request: Any) -> Any:
        payload = await super()._serve_list(request)
        wanted = _selected_name(request)
        payload["items"] = [
            item
            for item in payload["items"]
            if wanted is None or (item.get("metadata") or {}).get("name") == wanted
        ]
        # The newest logged event, not the newest revision handed out: a write
        # still in flight is then replayed to a watch from here, never skipped.
        payload["metadata"] = {"resourceVersion": str(self.logged_revision)}
        return payload

    async def _serve_watch(self, request: Any) -> AsyncIterator[Any]:
        yield b""  # headers now: the client is waiting for them
        seconds = request.params.get("timeoutSeconds")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + float(seconds) * self.time_scale if seconds else None
        wanted = _selected_name(request)

        def matches(entry: _Logged) -> bool:
            return (
                entry.resource == request.resource
                and (request.namespace is None or entry.namespace == request.namespace)
                and (wanted is None or entry.name == wanted)
            )

        since = request.params.get("resourceVersion") or "0"
        position = len(self._log)  # index of the next logged event to consider
        if since == "0":
            since_revision = 0
            for (resource, namespace, name), obj in list(self.objects.items()):
                entry = _Logged(0, resource, namespace, name, {})
                if not obj.deleted and matches(entry):
                    yield {"type": "ADDED", "object": copy.deepcopy(obj.raw)}
        else:
            since_revision = int(since)
            if since_revision < self.compacted:
                yield {
                    "type": "ERROR",
                    "object": status(410, "Expired", f"too old resource version: {since}"),
                }
                return
            position = next(
                (i for i, e in enumerate(self._log) if e.revision > since_revision), len(self._log)
            )
        condition = self._condition()
        while True:
            pending, position = self._log[position:], len(self._log)
            for entry in pending:
                if entry.revision > since_revision and matches(entry):
                    yield entry.event
            try:
                async with condition:
                    async with asyncio.timeout_at(deadline):
                        await condition.wait_for(lambda seen=position: len(self._log) > seen)
            except TimeoutError:
                if request.params.get("allowWatchBookmarks") == "true":
                    yield {
                        "type": "BOOKMARK",
                        "object": {"metadata": {"resourceVersion": str(self.logged_revision)}},
                    }
                return

    @property
    def logged_revision(self) -> int:
        """The newest revision whose event is logged (what lists and bookmarks report)."""
        return self._log[-1].revision if self._log else 0


def _selected_name(request: Any) -> str | None:
    if request.name is not None:
        return str(request.name)
    selector = request.params.get("fieldSelector") or ""
    for term in selector.split(","):
        field, _, value = term.partition("=")
        if field.strip() == "metadata.name":
            return value.strip().lstrip("=")
    return None


def api_requests(handler: NodeEmulator, agent: str = AGENT) -> list[Any]:
    """The requests the code under test sent (not the tests' own), in order."""
    return [request for request in handler if request.headers.get("User-Agent") == agent]


def request_counts(requests: Iterable[Any]) -> dict[str, int]:
    """How many of each verb: list, watch, get, create, patch, update (PUT), delete."""
    counts: dict[str, int] = {}
    for request in requests:
        verb = _verb(request)
        counts[verb] = counts.get(verb, 0) + 1
    return counts


def _verb(request: Any) -> str:
    if request.method == kmock.method.PUT:
        return "update"
    return {
        kmock.action.LIST: "list",
        kmock.action.WATCH: "watch",
        kmock.action.FETCH: "get",
        kmock.action.CREATE: "create",
        kmock.action.UPDATE: "patch",
        kmock.action.DELETE: "delete",
    }.get(request.action, str(request.method.value).lower())


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

    async def add_node(self, name: str, labels: dict[str, str] | None = None) -> None:
        body = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}}
        if labels is not None:
            body["metadata"]["labels"] = labels  # type: ignore[index]
        response = await self.handler.post(NODES, json=body)
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


def status(code: int, reason: str, message: str) -> dict[str, Any]:
    """A Kubernetes `Status` object as servers send it with errors."""
    return {
        "apiVersion": "v1",
        "kind": "Status",
        "metadata": {},
        "status": "Failure",
        "code": code,
        "reason": reason,
        "message": message,
    }


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
