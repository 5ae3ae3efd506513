"""Follow one label on this node, from a watch of the node (`object_watch`).

This replaces the reference's config-manager sidecar, which watched the node
with an informer and restarted the whole plugin with SIGHUP on a change. Here
the value is handed to a callback and the reconcile loop decides what the
change means, so a relabel reconfigures without a restart.

The node is kept current by an `ObjectWatch` (list once, then watches of 5-10
minutes resumed from the last resourceVersion, jittered backoff on errors);
this class only turns the node into the label's value. After every list the
current value is posted (a consumer that missed anything converges); after an
event only a changed value is, so the node's status heartbeats post nothing.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Unpack

from kube import raw
from kube.client import ApiAccess
from kube.errors import describe
from kube.object_watch import DEFAULT_BACKOFF, ObjectWatch, WatchTuning

__all__ = ["DEFAULT_BACKOFF", "NodeLabelWatch"]


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
        thread_name: str = "node-label-watch",
        **tuning: Unpack[WatchTuning],
    ) -> None:
        if not node_name:
            raise ValueError("node_name must not be empty")
        if not label:
            raise ValueError("label must not be empty")
        self._label = label
        self._on_value = on_value
        self._on_error = on_error
        self._last: str | None = None
        self._watch = ObjectWatch(
            api=api,
            collection=raw.NODES,
            name=node_name,
            on_change=self._changed,
            on_error=on_error,
            thread_name=thread_name,
            **tuning,
        )

    @property
    def node_name(self) -> str:
        return self._watch.name

    @property
    def label(self) -> str:
        return self._label

    @property
    def running(self) -> bool:
        return self._watch.running

    @property
    def object_watch(self) -> ObjectWatch:
        """The node's watch: its `current()` copy serves readers of other fields."""
        return self._watch

    def start(self) -> None:
        """Start the watch thread (once)."""
        self._watch.start()

    def stop(self, timeout: float | None = 5.0) -> bool:
        """Ask the thread to end and wait up to `timeout`; True when it has ended."""
        return self._watch.stop(timeout)

    def _changed(self, node: raw.Json | None, listed: bool) -> None:
        value = None if node is None else raw.object_labels(node).get(self._label)
        if not listed and value == self._last:
            return
        self._last = value
        try:
            self._on_value(value)
        except Exception as exc:
            if self._on_error is not None:
                # Nowhere left to report a failing reporter to.
                with contextlib.suppress(Exception):
                    self._on_error(f"delivering the node label value failed: {describe(exc)}")
