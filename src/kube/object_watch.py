"""Keep one named object current from the API server: list once, then watch and resume.

The plugin follows its node's config label, and the labeller compares what it
wants to publish with what the Node or its NodeFeature object already holds.
Both questions are answered from this cache instead of a request, so a node in
steady state only pays for the watch itself.

The loop is a reflector for a single object, shaped for fleet-wide economy:

- List with a `metadata.name=<name>` field selector (a missing object means
  None), then watch from the list's resourceVersion with bookmarks.
- Each watch asks the server to end it after a randomized 5-10 minutes
  (`pacing.WatchTimeouts`). A watch that ran its course is **resumed** from
  the last resourceVersion seen (an event or a bookmark): no list. Only 410
  Gone (the version is too old) or a failure relists, so a quiet node makes
  about eight requests an hour.
- Any failure is reported as one line through `on_error` and retried after a
  jittered, capped, exponential backoff that starts over once a watch stayed
  up for a while. A watch the server closes early without an error (a
  restarting API server ends its watches cleanly) is resumed after a jittered
  pause too, so a fleet never reconnects in lockstep.
- Consecutive lists are spaced by at least `min_relist_interval`, so no
  server behaviour can turn the loop into a busy spin.
- Every request is bounded: the watch has a server-side `timeoutSeconds` and
  a longer client-side read timeout, so a dead connection cannot block the
  thread forever (kubernetes-client/python#1148, #1402).
- `stop()` sets a flag and cuts the open watch connection: the client's own
  `Watch.stop()` only takes effect at the next event (#422, #1881), which on
  a quiet object may be minutes away.

`on_change(obj, listed)` is called from the watch thread after every list
(`listed=True`, so a consumer that missed anything converges) and after every
event that changed the object. The thread never raises: every exception,
including ones from the callbacks, is caught and reported.
"""

from __future__ import annotations

import collections
import contextlib
import enum
import random
import socket
import threading
from collections.abc import Callable, Mapping
from typing import Any, TypedDict

from foundation.backoff import Backoff
from kube import raw
from kube.client import ApiAccess, close_client
from kube.errors import KubeError, describe, status_message
from kube.official import ApiClient, ApiException
from kube.pacing import DEFAULT_WATCH_TIMEOUTS, REAL_TIME, Clock, WatchTimeouts, jittered

__all__ = ["DEFAULT_BACKOFF", "ObjectWatch", "WatchTuning"]

_GONE = 410
DEFAULT_BACKOFF = Backoff(initial=1.0, cap=30.0)
# A watch that lasted this share of the timeout it asked for ran its course.
_FULL_TERM = 0.9

OnChange = Callable[[raw.Json | None, bool], None]


class WatchTuning(TypedDict, total=False):
    """How an `ObjectWatch` paces itself (each has a default), for wrappers to pass on."""

    watch_timeouts: WatchTimeouts
    read_timeout: float
    read_grace: float
    connect_timeout: float
    backoff: Backoff
    min_relist_interval: float
    clock: Clock
    rng: random.Random | None


class _Ending(enum.Enum):
    EXPIRED = "expired"  # the server closed the watch after timeoutSeconds
    CLOSED_EARLY = "closed early"  # closed cleanly long before that
    GONE = "gone"  # 410: the resourceVersion is too old, relist
    STOPPED = "stopped"


