"""Keep the node's ResourceSlices equal to what the plugin wants published, in a thread of its own.

In DRA mode the node's devices are announced in ResourceSlices
(`resources.dra_slices` builds them). `SlicePublisher` makes the API hold
exactly those, and nothing else of this driver for this node:

- **Differences only, from a watch.** What the API holds comes from a resumed
  watch (`slice_watch`), so publishing what is there sends nothing and a
  steady node costs only the watch's renewals; a difference costs one create,
  update (PUT with the resourceVersion read) or delete per slice. What to
  write, and the pool's generation, follow `slice_plan`'s rules; obsolete
  slices are deleted first, so a device that went away is never offered
  meanwhile.
- **Other writers.** A slice of this driver on this node that someone edits,
  deletes or adds is put back or removed when its event arrives. Slices of
  other drivers or nodes are never touched: the watch's field selector never
  shows them, and every write is checked against the slice's driver and node.
- **Failures** (the API server down, 403, 5xx) are reported through
  `on_error`, each distinct line once until a pass succeeds, and retried
  after a jittered, capped backoff; new wishes replace old ones and the last
  lands once the server answers (the watch's first list after an outage ends
  the wait). A 409 Conflict re-reads the slice and plans again after a short
  jittered pause.
- `withdraw()` deletes every slice of this driver on this node (the node goes
  back to the device plugin); `close()` leaves them, so a restarted plugin
  finds its slices and writes nothing.

`publish` and `withdraw` only record the wish and wake the thread; `state()`,
`on_state` and `wait_converged()` say when the API holds it. `publish` takes
`dra_slices.pack`'s objects; their `pool.generation` and owner reference are
set here (the owner from `node_uid`, or from one GET of the Node). When none
of our slices is left on the server after we published some (the Node was
deleted and the garbage collector took its slices, or we withdrew them), the
Node is read again before anything is created: slices owned by a Node that is
gone would only be collected again, and a Node made again under the same name
has a new uid.

Watch length: the slices change only when the publisher writes them; the
watch is there to see other writers, and its length costs nothing in
freshness. 45-90 minute watches (about 0.9 requests an hour) keep a DRA node
(its config-label watch about 8, its labeller about 2.7) within the budget of
12 requests per node and hour (`make bench`, `api` rows).
"""

from __future__ import annotations

import contextlib
import enum
import random
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from foundation.backoff import Backoff
from kube import raw, resource_api, slice_plan
from kube.client import ApiAccess, close_client
from kube.errors import KubeError, describe
from kube.object_watch import DEFAULT_BACKOFF
from kube.official import ApiClient, ApiException
from kube.pacing import REAL_TIME, Clock, WatchTimeouts, jittered
from kube.slice_watch import SliceWatch
from kube.watched_writer import CONFLICT_BACKOFF

__all__ = ["DRA_WATCH_TIMEOUTS", "Goal", "SlicePublisher", "SliceState"]

DRA_WATCH_TIMEOUTS = WatchTimeouts(2700, 5400)
_CONFLICT = 409
_NOT_FOUND = 404
_ATTEMPTS = 5  # plans per pass that may meet a conflict before the pass counts as failed


class Goal(enum.Enum):
    NONE = "none"  # nothing asked yet: the publisher leaves the API alone
    PUBLISH = "publish"
    WITHDRAW = "withdraw"


@dataclass(frozen=True)
class SliceState:
    """Where the publisher stands: what it was asked, and whether the API holds it."""

    goal: Goal = Goal.NONE
    converged: bool = False
    generation: int = 0  # the pool's generation as last written or found (0: no pool)
    slices: int = 0  # slices the API holds for this driver and node, as last seen
    devices: int = 0
    error: str = ""  # the last failure, until a pass succeeds


class _Conflict(Exception):
    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


