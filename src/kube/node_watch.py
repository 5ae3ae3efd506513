"""Follow one label (and optionally one annotation) on this node, from one watch of the node.

This replaces the reference's config-manager sidecar, which watched the node
with an informer and restarted the whole plugin with SIGHUP on a change. Here
the value is handed to a callback and the reconcile loop decides what the
change means, so a relabel reconfigures without a restart.

The node is kept current by an `ObjectWatch` (list once, then watches of 5-10
minutes resumed from the last resourceVersion, jittered backoff on errors);
this class only turns the node into the label's value. After every list the
current value is posted (a consumer that missed anything converges); after an
event only a changed value is, so the node's status heartbeats post nothing.

The plugin also reads a standing request from an annotation of the same node
(`nvidia.com/gpu.cordon`). It comes out of the same watch, with the same
rules (posted after every list, after an event only when it changed), so
following it costs no request of its own.
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
    """Posts the value of `label` on node `node_name` (None when absent) to `on_value`.

    With an `annotation` and `on_annotation`, that annotation's value is
    posted to `on_annotation` the same way, from the same watch.
    """

    def __init__(
        self,
        *,
        api: ApiAccess,
        node_name: str,
        label: str,
        on_value: Callable[[str | None], None],
        on_error: Callable[[str], None] | None = None,
        annotation: str = "",
        on_annotation: Callable[[str | None], None] | None = None,
        thread_name: str = "node-label-watch",
        **tuning: Unpack[WatchTuning],
    ) -> None:
        if not node_name:
            raise ValueError("node_name must not be empty")
        if not label:
            raise ValueError("label must not be empty")
        if bool(annotation) != (on_annotation is not None):
            raise ValueError("annotation and on_annotation go together")
        self._label = label
        self._on_value = on_value
        self._on_error = on_error
        self._annotation = annotation
        self._on_annotation = on_annotation
        self._last: str | None = None
        self._last_annotation: str | None = None
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
    def annotation(self) -> str:
        return self._annotation

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
        # The annotation goes first: a consumer that waits for the first label
        # value then has the annotation's too.
        if self._on_annotation is not None:
            noted = None if node is None else raw.object_annotations(node).get(self._annotation)
            if listed or noted != self._last_annotation:
                self._last_annotation = noted
                self._deliver(self._on_annotation, noted, f"annotation {self._annotation}")
        value = None if node is None else raw.object_labels(node).get(self._label)
        if listed or value != self._last:
            self._last = value
            self._deliver(self._on_value, value, "node label value")

    def _deliver(self, to: Callable[[str | None], None], value: str | None, what: str) -> None:
        try:
            to(value)
        except Exception as exc:
            if self._on_error is not None:
                # Nowhere left to report a failing reporter to.
                with contextlib.suppress(Exception):
                    self._on_error(f"delivering the {what} failed: {describe(exc)}")
