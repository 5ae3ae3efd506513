"""Write the node's ResourceSlices so the API holds exactly what the plugin publishes.

In DRA mode the node's devices are announced in ResourceSlices
(`resources.dra_slices` builds them). `SlicePublisher` makes the API hold
exactly those, and nothing else of this driver for this node. It is a writer
over a watch, not a second reconciler: the plugin's loop decides when to
write (`pending()`, in memory, each pass) and retries a failed write on its
own per-key backoff, so every actuator's state and retries are in one place;
`write()` (blocking, run in a thread) makes one attempt and says how it went.

- **Differences only, from a watch.** What the API holds comes from a resumed
  watch (`slice_watch`), so writing what is there sends nothing and a steady
  node costs only the watch's renewals; a difference costs one create, update
  (PUT with the resourceVersion read) or delete per slice. What to write, and
  the pool's generation, follow `slice_plan`'s rules; `slice_writes` sends
  it, obsolete slices first, so a device that went away is never offered
  meanwhile.
- **Other writers.** A slice of this driver on this node that someone edits,
  deletes or adds is seen by the watch, which calls `on_change`: the plugin's
  next pass finds `pending()` true and its write puts the slice back or
  removes it. Slices of other drivers or nodes are never touched: the
  watch's field selector never shows them, and every write is checked
  against the slice's driver and node.
- **Failures** (the API server down, 403, 5xx) raise `KubeError`, one line
  naming the slice and the action, kept in `state().error` until a write
  succeeds. Only a 409 Conflict is retried here: the slice is re-read and
  planned again after a short jittered pause. The watch's failure and its
  recovery (its first list after an outage) call `on_change` too.
- `write(None)` deletes every slice of this driver on this node (the node
  goes back to the device plugin); `close()` leaves them, so a restarted
  plugin finds its slices and writes nothing.

The API server's version (`read_version`, `GET /version`) decides where
counter sets go (`resources.dra_slices.counters_apart`). It is read once per
API connection, on the caller's thread like a write: first, and again once
the watch lists anew after an outage (the server may come back upgraded).
Only a node that publishes counter sets asks for it; an unreadable version
is read again when a write in the older layout fails (`forget_version`).

`write` sets the slices' `pool.generation` and owner reference (the owner
from `node_uid`, or from one GET of the Node). When none of our slices is
left after we created some (the Node was deleted and the garbage collector
took its slices, or we withdrew them), the Node is read again before
anything is created: slices owned by a Node that is gone would only be
collected again, and a Node made again under the same name has a new uid.

Watch length: the slices change only when the plugin writes them; the watch
is there to see other writers, and its length costs nothing in freshness.
45-90 minute watches (about 0.9 requests an hour) keep a DRA node (its
config-label watch about 8, its labeller about 2.7) within the budget of 12
requests per node and hour (`make bench`, `api` rows).
"""

from __future__ import annotations

import contextlib
import enum
import random
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kube import raw, slice_plan, slice_writes
from kube.client import ApiAccess, close_client
from kube.errors import KubeError
from kube.official import ApiClient
from kube.pacing import REAL_TIME, Clock, WatchTimeouts, jittered
from kube.server_version import ServerVersion, read_server_version
from kube.slice_watch import SliceWatch
from kube.watched_writer import CONFLICT_BACKOFF

__all__ = ["DRA_WATCH_TIMEOUTS", "Goal", "SlicePublisher", "SliceState"]

DRA_WATCH_TIMEOUTS = WatchTimeouts(2700, 5400)
_ATTEMPTS = 5  # plans per write that may meet a conflict before the write fails


class Goal(enum.Enum):
    NONE = "none"  # nothing written yet: the API is left as it is
    PUBLISH = "publish"
    WITHDRAW = "withdraw"


@dataclass(frozen=True)
class SliceState:
    """Where the slices stand: what was last written, and whether the API still holds it."""

    goal: Goal = Goal.NONE
    converged: bool = False
    generation: int = 0  # the pool's generation as watched (0: no pool)
    slices: int = 0  # slices the API holds for this driver and node, as watched
    devices: int = 0
    error: str = ""  # the last write's failure until a write succeeds, else the watch's


