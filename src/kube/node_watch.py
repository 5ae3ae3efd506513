"""Follow one label on this node: list-then-watch in a dedicated thread.

This replaces the reference's config-manager sidecar, which watched the node
with an informer and restarted the whole plugin with SIGHUP on a change. Here
the value is handed to a callback and the reconcile loop decides what the
change means, so a relabel reconfigures without a restart.

The loop is the classic list-then-watch, shaped by how the official client
and real API servers behave:

- List the node with a `metadata.name=<node>` field selector (a missing node
  means "no value") and always post the current value after a (re)list, so a
  consumer that missed anything converges; then watch from the list's
  resourceVersion and post only when the value changes.
- Every request is bounded: the watch carries a server-side `timeoutSeconds`
  and a longer client-side read timeout, so a dead connection cannot block
  the thread forever (kubernetes-client/python#1148, #1402).
- A watch that ends normally (the server timeout) relists at once; so does
  410 Gone (the resourceVersion expired). Any other failure is reported as
  one line through `on_error` and retried after a capped backoff, which
  starts over after a clean cycle or a watch that stayed up for a while.
- Consecutive lists are spaced by at least `min_relist_interval`, so no
  server behaviour can turn the loop into a busy spin.
- `stop()` sets a flag and cuts the open watch connection: the client's own
  `Watch.stop()` only takes effect at the next event (#422, #1881), which on
  a quiet node may be a minute away. Anything else blocking is bounded by the
  request timeout.

The thread never raises: every exception, including ones from the callbacks,
is caught and reported.
"""

from __future__ import annotations

import contextlib
import enum
import socket
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException

from foundation.backoff import Backoff
from kube import raw
from kube.client import ApiAccess, close_client
from kube.errors import KubeError, describe, status_message

_GONE = 410
DEFAULT_BACKOFF = Backoff(initial=1.0, cap=30.0)


class _Ending(enum.Enum):
    EXPIRED = "expired"  # the server closed the watch after timeoutSeconds
    GONE = "gone"  # 410: the resourceVersion is too old, relist
    STOPPED = "stopped"


