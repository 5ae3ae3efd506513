"""The emulated Kubernetes API server: kmock's emulator plus what real servers do.

See `tests.unit.kube.apiserver` for what is added and why; this module holds the
handler itself and the helpers that read its records.
"""

from __future__ import annotations

import asyncio
import collections
import copy
import uuid
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass
from typing import Any

import kmock

from tests.unit.kube.slice_rules import slice_problems

AGENT = "test-agent/1"  # the User-Agent of the code under test (see `ApiServer.access`)
# What `GET /version` answers unless a test sets `NodeEmulator.server_version`: a
# release that takes counter sets in ResourceSlices of their own.
SERVER_VERSION = "v1.35.0"
_WRITES = (kmock.action.CREATE, kmock.action.UPDATE, kmock.action.DELETE)


@dataclass
class _Logged:
    revision: int
    resource: Any
    namespace: str | None
    name: str
    event: dict[str, Any]
    previous: dict[str, Any] | None = None  # a MODIFIED object as it was before


# Field selectors a real server accepts, beyond metadata.name and metadata.namespace.
_FIELDS: dict[str, frozenset[str]] = {"resourceslices": frozenset({"spec.nodeName", "spec.driver"})}
# Kinds with a `status` subresource: a create or an update of the object keeps the
# stored status, and only a PUT to `<object>/status` changes it.
_STATUS_SUBRESOURCE = frozenset({"resourceclaims"})


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
        # The official client asks `/version/`; a real server answers both spellings.
        self.fallback["get /version/"] << self._serve_server_version
        self.revision = 0
        self.compacted = 0
        self.time_scale = 1.0
        # Bumped by `end_watches()`; each open watch ends when it moves.
        self._watch_epoch = 0
        self._open_watches = 0
        self._wakers: set[asyncio.Task[None]] = set()
        self.faults: list[Fault] = []
        self._log: list[_Logged] = []
        self._logged: asyncio.Condition | None = None
        self._arrived: asyncio.Condition | None = None
        # (User-Agent, verb) -> requests; kept whole even when the log is trimmed.
        self.tally: collections.Counter[tuple[str, str]] = collections.Counter()
        # kmock matches each request against every request recorded before it, so
        # a long run (the benchmark) keeps only this many; None keeps them all.
        self.keep_requests: int | None = None
        # `GET /version`'s gitVersion, and the release whose ResourceSlice rules
        # writes are held to (`slice_rules`); None: /version answers 404.
        self.server_version: str | None = SERVER_VERSION
        # The release whose rules apply where it is not the version's (a server
        # whose /version cannot be read is still of some release).
        self.slice_rules: tuple[int, int] | None = None

    def fail(self, verb: str, status: int, reason: str, message: str, *, times: int = 1) -> Fault:
        fault = Fault(verb, status, reason, message, times)
        self.faults.append(fault)
        return fault

    @property
    def release(self) -> tuple[int, int]:
        """(major, minor) of the rules slices are held to: `slice_rules`, else `server_version`'s
        (the default's when there is none)."""
        if self.slice_rules is not None:
            return self.slice_rules
        text = (self.server_version or SERVER_VERSION).lstrip("v")
        major, minor, *_ = text.split(".")
        return int(major), int("".join(c for c in minor if c.isdigit()))

    async def _serve_server_version(self, request: Any) -> Any:
        if self.server_version is None:
            raise kmock.KubernetesError(
                status=404,
                reason="NotFound",
                message="the server could not find the requested resource",
            )
        text = self.server_version.lstrip("v")
        major, minor, *_ = text.split(".")
        return {
            "major": major,
            "minor": "".join(c for c in minor if c.isdigit()),
            "gitVersion": self.server_version,
            "gitTreeState": "clean",
            "goVersion": "go1.24.0",
            "compiler": "gc",
            "platform": "linux/amd64",
        }

    def compact(self) -> None:
        """Forget the event history, as etcd's compaction does while the cluster moves on.

        Every version handed out so far is gone: an open watch is told 410 Gone
        at once (as a watch served from etcd is) and a watch resumed from any
        of them gets 410 too. The cluster's revision moves past the compaction,
        so a list reports a version that a watch can start from: one relist
        recovers, as against a real server.
        """
        self.revision += 1
        self.compacted = self.revision
        self._wake_watches()

    async def watching(self, timeout: float = 10.0) -> None:
        """Wait until a watch is open (served by the emulator, not by a scripted reaction)."""
        condition = self._condition()
        async with asyncio.timeout(timeout), condition:
            await condition.wait_for(lambda: self._open_watches > 0)

    async def end_watches(self, timeout: float = 10.0) -> None:
        """End every open watch now, as its `timeoutSeconds` would (a BOOKMARK first if asked).

        Waits for a watch to be open first, so a test can call it as soon as
        the watch it means to end has been requested.
        """
        condition = self._condition()
        async with asyncio.timeout(timeout), condition:
            await condition.wait_for(lambda: self._open_watches > 0)
            self._watch_epoch += 1
            condition.notify_all()

    def _wake_watches(self) -> None:
        # Open watches wait on the condition, whose lock a plain method cannot take:
        # they are woken by a task, on the loop's next turn.
        async def wake() -> None:
            condition = self._condition()
            async with condition:
                condition.notify_all()

        task = asyncio.get_running_loop().create_task(wake())
        self._wakers.add(task)
        task.add_done_callback(self._wakers.discard)

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

    async def written(self, predicate: Callable[[], bool], timeout: float = 10.0) -> None:
        """Wait until `predicate()` holds: checked now and after every stored write.

        No polling, so a benchmark can time a write to the moment it lands.
        """
        condition = self._condition()
        async with asyncio.timeout(timeout), condition:
            await condition.wait_for(predicate)

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
        if request.resource is not None:
            _check_selector(request)
        if (
            _plural(request) == "resourceslices"
            and request.method in (kmock.method.POST, kmock.method.PUT)
            and isinstance(request.data, dict)
        ):
            # A real server validates every slice it stores (here: the count rules).
            problems = slice_problems(request.data, self.release)
            if problems:
                name = (request.data.get("metadata") or {}).get("name")
                raise kmock.KubernetesError(
                    status=422,
                    reason="Invalid",
                    message=f'ResourceSlice.resource.k8s.io "{name}" is invalid: '
                    + "; ".join(problems),
                )
        key = (request.resource, request.namespace, request.name)
        # The body is stamped in place for kmock to store, and restored afterwards:
        # the recorded request keeps what the client sent.
        sent = copy.deepcopy(request.data) if isinstance(request.data, dict) else None
        if (
            request.action == kmock.action.CREATE
            and isinstance(request.data, dict)
            and _plural(request) in _STATUS_SUBRESOURCE
        ):
            request.data.pop("status", None)  # a create never sets the status
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
        if request.name is not None and key in self.objects and not self.objects[key].deleted:
            before = copy.deepcopy(self.objects[key].raw)
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
        stored = self.objects[key].raw
        if request.subresource == "status":
            # Only the status changes; the rest of the body is ignored, as by a real server.
            body = copy.deepcopy(stored)
            body["status"] = request.data.get("status")
            body.setdefault("metadata", {})["resourceVersion"] = metadata["resourceVersion"]
            request.data.clear()
            request.data.update(body)
            metadata = request.data["metadata"]
        elif _plural(request) in _STATUS_SUBRESOURCE:
            request.data.pop("status", None)
            if "status" in stored:
                request.data["status"] = copy.deepcopy(stored["status"])
        old = stored.get("metadata") or {}
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
        previous = None
        if kind == "DELETED":
            if before is None:
                return
            obj = before
            obj.setdefault("metadata", {})["resourceVersion"] = self._next_revision()
        elif request.action in _WRITES or request.method == kmock.method.PUT:
            if key not in self.objects or self.objects[key].deleted:
                return
            obj = copy.deepcopy(self.objects[key].raw)
            previous = before if kind == "MODIFIED" else None
        else:
            return
        revision = int((obj.get("metadata") or {}).get("resourceVersion") or self.revision)
        condition = self._condition()
        async with condition:
            event = {"type": kind, "object": obj}
            entry = _Logged(revision, request.resource, key[1], str(key[2]), event, previous)
            self._log.append(entry)
            condition.notify_all()

    async def _serve_list(self, request: Any) -> Any:
        payload = await super()._serve_list(request)
        payload["items"] = [item for item in payload["items"] if _selects(request, item)]
        # The newest logged event, not the newest revision handed out: a write
        # still in flight is then replayed to a watch from here, never skipped.
        payload["metadata"] = {"resourceVersion": str(self.listed_revision)}
        return payload

    async def _serve_watch(self, request: Any) -> AsyncIterator[Any]:
        yield b""  # headers now: the client is waiting for them
        seconds = request.params.get("timeoutSeconds")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + float(seconds) * self.time_scale if seconds else None

        def matches(entry: _Logged) -> bool:
            return entry.resource == request.resource and (
                request.namespace is None or entry.namespace == request.namespace
            )

        since = request.params.get("resourceVersion") or "0"
        position = len(self._log)  # index of the next logged event to consider
        if since == "0":
            since_revision = 0
            for (resource, namespace, name), obj in list(self.objects.items()):
                entry = _Logged(0, resource, namespace, name, {})
                if not obj.deleted and matches(entry) and _selects(request, obj.raw):
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
        compacted, epoch = self.compacted, self._watch_epoch
        self._open_watches += 1
        try:
            async with condition:
                condition.notify_all()  # `end_watches` may be waiting for this one
            while True:
                pending, position = self._log[position:], len(self._log)
                for entry in pending:
                    if entry.revision > since_revision and matches(entry):
                        event = _as_selected(request, entry)
                        if event is not None:
                            yield event
                if self.compacted != compacted:
                    yield {
                        "type": "ERROR",
                        "object": status(410, "Expired", "too old resource version: compacted"),
                    }
                    return

                def woken(seen: int = position) -> bool:
                    return (
                        len(self._log) > seen
                        or self.compacted != compacted
                        or self._watch_epoch != epoch
                    )

                try:
                    async with condition:
                        async with asyncio.timeout_at(deadline):
                            await condition.wait_for(woken)
                except TimeoutError:
                    expired = True
                else:
                    expired = self._watch_epoch != epoch and len(self._log) == position
                if expired:
                    if request.params.get("allowWatchBookmarks") == "true":
                        version = str(self.listed_revision)
                        yield {
                            "type": "BOOKMARK",
                            "object": {"metadata": {"resourceVersion": version}},
                        }
                    return
        finally:
            self._open_watches -= 1

    @property
    def logged_revision(self) -> int:
        """The newest revision whose event is logged."""
        return self._log[-1].revision if self._log else 0

    @property
    def listed_revision(self) -> int:
        """What lists and bookmarks report: the newest logged event, or the compaction after it."""
        return max(self.logged_revision, self.compacted)


