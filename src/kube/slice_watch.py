"""Keep the node's ResourceSlices of one driver current: list once, then watch and resume.

The slice publisher compares what it wants published with what the API
holds. It asks this cache, not the server, so a node whose devices did not
change sends nothing but the watch's own renewals, and a slice someone else
edits or deletes is seen as soon as the event arrives (and put back by the
plugin's next write, which the publisher's `on_change` asks for).

This is `ObjectWatch`'s loop (list with a field selector, watch with
bookmarks, resume from the last resourceVersion, relist only after 410 Gone
or a failure, jittered backoff, bounded requests, a `stop()` that cuts the
connection) over a set of objects instead of one: the field selector is
`spec.nodeName=<node>,spec.driver=<driver>`, the copy maps slice names to
slices, and a slice that no longer matches (a real server reports it DELETED
to a watch whose selector it left) leaves the copy. Only the list and the
events differ from the single-object watch, so only those are overridden.

Writes of the publisher are taken into the copy at once (`observe`,
`forget`); events from before such a write that are still in flight are not
applied over it, as in `ObjectWatch.observe`, so the copy never goes back to
a state the publisher already changed.

`on_change(listed)` runs on the watch thread after every list (`listed`) and
after every event that changed the copy.
"""

from __future__ import annotations

import collections
import random
import threading
from collections.abc import Callable, Mapping
from typing import Any

from kube import raw, slice_plan
from kube.client import ApiAccess
from kube.errors import KubeError, describe, status_message
from kube.object_watch import DEFAULT_BACKOFF, ObjectWatch, _Ending
from kube.official import ApiClient
from kube.pacing import REAL_TIME, Clock, WatchTimeouts

__all__ = ["SliceWatch"]

_GONE = 410


class SliceWatch(ObjectWatch):
    """A thread keeping the ResourceSlices of `driver` on `node` current; read with `items()`."""

    def __init__(
        self,
        *,
        api: ApiAccess,
        node: str,
        driver: str,
        watch_timeouts: WatchTimeouts,
        on_change: Callable[[bool], None] | None = None,
        on_error: Callable[[str], None] | None = None,
        clock: Clock = REAL_TIME,
        rng: random.Random | None = None,
        read_timeout: float = 30.0,
        min_relist_interval: float = 1.0,
    ) -> None:
        if not node or not driver:
            raise ValueError("node and driver must not be empty")
        super().__init__(
            api=api,
            collection=raw.RESOURCE_SLICES,
            name=f"{driver}@{node}",
            on_error=on_error,
            watch_timeouts=watch_timeouts,
            read_timeout=read_timeout,
            backoff=DEFAULT_BACKOFF,
            min_relist_interval=min_relist_interval,
            clock=clock,
            rng=rng,
            thread_name="dra-slice-watch",
        )
        self._node = node
        self._driver = driver
        self._selector = f"spec.nodeName={node},spec.driver={driver}"
        self._what = f"ResourceSlices of driver {driver} on node {node}"
        self._notify = on_change
        self._items_lock = threading.Lock()
        self._items: dict[str, raw.Json] = {}
        self._pending: dict[str, str] = {}  # name -> resourceVersion of our write, until seen
        self._seen: collections.deque[str] = collections.deque(maxlen=256)  # delivered versions

    def items(self) -> dict[str, raw.Json]:
        """The slices as last seen, by name (empty before the first list; see `synced`)."""
        with self._items_lock:
            return dict(self._items)

    def ours(self, obj: Mapping[str, Any]) -> bool:
        """Whether `obj` is a slice of this watch's driver on its node."""
        return slice_plan.ours(obj, node=self._node, driver=self._driver)

    def observe(self, obj: raw.Json) -> None:
        """Take a slice our own create or update returned, before its event arrives."""
        name = raw.object_name(obj)
        version = raw.object_resource_version(obj)
        if not name:
            return
        with self._items_lock:
            if version and version in self._seen:
                return  # the watch was quicker: the copy holds this write, or newer
            if self.ours(obj):
                self._items[name] = obj
            else:
                self._items.pop(name, None)
            if version:
                self._pending[name] = version

    def forget(self, name: str) -> None:
        """Drop a slice our own delete removed (or found already gone)."""
        with self._items_lock:
            self._items.pop(name, None)
            self._pending.pop(name, None)

    # -- the list and the events (the loop is ObjectWatch's) -------------------

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
        # Checked again here: a proxy or a mock that ignores the selector must not
        # make another driver's or node's slices look like ours.
        found = {raw.object_name(item): item for item in items if self.ours(item)}
        with self._items_lock:
            self._items = found
            self._pending.clear()
        self._synced.set()
        self._deliver(listed=True)
        return version

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
        name = raw.object_name(obj)
        if kind not in ("ADDED", "MODIFIED", "DELETED") or not name:
            return None, version
        with self._items_lock:
            if seen:
                self._seen.append(seen)
            awaited = self._pending.get(name)
            if awaited is not None and seen != awaited:
                return None, seen  # from before our own write, which the copy already holds
            self._pending.pop(name, None)
            if kind == "DELETED" or not self.ours(obj):
                changed = self._items.pop(name, None) is not None
            else:
                changed = self._items.get(name) != obj
                self._items[name] = obj
        if changed:
            self._deliver(listed=False)
        return None, seen

    def _deliver(self, *, listed: bool) -> None:
        if self._notify is None:
            return
        try:
            self._notify(listed)
        except Exception as exc:
            self._report(f"delivering {self._what} failed: {describe(exc)}")