@dataclass(frozen=True)
class _Compared:
    wanted: tuple[raw.Json, ...]
    held: dict[str, raw.Json]
    owner: str
    differs: bool


class SlicePublisher:
    """The ResourceSlices of `driver` on `node_name`: compared in memory, written on demand."""

    def __init__(
        self,
        api: ApiAccess,
        *,
        node_name: str,
        driver: str,
        node_uid: str = "",
        on_change: Callable[[], None] | None = None,
        timeout: float = 10.0,
        watch_timeouts: WatchTimeouts = DRA_WATCH_TIMEOUTS,
        sync_timeout: float = 10.0,
        clock: Clock = REAL_TIME,
        rng: random.Random | None = None,
    ) -> None:
        self._api = api
        self._node = node_name
        self._driver = driver
        self._what = f"ResourceSlices of driver {driver} on node {node_name}"
        self._on_change = on_change
        self._bounds: raw.Timeout = (timeout, timeout)
        self._sync_timeout = sync_timeout
        self._clock = clock
        self._rng = rng if rng is not None else random.Random()
        # One write at a time; the client and the owner's uid belong to the writer.
        self._write_lock = threading.Lock()
        self._client: ApiClient | None = None
        self._created = False  # slices were created under the owner's uid before
        self._closed = threading.Event()
        # What `state()` and `pending()` read, written by the writer and the watch thread.
        self._lock = threading.Lock()
        self._listed = threading.Condition(self._lock)
        self._uid = node_uid
        self._goal = Goal.NONE
        self._wanted: tuple[raw.Json, ...] | None = None  # of the last write (None: withdraw)
        self._write_error = ""  # of the last write that failed, until one succeeds
        self._watch_error = ""
        self._lists = 0  # lists the watch made: the first, then one after each outage or 410
        self._memo: _Compared | None = None  # the last comparison, replaced whole
        self._version: ServerVersion | None = None  # the server's, as last read
        self._version_read: int | None = None  # the watch's list count then (None: never)
        self._watch = SliceWatch(
            api=api,
            node=node_name,
            driver=driver,
            watch_timeouts=watch_timeouts,
            on_change=self._watched,
            on_error=self._watch_failed,
            clock=clock,
            rng=self._rng,
        )

    # -- what callers use --------------------------------------------------------

    def start(self) -> None:
        """Start the watch (its own thread); writing needs its first list."""
        self._watch.start()

    @property
    def watching(self) -> bool:
        """Whether the watch's thread runs (read from any thread)."""
        return self._watch.running

    @property
    def closed(self) -> bool:
        """Whether `close` was called: a watch that is not running then ended as asked."""
        return self._closed.is_set()

    def pending(self, slices: Sequence[Mapping[str, Any]] | None) -> bool:
        """Whether `write(slices)` has anything to do, from the watched copy (no request).

        True before the watch's first list, and for slices `write` would refuse
        (so the write is made and says why). None asks whether any slice of
        ours is left.
        """
        if not self._watch.synced:
            return True
        try:
            return self._differs(slices, self._watch.items())
        except ValueError:
            return True

    def write(
        self, slices: Sequence[Mapping[str, Any]] | None, *, list_timeout: float | None = None
    ) -> SliceState:
        """Make the API hold exactly `slices` (`dra_slices.pack`'s objects); None: none of ours.

        Blocking: waits up to `list_timeout` (default `sync_timeout`) for the
        watch's first list, then writes the differences. One attempt: a
        failure is raised, not retried (only conflicts plan again).

        Raises:
            ValueError: a slice is for another driver, node or pool, or two share a name.
            KubeError: the slices could not be listed or written (one line).
        """
        wanted = (
            None
            if slices is None
            else tuple(slice_plan.checked(slices, node=self._node, driver=self._driver))
        )
        with self._write_lock:
            with self._lock:
                self._goal = Goal.WITHDRAW if wanted is None else Goal.PUBLISH
                self._wanted = wanted
            try:
                self._wait_listed(self._sync_timeout if list_timeout is None else list_timeout)
                self._converge(wanted)
            except KubeError as exc:
                self._failed(str(exc))
                raise
            except Exception as exc:
                failure = KubeError.wrap(f"writing {self._what}", exc)
                self._failed(str(failure))
                raise failure from exc
            finally:
                if self._closed.is_set():
                    self._drop_client()  # `close` found this write running
            with self._lock:
                self._write_error = ""
        return self.state()

    def state(self) -> SliceState:
        held = self._watch.items()
        items = list(held.values())
        with self._lock:
            goal, wanted, failed = self._goal, self._wanted, self._write_error
            error = failed or self._watch_error
        # What was last written is what the API holds (as watched), and that write did not fail.
        converged = (
            goal is not Goal.NONE
            and not failed
            and self._watch.synced
            and not self._differs(wanted, held)
        )
        in_pool = [obj for obj in items if _pool_name(obj) == self._node]
        return SliceState(
            goal=goal,
            converged=converged,
            generation=max((slice_plan.pool_generation(obj) for obj in in_pool), default=0),
            slices=len(items),
            devices=sum(len(raw.mapping_at(obj, "spec").get("devices") or ()) for obj in items),
            error=error,
        )

    @property
    def lists(self) -> int:
        """How many times the watch has listed: a new list after an outage says the server
        answers again, so a caller waiting out a backoff may write at once."""
        with self._lock:
            return self._lists

    # -- the server's version ----------------------------------------------------

    def version_due(self) -> bool:
        """Whether the server's version is to be read (from any thread; no request).

        Once per API connection: before the first read, and once the watch has
        listed anew since (after an outage: the server may have been upgraded).
        """
        with self._lock:
            return self._version_read != _connection(self._lists)

    @property
    def server_version(self) -> ServerVersion | None:
        """The version the last `read_version` found; None: not read, or unreadable."""
        with self._lock:
            return self._version

    def read_version(self) -> ServerVersion:
        """Read the API server's version (blocking: run in a thread).

        A failure is not retried before the watch lists anew (or
        `forget_version`); meanwhile `server_version` is None.

        Raises:
            KubeError: it could not be read (one line).
        """
        with self._write_lock:
            with self._lock:
                connection = _connection(self._lists)
            version: ServerVersion | None = None
            try:
                if self._closed.is_set():
                    raise KubeError("reading the API server's version: the publisher is closed")
                version = read_server_version(self._connected(), timeout=self._bounds)
            except KubeError:
                raise
            except Exception as exc:  # making the client
                raise KubeError.wrap("reading the API server's version", exc) from exc
            finally:
                with self._lock:
                    self._version, self._version_read = version, connection
        return version

    def forget_version(self) -> None:
        """Make the version due again (a write its unread version's layout failed)."""
        with self._lock:
            self._version_read = None

    def holds_none(self) -> bool:
        """Listed, and no slice of this driver on this node in the watched copy."""
        return self._watch.synced and not self._watch.items()

    def close(self, timeout: float = 5.0) -> bool:
        """Stop the watch (a write in progress ends early); the slices stay as they are."""
        deadline = time.monotonic() + timeout
        self._closed.set()
        with self._listed:
            self._listed.notify_all()
        stopped = self._watch.stop(timeout)
        if not self._write_lock.acquire(timeout=max(0.0, deadline - time.monotonic())):
            return False  # the write in progress drops the client when it ends
        try:
            self._drop_client()
        finally:
            self._write_lock.release()
        return stopped

    # -- writing -----------------------------------------------------------------

    def _differs(
        self, slices: Sequence[Mapping[str, Any]] | None, held: dict[str, raw.Json]
    ) -> bool:
        """Whether `held` (the watched copy) differs from what `write(slices)` would make.

        Planning a pool of a few hundred devices copies it (tens of
        milliseconds), and the loop asks every pass, on its event loop: the
        answer is kept until the slices, the watched copy or the owner change.
        Comparing the slices is cheap; the watch replaces a slice it sees
        change, never edits it, so the copy is compared by identity.

        Raises:
            ValueError: `slices` are not a valid set of this node's slices.
        """
        if slices is None:
            return bool(held)
        with self._lock:
            owner = self._uid
        memo = self._memo
        if (
            memo is not None
            and memo.owner == owner
            and _same_objects(memo.held, held)
            and tuple(slices) == memo.wanted
        ):
            return memo.differs
        wanted = tuple(slice_plan.checked(slices, node=self._node, driver=self._driver))
        plan = slice_plan.plan(wanted, held, node=self._node, driver=self._driver, owner_uid=owner)
        self._memo = _Compared(wanted, held, owner, not plan.empty)
        return not plan.empty

    def _wait_listed(self, timeout: float) -> None:
        with self._listed:
            self._listed.wait_for(lambda: self._watch.synced or self._closed.is_set(), timeout)
            why = self._watch_error
        if self._closed.is_set():
            raise KubeError(f"writing {self._what}: the publisher is closed")
        if not self._watch.synced:
            why = why or f"no answer within {timeout:g} s"
            raise KubeError(f"ResourceSlices of node {self._node} not listed yet: {why}")

    def _converge(self, wanted: tuple[raw.Json, ...] | None) -> None:
        """Plan against the watched copy and write the differences; conflicts plan again."""
        client = self._connected()
        owner = "" if wanted is None else self._owner(client, again=not self._watch.items())
        for attempt in range(1, _ATTEMPTS + 1):
            plan = slice_plan.plan(
                wanted, self._watch.items(), node=self._node, driver=self._driver, owner_uid=owner
            )
            try:
                slice_writes.apply(client, plan, self._watch, self._bounds)
            except slice_writes.Conflict as conflict:
                if attempt == _ATTEMPTS:
                    raise KubeError(
                        f"writing ResourceSlice {conflict.name}: still conflicting after "
                        f"{_ATTEMPTS} attempts",
                        status=slice_writes.CONFLICT,
                    ) from None
                slice_writes.refresh(client, conflict.name, self._watch, self._bounds)
                pause = jittered(CONFLICT_BACKOFF, attempt - 1, self._rng)
                if self._clock.wait(self._closed, pause):
                    raise KubeError(f"writing {self._what}: the publisher is closed") from None
                continue
            self._created = self._created or bool(plan.creates)
            return

    def _owner(self, client: ApiClient, *, again: bool) -> str:
        """The Node's uid; read (again, when `again` and slices were created before) if unsure."""
        with self._lock:
            uid = self._uid
        if not uid or (again and self._created):
            try:
                node = raw.read_node(client, self._node, timeout=self._bounds)
            except Exception as exc:
                raise KubeError.wrap(f"reading node {self._node}", exc) from exc
            uid = str(raw.object_metadata(node).get("uid") or "")
            with self._lock:
                self._uid = uid
            self._created = False
        return uid

    def _failed(self, message: str) -> None:
        with self._lock:
            self._write_error = message

    def _connected(self) -> ApiClient:
        if self._client is None:
            self._client = self._api.new_client()
        return self._client

    def _drop_client(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            with contextlib.suppress(Exception):  # closing: nothing left to tell
                close_client(client)

    # -- the watch's reports (on its thread) --------------------------------------

    def _watched(self, listed: bool) -> None:
        if listed:
            with self._listed:
                self._watch_error = ""  # a list: the server answers again
                self._lists += 1
                self._listed.notify_all()
        self._hint()

    def _watch_failed(self, message: str) -> None:
        with self._lock:
            changed, self._watch_error = message != self._watch_error, message
        if changed:
            self._hint()

    def _hint(self) -> None:
        if self._on_change is None:
            return
        # A hint the plugin cannot take is lost, not reported back through the
        # watch (which would call here again): its next pass still compares.
        with contextlib.suppress(Exception):
            self._on_change()


def _connection(lists: int) -> int:
    """Which API connection a list count stands for: the first list is the first connection's."""
    return max(lists, 1)


def _pool_name(obj: Mapping[str, Any]) -> object:
    return raw.mapping_at(raw.mapping_at(obj, "spec"), "pool").get("name")


def _same_objects(before: Mapping[str, object], now: Mapping[str, object]) -> bool:
    return before.keys() == now.keys() and all(before[name] is obj for name, obj in now.items())
