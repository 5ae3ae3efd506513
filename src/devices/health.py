"""Health events from the devices, and the threads that watch for them.

A health source watches every GPU of one inventory from ONE named daemon
thread and hands each `HealthEvent` to a `post` callback, the only thing that
crosses from that thread to the reconcile loop. Two sources exist: the NVML
event loop (`health_nvml`, XID and double-bit ECC events) and, for the
simulated backend, a follower of a JSON-lines file that people append faults
to (`simulated_events`); `backends.open_health_source` picks one. Both
obey the same rules, which is why they share `ThreadedSource`:

- every blocking call is bounded (about a second), so `stop()` is honoured
  promptly and `join` never hangs;
- a failure of one device's NVML calls is an event about that device only;
- losing the event stream is a `degraded` event (and `restored` when it comes
  back), never "every GPU is unhealthy";
- an exception escaping the thread is posted as `degraded`, never lost;
- a GPU whose events cannot be had is reported `unmonitored` (and `watched`
  if that changes), so it is visible rather than silently unwatched; this
  says nothing about the GPU's health. A new source reports afresh.

Events say what a device reported; deciding what that means (which XIDs are
transient, which need a reset, when a device is healthy again) is the health
machine's job in `states.health`. The XID filter of `DP_DISABLE_HEALTHCHECKS`
/ `DP_ENABLE_HEALTHCHECKS` is applied here, at the source, as the reference
plugin does; the caller passes the policy in, nothing here reads the
environment.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol

from loguru import logger


class EventKind(StrEnum):
    XID = "xid"  # an XID critical error (`xid` set)
    ECC = "ecc"  # a double-bit (uncorrectable) ECC error
    LOST = "lost"  # the device's NVML calls fail
    FOUND = "found"  # ... and work again
    RESET = "reset"  # the device was reset (simulated backend)
    DEGRADED = "degraded"  # the event stream itself failed; `uuid` is empty
    RESTORED = "restored"  # the event stream works again
    DISABLED = "disabled"  # nothing is watched (health checks off, or nothing to watch)
    UNMONITORED = "unmonitored"  # this GPU cannot be watched for events; `detail` says why
    WATCHED = "watched"  # ... and now it is (a later registration worked)


MONITORING_KINDS = frozenset({EventKind.DEGRADED, EventKind.RESTORED, EventKind.DISABLED})


@dataclass(frozen=True)
class HealthEvent:
    """One thing a device (or the watcher) reported.

    `uuid` is a GPU or MIG UUID. An event on a GPU UUID with `gi`/`ci` set
    concerns the MIG devices of that GPU instance / compute instance only;
    with both None it concerns the whole GPU. `at` is `time.monotonic()`.
    """

    kind: EventKind
    uuid: str = ""
    xid: int | None = None
    gi: int | None = None
    ci: int | None = None
    detail: str = ""
    at: float = field(default_factory=time.monotonic)

    @property
    def reason(self) -> str:
        """Short reason for status and metrics: `xid 79`, `double-bit ECC error`, `lost`."""
        if self.kind is EventKind.XID:
            return f"xid {self.xid}"
        if self.kind is EventKind.ECC:
            return "double-bit ECC error"
        return str(self.kind)

    def describe(self) -> str:
        """One line for logs: reason, where, and the detail."""
        where = self.uuid or "health watcher"
        if self.gi is not None or self.ci is not None:
            where += f" (GI {self.gi}, CI {self.ci})"
        tail = f": {self.detail}" if self.detail else ""
        return f"{self.reason} on {where}{tail}"


Post = Callable[[HealthEvent], None]


class HealthSource(Protocol):
    """A watcher of one inventory's devices."""

    @property
    def name(self) -> str: ...

    @property
    def running(self) -> bool:
        """Whether its thread runs (read from any thread)."""
        ...

    def start(self, post: Post) -> None:
        """Start the one watching thread; `post` is called from that thread."""
        ...

    def stop(self, timeout: float = 5.0) -> bool:
        """Ask the thread to stop and join it; True when it has ended."""
        ...


class ThreadedSource:
    """One named daemon thread, a stop flag, and a guard that turns a crash into an event."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def name(self) -> str:
        return self._name

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self, post: Post) -> None:
        if self._thread is not None:
            raise RuntimeError(f"{self._name} was already started")
        self._thread = threading.Thread(
            target=self._guarded, args=(post,), name=self._name, daemon=True
        )
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> bool:
        self._stopping.set()
        if self._thread is None:
            return True
        self._thread.join(timeout)
        if self._thread.is_alive():
            logger.warning("{} did not stop within {:.1f}s", self._name, timeout)
            return False
        return True

    def _guarded(self, post: Post) -> None:
        try:
            self._run(post)
        except Exception as exc:
            logger.exception("{} crashed", self._name)
            post(HealthEvent(EventKind.DEGRADED, detail=f"{self._name} crashed: {exc}"))

    def _run(self, post: Post) -> None:
        raise NotImplementedError


class NullSource:
    """Watches nothing; says so once, so the status can tell "off" from "all fine"."""

    def __init__(self, reason: str) -> None:
        self.reason = reason

    @property
    def name(self) -> str:
        return "health-off"

    @property
    def running(self) -> bool:
        return False  # no thread: nothing is watched

    def start(self, post: Post) -> None:
        # Logged once, at INFO, by the health book that receives the event.
        logger.debug("device health checks are off: {}", self.reason)
        post(HealthEvent(EventKind.DISABLED, detail=self.reason))

    def stop(self, timeout: float = 5.0) -> bool:
        return True


class EventQueue:
    """A bounded, thread-safe hand-over from a source thread to the loop.

    `put` is a valid `post` callback; `notify` (e.g. a mailbox's
    `post_threadsafe`) wakes the loop, which then `take`s everything. In an
    event storm the oldest events are dropped first and counted: the newest
    error is the one that decides the quiet period.
    """

    def __init__(self, notify: Callable[[], None] = lambda: None, *, limit: int = 10_000) -> None:
        self._notify = notify
        self._lock = threading.Lock()
        self._events: deque[HealthEvent] = deque(maxlen=limit)
        self.dropped = 0

    def put(self, event: HealthEvent) -> None:
        with self._lock:
            if len(self._events) == self._events.maxlen:
                self.dropped += 1
            self._events.append(event)
        self._notify()

    def take(self) -> list[HealthEvent]:
        with self._lock:
            taken = list(self._events)
            self._events.clear()
        return taken
