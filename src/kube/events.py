"""Kubernetes Events about this node (`events.k8s.io/v1`), posted by a worker thread.

`kubectl describe node` and `kubectl get events` are where operators look
first; the plugin reports there what it sees (a GPU failing or recovering, a
config rejected, being blocked). The reconcile loop must never wait for the
API server, so `NodeEventRecorder.record` only appends to a bounded queue and
returns; one daemon thread drains it, decides with an `EventBook` what to
write (deduplication into series, the token bucket) and makes the requests
(`kube.event_api`) with bounded timeouts. Failures never reach the caller:
the event is dropped, counted through `on_drop`, and reported through
`on_error` once per kind of failure (not once per event), with `on_info` when
writes work again.

The thread connects only when the first event arrives: loading the
Kubernetes client (through `kube.on_demand`) costs a second or more of CPU,
which a node where nothing happens never pays, and which never delays
start-up. `connect` says where
the API is (None: nowhere, and events are off).

What the API server requires (see the spec on node events):

- The Event lives in namespace `default`: for a cluster-scoped subject such
  as a Node the server accepts no other (422 "does not match
  event.namespace") except `kube-system`, and `default` is where the
  kubelet's own node events are.
- `regarding` names the Node. Its `uid` is the Node's real UID, read once
  with a GET before the first write. Until that read succeeds the node's name
  stands in for the UID, as the kubelet has always done for its node events:
  `kubectl describe node` looks for both (the UID since kubectl 1.24, the
  name before and since), whereas an Event with no UID at all is missed by it.
- `eventTime`, `series.lastObservedTime`: MicroTime (`micro_time`).
- `note` is at most 1 KiB, `reason`, `action` and `reportingInstance` 128
  characters; longer ones are cut.

Objects are named by the recorder (`<node>.<hex nanoseconds>`, as client-go
does) and nothing is retried, so a create that timed out but happened cannot
leave a twin. A series update that finds its object gone (the API server's
event TTL, one hour by default) creates a new one carrying the count on.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import deque
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from kube import on_demand
from kube.event_series import Entry, EventBook, EventType, Limits, NodeEvent, Work, micro_time

if TYPE_CHECKING:
    from kube.client import ApiAccess
    from kube.event_api import EventApi

__all__ = [
    "EVENTS_NAMESPACE",
    "REPORTING_CONTROLLER",
    "EventType",
    "Limits",
    "NodeEvent",
    "NodeEventRecorder",
    "cut",
]

EVENTS_NAMESPACE = "default"
REPORTING_CONTROLLER = "nvidia.com/device-plugin"
NOTE_LIMIT = 1024  # bytes
FIELD_LIMIT = 128  # reason, action, reportingInstance
NAME_LIMIT = 253
UID_RETRY_SECONDS = 300.0

_FORBIDDEN = 403
_INVALID = 422

# Why events are dropped, for the caller's counter.
DROP_QUEUE_FULL = "queue_full"
DROP_BACKLOG_FULL = "backlog_full"
DROP_API_ERROR = "api_error"

Clock = Callable[[], float]
WallClock = Callable[[], datetime]


def cut(text: str, limit: int) -> str:
    """`text` within `limit` UTF-8 bytes, ending in an ellipsis when cut."""
    data = text.encode("utf-8")
    if len(data) <= limit:
        return text
    ellipsis = "…"
    room = limit - len(ellipsis.encode("utf-8"))
    return data[:room].decode("utf-8", errors="ignore") + ellipsis


class NodeEventRecorder:
    """Posts `NodeEvent`s about node `node_name` from its own thread; `record` never blocks."""

    def __init__(
        self,
        *,
        connect: Callable[[], ApiAccess | None],
        node_name: str,
        reporting_instance: str = "",
        namespace: str = EVENTS_NAMESPACE,
        limits: Limits | None = None,
        timeout: float = 10.0,
        on_error: Callable[[str], None] | None = None,
        on_info: Callable[[str], None] | None = None,
        on_drop: Callable[[str], None] | None = None,
        clock: Clock = time.monotonic,
        wall: WallClock = lambda: datetime.now(UTC),
        thread_name: str = "node-events",
    ) -> None:
        if not node_name:
            raise ValueError("node_name must not be empty")
        if timeout <= 0:
            raise ValueError("timeout must be positive")
        self._connect = connect
        self._node = node_name
        self._instance = cut(reporting_instance or node_name, FIELD_LIMIT)
        self._namespace = namespace
        self._limits = limits or Limits()
        self._timeout = (min(5.0, timeout), timeout)
        self._on_error = on_error
        self._on_info = on_info
        self._on_drop = on_drop
        self._clock = clock
        self._wall = wall
        self._book = EventBook(self._limits, clock())
        self._inbox: deque[NodeEvent] = deque()
        self._wake = threading.Condition()
        self._stopping = False
        self._off = False  # no API to post to: nothing is accepted any more
        self._deadline = float("inf")  # for the last pass after stop()
        self._overflowing = False  # the inbox dropped something since the worker last took
        self._backlogged = False  # the backlog dropped something since it last had room
        self._failing: str | None = None  # the kind of the last failure, until a success
        self._dropped_while_failing = 0
        self._uid: str | None = None
        self._uid_tried_at = float("-inf")
        self._last_name = 0
        self._thread = threading.Thread(target=self._main, name=thread_name, daemon=True)

    @property
    def node_name(self) -> str:
        return self._node

    @property
    def reporting_instance(self) -> str:
        return self._instance

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def start(self) -> None:
        if self._thread.ident is not None:
            raise RuntimeError("NodeEventRecorder can be started only once")
        self._thread.start()

    def record(self, event: NodeEvent) -> bool:
        """Hand one event to the worker; False when it was not taken (queue full, stopped, off).

        Safe from any thread; takes a lock only for an append.
        """
        with self._wake:
            if self._stopping or self._off:
                return False
            if len(self._inbox) >= self._limits.queue:
                first = not self._overflowing
                self._overflowing = True
            else:
                self._inbox.append(event)
                self._wake.notify()
                return True
        self._dropped(DROP_QUEUE_FULL)
        if first:
            self._report(
                f"node event queue full ({self._limits.queue} waiting): dropping new events "
                f"such as {event.reason}"
            )
        return False

    def stop(self, timeout: float | None = 5.0) -> bool:
        """Send what is queued and allowed within `timeout`, then end; True when ended."""
        with self._wake:
            self._stopping = True
            if timeout is not None:
                self._deadline = self._clock() + timeout
            self._wake.notify()
        if self._thread.ident is None:
            return True
        self._thread.join(timeout)
        return not self._thread.is_alive()

    # -- the thread --------------------------------------------------------------

    def _main(self) -> None:
        api: EventApi | None = None
        try:
            with self._wake:
                while not self._inbox and not self._stopping:
                    self._wake.wait()
                if not self._inbox:
                    return  # stopped before anything happened: never connected
            api = self._open()
            if api is not None:
                self._loop(api)
        except BaseException as exc:
            # Last line of defence: the thread must end quietly, never with a traceback.
            self._report(f"node events stopped unexpectedly: {exc!r}")
        finally:
            if api is not None:
                with contextlib.suppress(Exception):
                    api.close()

    def _open(self) -> EventApi | None:
        # The client loads here, in the recorder's thread, at the first event.
        try:
            access = self._connect()
            why = "no Kubernetes API access (not in a cluster and no KUBECONFIG)"
        except Exception as exc:
            access, why = None, on_demand.describe(exc)
        if access is None:
            with self._wake:
                self._off = True
                self._inbox.clear()
            self._report(f"node events are off: {why}")
            return None
        api = on_demand.event_api()(access, namespace=self._namespace, timeout=self._timeout)
        self._inform(f"posting events about node {self._node} through {api.source}")
        return api

    def _loop(self, api: EventApi) -> None:
        while True:
            with self._wake:
                while not self._inbox and not self._stopping:
                    due = self._book.due_at(self._clock())
                    wait = None if due is None else max(0.0, due - self._clock())
                    if wait == 0.0:
                        break
                    self._wake.wait(wait)
                taken = list(self._inbox)
                self._inbox.clear()
                self._overflowing = False
                stopping = self._stopping
            for event in taken:
                self._observe(event)
            self._write_due(api, last_pass=stopping)
            if stopping:
                return

    def _observe(self, event: NodeEvent) -> None:
        if self._book.observe(event, self._clock(), self._wall()):
            if self._book.backlog < self._limits.backlog:
                self._backlogged = False
            return
        self._dropped(DROP_BACKLOG_FULL)
        if not self._backlogged:
            self._backlogged = True
            self._report(
                f"node events are rate-limited and {self._limits.backlog} are waiting: "
                f"dropping new ones such as {event.reason}"
            )

    def _write_due(self, api: EventApi, *, last_pass: bool) -> None:
        while not (last_pass and self._clock() >= self._deadline):
            work = self._book.next_work(self._clock())
            if work is None:
                return
            kind, entry = work
            count = entry.count
            try:
                if kind is Work.UPDATE and entry.name is not None:
                    if not api.update_series(entry.name, entry.event.reason, count, entry.last):
                        # The object outlived its TTL: carry the series on in a new one.
                        self._create(api, entry, count)
                    else:
                        self._book.updated(entry, count)
                else:
                    self._create(api, entry, count)
            except Exception as exc:
                self._book.failed(entry, count)
                self._failed(exc)
            else:
                self._succeeded()

    def _create(self, api: EventApi, entry: Entry, count: int) -> None:
        name = self._new_name()
        api.create(self._body(api, entry, name, count))
        self._book.created(entry, name, count)

    def _body(self, api: EventApi, entry: Entry, name: str, count: int) -> dict[str, Any]:
        event = entry.event
        body: dict[str, Any] = {
            "apiVersion": "events.k8s.io/v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": self._namespace},
            "eventTime": micro_time(entry.first),
            "reportingController": REPORTING_CONTROLLER,
            "reportingInstance": self._instance,
            "action": cut(event.action, FIELD_LIMIT),
            "reason": cut(event.reason, FIELD_LIMIT),
            "type": str(event.type),
            "note": cut(event.note, NOTE_LIMIT),
            "regarding": {
                "apiVersion": "v1",
                "kind": "Node",
                "name": self._node,
                "uid": self._node_uid(api),
            },
        }
        if count > 1:
            body["series"] = {"count": count, "lastObservedTime": micro_time(entry.last)}
        return body

    def _node_uid(self, api: EventApi) -> str:
        if self._uid is None and self._clock() - self._uid_tried_at >= UID_RETRY_SECONDS:
            self._uid_tried_at = self._clock()
            self._uid = api.node_uid(self._node)
        return self._uid or self._node

    def _new_name(self) -> str:
        # Strictly increasing, so two events in the same nanosecond still differ.
        stamp = max(time.time_ns(), self._last_name + 1)
        self._last_name = stamp
        suffix = f".{stamp:x}"
        prefix = self._node[: NAME_LIMIT - len(suffix)].rstrip(".-")
        return prefix + suffix

    # -- outcomes ----------------------------------------------------------------------

    def _failed(self, exc: Exception) -> None:
        self._dropped(DROP_API_ERROR)
        status = getattr(exc, "status", None)
        kind = f"HTTP {status}" if status is not None else "unreachable"
        if self._failing is None:
            self._dropped_while_failing = 0
        self._dropped_while_failing += 1
        if kind == self._failing:
            return
        self._failing = kind
        hint = ""
        if status == _FORBIDDEN:
            hint = (
                f" (the plugin's service account needs create and patch on "
                f"events.k8s.io events in namespace {self._namespace})"
            )
        elif status == _INVALID:
            hint = " (the API server rejected the event itself)"
        self._report(f"{exc}{hint}; dropping node events until the API server takes them")

    def _succeeded(self) -> None:
        if self._failing is None:
            return
        self._failing = None
        dropped, self._dropped_while_failing = self._dropped_while_failing, 0
        self._inform(f"node events reach the API server again ({dropped} dropped meanwhile)")

    def _dropped(self, why: str) -> None:
        if self._on_drop is not None:
            with contextlib.suppress(Exception):
                self._on_drop(why)

    def _report(self, message: str) -> None:
        # Nowhere left to report a failing reporter to; events must keep going.
        if self._on_error is not None:
            with contextlib.suppress(Exception):
                self._on_error(message)

    def _inform(self, message: str) -> None:
        if self._on_info is not None:
            with contextlib.suppress(Exception):
                self._on_info(message)