class SlicePublisher:
    """The ResourceSlices of `driver` on `node_name`, kept equal to the last `publish`."""

    def __init__(
        self,
        api: ApiAccess,
        *,
        node_name: str,
        driver: str,
        node_uid: str = "",
        on_error: Callable[[str], None] | None = None,
        on_state: Callable[[SliceState], None] | None = None,
        timeout: float = 10.0,
        watch_timeouts: WatchTimeouts = DRA_WATCH_TIMEOUTS,
        backoff: Backoff = DEFAULT_BACKOFF,
        clock: Clock = REAL_TIME,
        rng: random.Random | None = None,
    ) -> None:
        self._api = api
        self._node = node_name
        self._driver = driver
        self._uid = node_uid
        self._created = False  # slices were created under `_uid` before
        self._on_error = on_error
        self._on_state = on_state
        self._bounds: raw.Timeout = (timeout, timeout)
        self._backoff = backoff
        self._clock = clock
        self._rng = rng if rng is not None else random.Random()
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._wake = threading.Event()
        self._closed = threading.Event()
        self._goal = Goal.NONE
        self._wanted: tuple[raw.Json, ...] = ()
        self._asked = 0  # bumped by every publish/withdraw, so a pass knows it is current
        self._state = SliceState()
        self._reported: set[str] = set()  # since the last success: each is told once
        self._report_lock = threading.Lock()
        self._failing = False
        self._client: ApiClient | None = None
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
        self._thread = threading.Thread(target=self._main, name="dra-slices", daemon=True)

    # -- what callers use --------------------------------------------------------

    def start(self) -> None:
        self._watch.start()
        self._thread.start()

    def publish(self, slices: Sequence[Mapping[str, Any]]) -> None:
        """Make the API hold exactly `slices` (`dra_slices.pack`'s objects) for this node.

        Raises:
            ValueError: a slice is for another driver, node or pool, or two share a name.
        """
        wanted = tuple(slice_plan.checked(slices, node=self._node, driver=self._driver))
        with self._changed:
            self._goal, self._wanted = Goal.PUBLISH, wanted
            self._asked += 1
            changed = self._set_state(converged=False)
        self._wake.set()
        self._tell(changed)

    def withdraw(self) -> None:
        """Delete every slice of this driver on this node (and keep it so)."""
        with self._changed:
            self._goal, self._wanted = Goal.WITHDRAW, ()
            self._asked += 1
            changed = self._set_state(converged=False)
        self._wake.set()
        self._tell(changed)

    def state(self) -> SliceState:
        with self._lock:
            return self._state

    def wait_converged(self, timeout: float) -> bool:
        """Wait until the API holds the last wish; False after `timeout` seconds."""
        with self._changed:
            return self._changed.wait_for(lambda: self._state.converged, timeout)

    def close(self, timeout: float = 5.0) -> bool:
        """Stop the thread and the watch; the slices stay as they are."""
        self._closed.set()
        self._wake.set()
        stopped = self._watch.stop(timeout)
        if self._thread.ident is not None:
            self._thread.join(timeout)
            stopped = stopped and not self._thread.is_alive()
        return stopped

    # -- the thread --------------------------------------------------------------

    def _main(self) -> None:
        try:
            self._loop()
        except BaseException as exc:
            # Last line of defence: the thread must end quietly, never with a traceback.
            what = f"ResourceSlices of driver {self._driver} on node {self._node}"
            self._report(f"publishing {what}: ended unexpectedly: {describe(exc)}")
        finally:
            if self._client is not None:
                close_client(self._client)
                self._client = None

    def _loop(self) -> None:
        failures = 0
        delay: float | None = None  # waiting out a backoff
        while not self._closed.is_set():
            if delay is None:
                self._wake.wait()
            else:
                self._clock.wait(self._wake, delay)
            if self._closed.is_set():
                return
            self._wake.clear()
            with self._lock:
                goal, wanted, asked = self._goal, self._wanted, self._asked
            if goal is Goal.NONE or not self._watch.synced:
                delay = None  # the watch's first list wakes us; it reports its own failures
                continue
            try:
                self._pass(goal, wanted)
            except Exception as exc:
                message = str(exc) if isinstance(exc, KubeError) else describe(exc)
                self._report(message)
                with self._changed:
                    self._failing = True
                    changed = self._set_state(converged=False, error=message)
                self._tell(changed)
                delay = jittered(self._backoff, failures, self._rng)
                failures += 1
                continue
            failures, delay = 0, None
            with self._report_lock:
                self._reported.clear()
            with self._changed:
                self._failing = False
                changed = self._set_state(converged=self._asked == asked, error="")
            self._tell(changed)

    def _pass(self, goal: Goal, wanted: tuple[raw.Json, ...]) -> None:
        """Plan against the watched copy and write the differences; conflicts plan again."""
        client = self._connected()
        owner = self._owner(client, again=not self._watch.items()) if goal is Goal.PUBLISH else ""
        for attempt in range(1, _ATTEMPTS + 1):
            plan = slice_plan.plan(
                wanted if goal is Goal.PUBLISH else None,
                self._watch.items(),
                node=self._node,
                driver=self._driver,
                owner_uid=owner,
            )
            try:
                self._apply(client, plan)
            except _Conflict as conflict:
                if attempt == _ATTEMPTS:
                    raise KubeError(
                        f"writing ResourceSlice {conflict.name}: still conflicting after "
                        f"{_ATTEMPTS} attempts",
                        status=_CONFLICT,
                    ) from None
                self._refresh(client, conflict.name)
                self._clock.wait(self._closed, jittered(CONFLICT_BACKOFF, attempt - 1, self._rng))
                continue
            self._created = self._created or bool(plan.creates)
            self._record_found(plan.generation)
            return

    def _apply(self, client: ApiClient, plan: slice_plan.Plan) -> None:
        """Obsolete slices go first, so a device that went away is never offered meanwhile."""
        for name in plan.deletes:
            with self._writing("deleting", name):
                self._delete(client, name)
        for body in plan.updates:
            name = raw.object_name(body)
            with self._writing("updating", name):
                updated = resource_api.replace_cluster_object(
                    client, raw.RESOURCE_SLICES, name, body, timeout=self._bounds
                )
            self._watch.observe(updated)
        for body in plan.creates:
            name = raw.object_name(body)
            with self._writing("creating", name):
                created = resource_api.create_cluster_object(
                    client, raw.RESOURCE_SLICES, body, timeout=self._bounds
                )
            self._watch.observe(created)

    @contextlib.contextmanager
    def _writing(self, action: str, name: str) -> Iterator[None]:
        """Conflicts (and an update of a slice deleted meanwhile) plan again; the rest fails."""
        try:
            yield
        except ApiException as exc:
            if exc.status == _CONFLICT:
                raise _Conflict(name) from None
            if exc.status == _NOT_FOUND and action == "updating":
                self._watch.forget(name)  # the next plan creates it
                raise _Conflict(name) from None
            raise KubeError.wrap(f"{action} ResourceSlice {name}", exc) from exc
        except Exception as exc:
            raise KubeError.wrap(f"{action} ResourceSlice {name}", exc) from exc

    def _delete(self, client: ApiClient, name: str) -> None:
        try:
            resource_api.delete_cluster_object(
                client, raw.RESOURCE_SLICES, name, timeout=self._bounds
            )
        except ApiException as exc:
            if exc.status != _NOT_FOUND:
                raise
        self._watch.forget(name)

    def _refresh(self, client: ApiClient, name: str) -> None:
        """Re-read one slice after a conflict, so the next plan starts from the server's."""
        try:
            obj = resource_api.get_cluster_object(
                client, raw.RESOURCE_SLICES, name, timeout=self._bounds
            )
        except Exception as exc:
            if isinstance(exc, ApiException) and exc.status == _NOT_FOUND:
                self._watch.forget(name)
                return
            raise KubeError.wrap(f"reading ResourceSlice {name}", exc) from exc
        if not slice_plan.ours(obj, node=self._node, driver=self._driver):
            spec = raw.mapping_at(obj, "spec")
            raise KubeError(
                f"ResourceSlice {name} belongs to driver {spec.get('driver')} on node "
                f"{spec.get('nodeName')}: left alone"
            )
        self._watch.observe(obj)

    def _owner(self, client: ApiClient, *, again: bool) -> str:
        """The Node's uid; read (again, when `again` and slices were created before) if unsure."""
        if not self._uid or (again and self._created):
            try:
                node = raw.read_node(client, self._node, timeout=self._bounds)
            except Exception as exc:
                raise KubeError.wrap(f"reading node {self._node}", exc) from exc
            self._uid = str(raw.object_metadata(node).get("uid") or "")
            self._created = False
        return self._uid

    def _connected(self) -> ApiClient:
        if self._client is None:
            self._client = self._api.new_client()
        return self._client

    # -- state and reports -------------------------------------------------------

    def _watched(self, listed: bool) -> None:
        # A list (the first, or after an outage) wakes a publisher waiting out a
        # backoff: the server is back. Events wake it only when it is not failing,
        # so a flood of them cannot turn failures into a tight loop.
        with self._lock:
            failing = self._failing
        if listed or not failing:
            self._wake.set()

    def _record_found(self, generation: int) -> None:
        items = list(self._watch.items().values())
        devices = sum(len(raw.mapping_at(obj, "spec").get("devices") or ()) for obj in items)
        with self._changed:
            changed = self._set_state(
                generation=generation if items else 0, slices=len(items), devices=devices
            )
        self._tell(changed)

    def _set_state(self, **changes: Any) -> bool:
        """Update the state (the lock is held); whether it changed, so `_tell` should follow."""
        state = SliceState(**{**self._state.__dict__, "goal": self._goal, **changes})
        if state == self._state:
            return False
        self._state = state
        self._changed.notify_all()
        return True

    def _tell(self, changed: bool) -> None:
        """Give `on_state` the state as it is now (the lock is not held, so it may call in)."""
        if not changed or self._on_state is None:
            return
        try:
            self._on_state(self.state())
        except Exception as exc:
            self._report(f"delivering the slice state failed: {describe(exc)}")

    def _watch_failed(self, message: str) -> None:
        self._report(message)
        with self._changed:
            changed = self._set_state(error=message)
        self._tell(changed)

    def _report(self, message: str) -> None:
        with self._report_lock:
            if message in self._reported:
                return
            if len(self._reported) >= 64:
                self._reported.clear()  # failures that keep changing: tell them again, bounded
            self._reported.add(message)
        if self._on_error is not None:
            # Nowhere left to report a failing reporter to; publishing must go on.
            with contextlib.suppress(Exception):
                self._on_error(message)