class ObjectWatch:
    """A thread keeping `collection`/`name` current; read it with `current()`."""

    def __init__(
        self,
        *,
        api: ApiAccess,
        collection: raw.Collection,
        name: str,
        on_change: OnChange | None = None,
        on_error: Callable[[str], None] | None = None,
        watch_timeouts: WatchTimeouts = DEFAULT_WATCH_TIMEOUTS,
        read_timeout: float = 30.0,
        read_grace: float = 15.0,
        connect_timeout: float = 10.0,
        backoff: Backoff = DEFAULT_BACKOFF,
        min_relist_interval: float = 1.0,
        clock: Clock = REAL_TIME,
        rng: random.Random | None = None,
        thread_name: str = "object-watch",
    ) -> None:
        if not name:
            raise ValueError("name must not be empty")
        if read_timeout <= 0 or read_grace <= 0 or connect_timeout <= 0:
            # Without a grace, every quiet watch would end as a client timeout
            # (an error) instead of the server closing it normally.
            raise ValueError("timeouts must be positive")
        if min_relist_interval < 0:
            raise ValueError("min_relist_interval must not be negative")
        self._api = api
        self._collection = collection
        self._name = name
        self._on_change = on_change
        self._on_error = on_error
        self._timeouts = watch_timeouts
        self._read_timeout = read_timeout
        self._read_grace = read_grace
        self._connect_timeout = connect_timeout
        self._backoff = backoff
        self._min_relist_interval = min_relist_interval
        self._clock = clock
        self._rng = rng if rng is not None else random.Random()
        self._selector = f"metadata.name={name}"
        self._what = collection.describe(name)
        self._stopping = threading.Event()
        self._synced = threading.Event()
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._open_watch: raw.RawResponse | None = None
        self._current: raw.Json | None = None
        self._awaiting: str | None = None  # resourceVersion of our own write, until seen
        self._delivered: collections.deque[str] = collections.deque(maxlen=64)  # recent events
        self._watch_opened_at: float | None = None
        self._thread = threading.Thread(target=self._main, name=thread_name, daemon=True)

    @property
    def name(self) -> str:
        return self._name

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    @property
    def synced(self) -> bool:
        """True once a list succeeded: `current()` then answers for the server."""
        return self._synced.is_set()

    def wait_synced(self, timeout: float) -> bool:
        return self._synced.wait(timeout)

    def current(self) -> raw.Json | None:
        """The object as last seen (None: absent, or not listed yet; see `synced`)."""
        with self._lock:
            return self._current

    def observe(self, obj: raw.Json) -> None:
        """Take an object our own write returned, before its watch event arrives.

        Events still in flight from before the write are older than it: they are
        not applied until the write's own event (same resourceVersion) or a
        list comes through, so the copy never goes back to before the write.
        """
        if raw.object_name(obj) != self._name:
            return
        version = raw.object_resource_version(obj)
        with self._changed:
            if version and version in self._delivered:
                return  # the watch was quicker: the copy holds this write, or newer
            self._current = obj
            self._awaiting = version or None
            self._changed.notify_all()

    def wait_until(self, predicate: Callable[[raw.Json | None], bool], timeout: float) -> bool:
        """Block until a listed copy satisfies `predicate`; False after `timeout` seconds."""
        with self._changed:
            return self._changed.wait_for(
                lambda: self._synced.is_set() and predicate(self._current), timeout
            )

    def start(self) -> None:
        """Start the watch thread (once)."""
        if self._thread.ident is not None:
            raise RuntimeError("a watch can be started only once")
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
        client = None
        try:
            client = self._api.new_client()
            self._loop(client)
        except BaseException as exc:
            # Last line of defence: the thread must end quietly, never with a traceback.
            self._report(f"watching {self._what} ended unexpectedly: {describe(exc)}")
        finally:
            if client is not None:
                try:
                    close_client(client)
                except Exception as exc:
                    self._report(f"closing the API client failed: {describe(exc)}")

    def _loop(self, client: ApiClient) -> None:
        failures = 0
        version = ""  # where the next watch resumes; empty: list first
        last_list = float("-inf")
        while not self._stopping.is_set():
            self._watch_opened_at = None
            try:
                if not version:
                    pause = last_list + self._min_relist_interval - self._clock.now()
                    if pause > 0 and self._clock.wait(self._stopping, pause):
                        return
                    last_list = self._clock.now()
                    version = self._list(client)
                    if self._stopping.is_set():
                        return
                ending, version = self._watch(client, version)
            except Exception as exc:
                if self._stopping.is_set():
                    return  # errors caused by stop() cutting the connection
                self._report(str(exc) if isinstance(exc, KubeError) else self._failure(exc))
                version = ""  # after a failure, only a list says what was missed
                if self._watched_for() >= self._backoff.cap:
                    failures = 0  # it worked for a good while: this is a fresh failure
                delay = jittered(self._backoff, failures, self._rng)
                failures += 1
                if self._clock.wait(self._stopping, delay):
                    return
                continue
            if ending is _Ending.STOPPED:
                return
            if ending is _Ending.CLOSED_EARLY:
                if self._watched_for() >= self._backoff.cap:
                    failures = 0
                delay = jittered(self._backoff, failures, self._rng)
                failures += 1
                if self._clock.wait(self._stopping, delay):
                    return
                continue
            failures = 0
            if ending is _Ending.GONE:
                version = ""

    def _watched_for(self) -> float:
        opened = self._watch_opened_at
        return 0.0 if opened is None else self._clock.now() - opened

    def _failure(self, exc: BaseException) -> str:
        return f"watching {self._what}: {describe(exc)}"

    def _bounds(self, read: float) -> raw.Timeout:
        # Socket timeouts are not scaled with the clock: they guard against dead
        # connections, which take real time whatever the schedule's pace.
        return (min(self._connect_timeout, read), read)

    def _list(self, client: ApiClient) -> str:
        try:
            items, version = raw.list_objects(
                client,
                self._collection,
                field_selector=self._selector,
                timeout=self._bounds(self._read_timeout),
            )
        except Exception as exc:
            raise KubeError.wrap(f"listing {self._what}", exc) from exc
        # Field selectors are honoured by real servers; checking the name again
        # keeps a misbehaving proxy or mock from feeding us another object.
        found = next((item for item in items if raw.object_name(item) == self._name), None)
        self._set(found, listed=True)
        return version

    def _watch(self, client: ApiClient, version: str) -> tuple[_Ending, str]:
        server_timeout = self._timeouts.pick(self._rng)
        try:
            response = raw.open_watch(
                client,
                self._collection,
                field_selector=self._selector,
                resource_version=version,
                server_timeout=server_timeout,
                timeout=self._bounds(server_timeout + self._read_grace),
            )
        except ApiException as exc:
            if exc.status == _GONE:
                return _Ending.GONE, ""
            raise KubeError.wrap(f"watching {self._what}", exc) from exc
        with self._lock:
            self._open_watch = response
        self._watch_opened_at = self._clock.now()
        try:
            if self._stopping.is_set():
                return _Ending.STOPPED, version
            for event in raw.iter_events(response):
                ending, version = self._handle(event, version)
                if ending is not None:
                    return ending, version
                if self._stopping.is_set():
                    return _Ending.STOPPED, version
            if self._watched_for() >= _FULL_TERM * server_timeout:
                return _Ending.EXPIRED, version
            return _Ending.CLOSED_EARLY, version
        finally:
            with self._lock:
                self._open_watch = None
            raw.close_quietly(response)

    def _handle(self, event: Mapping[str, Any], version: str) -> tuple[_Ending | None, str]:
        kind = event.get("type")
        obj = event.get("object")
        obj = obj if isinstance(obj, dict) else {}
        if kind == "ERROR":
            if obj.get("code") == _GONE:
                return _Ending.GONE, ""
            why = status_message(obj.get("code"), obj.get("reason"), obj)
            raise KubeError(f"watching {self._what}: the watch reported {why}")
        seen = raw.object_resource_version(obj) or version
        if kind == "BOOKMARK":
            return None, seen
        if kind not in ("ADDED", "MODIFIED", "DELETED") or raw.object_name(obj) != self._name:
            return None, version  # newer event types, or another object from a loose server
        self._set(None if kind == "DELETED" else obj, listed=False, version=seen)
        return None, seen

    def _set(self, obj: raw.Json | None, *, listed: bool, version: str = "") -> None:
        with self._changed:
            if version:
                self._delivered.append(version)
            if not listed and self._awaiting is not None and version != self._awaiting:
                return  # from before our own write, which the copy already holds
            self._awaiting = None
            self._current = obj
            if listed:
                self._synced.set()
            self._changed.notify_all()
        if self._on_change is None:
            return
        try:
            self._on_change(obj, listed)
        except Exception as exc:
            self._report(f"delivering {self._what} failed: {describe(exc)}")

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