def _plural(request: Any) -> str:
    return str(getattr(request.resource, "plural", "") or "")


def _terms(request: Any) -> list[tuple[str, bool, str]]:
    """The field selector as (field, wanted equal, value) terms; a named request adds its name."""
    terms = []
    if request.name is not None:
        terms.append(("metadata.name", True, str(request.name)))
    for term in (request.params.get("fieldSelector") or "").split(","):
        if not term.strip():
            continue
        if "!=" in term:
            field, value = term.split("!=", 1)
            terms.append((field.strip(), False, value.strip()))
        else:
            field, _, value = term.partition("=")
            terms.append((field.strip(), True, value.strip().lstrip("=")))
    return terms


def _check_selector(request: Any) -> None:
    supported = {"metadata.name", "metadata.namespace"} | _FIELDS.get(_plural(request), set())
    for field, _, _ in _terms(request):
        if field not in supported:
            raise kmock.KubernetesError(
                status=400,
                reason="BadRequest",
                message=f'unable to parse requirement: field label not supported: "{field}"',
            )


def _field(obj: dict[str, Any], path: str) -> str:
    value: Any = obj
    for part in path.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return "" if value is None else str(value)


def _selects(request: Any, obj: dict[str, Any]) -> bool:
    return all((_field(obj, field) == value) == equal for field, equal, value in _terms(request))


def _as_selected(request: Any, entry: _Logged) -> dict[str, Any] | None:
    """The event as a watcher with this selector sees it, or None when it sees nothing.

    An object modified into the selection is ADDED for that watcher, one
    modified out of it DELETED, as a real server's watch cache reports them.
    """
    event = entry.event
    now = _selects(request, event["object"])
    if event["type"] != "MODIFIED":
        return event if now else None
    before = entry.previous is not None and _selects(request, entry.previous)
    if now and before:
        return event
    if now or before:
        return {"type": "ADDED" if now else "DELETED", "object": event["object"]}
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