class NodeLabelWatch:
    """Posts the value of `label` on node `node_name` (None when absent) to `on_value`."""

    def __init__(
        self,
        *,
        api: ApiAccess,
        node_name: str,
        label: str,
        on_value: Callable[[str | None], None],
        on_error: Callable[[str], None] | None = None,
        server_timeout: int = 60,
        request_timeout: float = 75.0,
        connect_timeout: float = 10.0,
        backoff: Backoff = DEFAULT_BACKOFF,
        min_relist_interval: float = 1.0,
        thread_name: str = "node-label-watch",
    ) -> None:
        if not node_name:
            raise ValueError("node_name must not be empty")
        if not label:
            raise ValueError("label must not be empty")
        if server_timeout < 1:
            raise ValueError("server_timeout must be at least 1 second")
        if request_timeout <= server_timeout:
            # Otherwise every quiet watch would end as a client timeout (an error)
            # instead of the server closing it normally.
            raise ValueError("request_timeout must exceed server_timeout")
        if connect_timeout <= 0 or min_relist_interval < 0:
            raise ValueError("timeouts and intervals must not be negative")
        self._api = api
        self._node_name = node_name
        self._label = label
        self._on_value = on_value
        self._on_error = on_error
        self._server_timeout = int(server_timeout)  # the API takes whole seconds
        self._timeout: raw.Timeout = (min(connect_timeout, request_timeout), request_timeout)
        self._backoff = backoff
        self._min_relist_interval = min_relist_interval
        self._selector = f"metadata.name={node_name}"
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._open_watch: raw.RawResponse | None = None
        self._last: str | None = None
        self._watch_opened_at: float | None = None
        self._thread = threading.Thread(target=self._main, name=thread_name, daemon=True)

    @property
    def node_name(self) -> str:
        return self._node_name

    @property
    def label(self) -> str:
        return self._label

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def start(self) -> None:
        """Start the watch thread (once)."""
        if self._thread.ident is not None:
            raise RuntimeError("NodeLabelWatch can be started only once")
        self._thread.start()

    def stop(self, timeout: float | None = 5.0) -> bool:
        """Ask the thread to end and wait up to `timeout`; True when it has ended."""
        self._stopping.set()
        self._cut_open_watch()
        if self._thread.ident is None:
            return True
        self._thread.join(timeout)
        return not self._thread.is_alive()

    # -- the thread ------------------------------------------------------------

    def _main(self) -> None:
        client: ApiClient | None = None
        try:
            client = self._api.new_client()
            self._loop(client)
        except BaseException as exc:
            # Last line of defence: the thread must end quietly, never with a traceback.
            self._report(f"node label watch ended unexpectedly: {describe(exc)}")
        finally:
            if client is not None:
                try:
                    close_client(client)
                except Exception as exc:
                    self._report(f"closing the API client failed: {describe(exc)}")

    def _loop(self, client: ApiClient) -> None:
        failures = 0
        last_list = float("-inf")
        while not self._stopping.is_set():
            pause = last_list + self._min_relist_interval - time.monotonic()
            if pause > 0 and self._stopping.wait(pause):
                return
            last_list = time.monotonic()
            self._watch_opened_at = None
            try:
                ending = self._list_and_watch(client)
            except Exception as exc:
                if self._stopping.is_set():
                    return  # errors caused by stop() cutting the connection
                self._report(str(exc) if isinstance(exc, KubeError) else self._failure(exc))
                if self._watched_for() >= self._backoff.cap:
                    failures = 0  # it worked for a good while: this is a fresh failure
                delay = self._backoff.delay(failures)
                failures += 1
                if self._stopping.wait(delay):
                    return
                continue
            failures = 0
            if ending is _Ending.STOPPED:
                return

    def _watched_for(self) -> float:
        opened = self._watch_opened_at
        return 0.0 if opened is None else time.monotonic() - opened

    def _failure(self, exc: BaseException) -> str:
        return f"watching node {self._node_name}: {describe(exc)}"

    def _list_and_watch(self, client: ApiClient) -> _Ending:
        try:
            items, version = raw.list_nodes(
                client, field_selector=self._selector, timeout=self._timeout
            )
        except Exception as exc:
            raise KubeError.wrap(f"listing node {self._node_name}", exc) from exc
        # Field selectors are honoured by real servers; checking the name again
        # keeps a misbehaving proxy or mock from feeding us another node.
        node = next((item for item in items if raw.object_name(item) == self._node_name), None)
        self._post(self._value_of(node))
        if self._stopping.is_set():
            return _Ending.STOPPED
        return self._watch(client, version)

    def _watch(self, client: ApiClient, version: str) -> _Ending:
        try:
            response = raw.open_node_watch(
                client,
                field_selector=self._selector,
                resource_version=version,
                server_timeout=self._server_timeout,
                timeout=self._timeout,
            )
        except ApiException as exc:
            if exc.status == _GONE:
                return _Ending.GONE
            raise KubeError.wrap(f"watching node {self._node_name}", exc) from exc
        with self._lock:
            self._open_watch = response
        self._watch_opened_at = time.monotonic()
        try:
            if self._stopping.is_set():
                return _Ending.STOPPED
            for event in raw.iter_events(response):
                ending = self._handle(event)
                if ending is not None:
                    return ending
                if self._stopping.is_set():
                    return _Ending.STOPPED
            return _Ending.EXPIRED
        finally:
            with self._lock:
                self._open_watch = None
            raw.close_quietly(response)

    def _handle(self, event: Mapping[str, Any]) -> _Ending | None:
        kind = event.get("type")
        obj = event.get("object")
        obj = obj if isinstance(obj, Mapping) else {}
        if kind == "ERROR":
            if obj.get("code") == _GONE:
                return _Ending.GONE
            why = status_message(obj.get("code"), obj.get("reason"), obj)
            raise KubeError(f"watching node {self._node_name}: the watch reported {why}")
        if kind not in ("ADDED", "MODIFIED", "DELETED"):
            return None  # BOOKMARK or newer event types carry no label change
        if raw.object_name(obj) != self._node_name:
            return None
        value = None if kind == "DELETED" else self._value_of(obj)
        if value != self._last:
            self._post(value)
        return None

    def _value_of(self, node: Mapping[str, Any] | None) -> str | None:
        if node is None:
            return None
        return raw.object_labels(node).get(self._label)

    def _post(self, value: str | None) -> None:
        self._last = value
        try:
            self._on_value(value)
        except Exception as exc:
            self._report(f"delivering the node label value failed: {describe(exc)}")

    def _report(self, message: str) -> None:
        if self._on_error is None:
            return
        # Nowhere left to report a failing reporter to; the watch must keep going.
        with contextlib.suppress(Exception):
            self._on_error(message)

    def _cut_open_watch(self) -> None:
        # Shutting the socket down wakes the thread blocked reading the stream;
        # the read then fails and the loop sees the stop flag.
        with self._lock:
            response = self._open_watch
        if response is None:
            return
        connection = getattr(response, "connection", None)
        sock = getattr(connection, "sock", None)
        if isinstance(sock, socket.socket):
            with contextlib.suppress(OSError):  # already closed by the other side
                sock.shutdown(socket.SHUT_RDWR)
