"""Write a set of node labels under one prefix, removing the ones no longer produced.

The GPU feature labeller publishes its labels straight onto this node. Each
run produces the complete set it owns, so anything under its prefix that the
new set no longer contains is stale (a GPU was removed, MIG was turned off)
and is deleted. The change is one JSON merge patch: a null value removes a
key, other keys are set, labels outside the prefix are never touched.

Some keys under `nvidia.com/` belong to other components: the config label an
administrator sets to pick this node's configuration (which the plugin itself
watches), the MIG manager's request and state, the GPU operator's deploy
switches. Those prefixes are in `DEFAULT_KEEP` and are never swept; the
labeller can still set them explicitly if it produces them.

The patch carries the node's resourceVersion from the read, so a concurrent
writer makes it fail with 409 Conflict instead of being overwritten with a
stale view; the read-compute-patch is then retried a few times, after a short
jittered pause. Requests are bounded by `timeout`; failures raise `KubeError`.

`NodeLabelPublisher` is the labeller's long-lived form of the same: it keeps
its own Node current with a watch (`object_watch`) and compares every pass's
labels with that copy, so a pass that changes nothing sends nothing. Only a
difference costs a request (the PATCH), and only a conflict costs a GET.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field

from kube import raw
from kube.client import ApiAccess, close_client
from kube.errors import KubeError
from kube.object_watch import ObjectWatch
from kube.official import ApiClient, ApiException
from kube.pacing import DEFAULT_WATCH_TIMEOUTS, REAL_TIME, Clock, WatchTimeouts
from kube.watched_writer import WatchedWriter

DEFAULT_PREFIX = "nvidia.com/"
DEFAULT_KEEP: tuple[str, ...] = (
    "nvidia.com/device-plugin.config",
    "nvidia.com/mig.config",
    "nvidia.com/gpu.deploy.",
    "nvidia.com/gpu.present",
    "nvidia.com/gpu-driver-upgrade",
)
_CONFLICT = 409


@dataclass(frozen=True)
class LabelChange:
    """What a call changed on the node (both empty when it was already up to date)."""

    set: Mapping[str, str] = field(default_factory=dict)
    removed: tuple[str, ...] = ()

    @property
    def changed(self) -> bool:
        return bool(self.set or self.removed)


def patch_node_labels(
    api: ApiAccess,
    node_name: str,
    labels: Mapping[str, str | None],
    *,
    prefix: str = DEFAULT_PREFIX,
    keep: Collection[str] = DEFAULT_KEEP,
    timeout: float = 10.0,
    attempts: int = 3,
    current: Mapping[str, object] | None = None,
) -> LabelChange:
    """Make the node's labels under `prefix` equal `labels` (None values mean "absent").

    Every key in `labels` must start with `prefix`. Existing keys under the
    prefix that are not in `labels` are removed unless they start with one of
    `keep`. Nothing is sent when the node already matches. `current`, a copy
    of the node known to be recent (a watch's), saves the first GET.
    """
    client = api.new_client()
    try:
        change, _ = _converge(
            client,
            node_name,
            labels,
            prefix=prefix,
            keep=keep,
            bounds=(timeout, timeout),
            attempts=attempts,
            current=current,
        )
        return change
    finally:
        close_client(client)


def _converge(
    client: ApiClient,
    node_name: str,
    labels: Mapping[str, str | None],
    *,
    prefix: str,
    keep: Collection[str],
    bounds: raw.Timeout,
    attempts: int,
    current: Mapping[str, object] | None,
    pause: Callable[[int], None] = lambda attempt: None,
) -> tuple[LabelChange, raw.Json | None]:
    """Plan against `current` (or a fresh read), patch; the patched node when one was sent."""
    if not prefix:
        raise ValueError("prefix must not be empty: it bounds what may be removed")
    outside = sorted(key for key in labels if not key.startswith(prefix))
    if outside:
        raise ValueError(f"labels outside the prefix {prefix!r}: {', '.join(outside)}")
    if attempts < 1:
        raise ValueError("attempts must be at least 1")
    node = current
    for attempt in range(1, attempts + 1):
        if node is None:
            try:
                node = raw.read_node(client, node_name, timeout=bounds)
            except Exception as exc:
                raise KubeError.wrap(f"reading node {node_name}", exc) from exc
        change = _plan(raw.object_labels(node), labels, prefix=prefix, keep=keep)
        if not change.changed:
            return change, None
        body = _merge_patch(change, _resource_version(node))
        try:
            patched = raw.merge_patch_node(client, node_name, body, timeout=bounds)
        except ApiException as exc:
            if exc.status == _CONFLICT and attempt < attempts:
                node = None  # someone else wrote the node meanwhile: re-read, re-plan
                pause(attempt)
                continue
            raise KubeError.wrap(f"labelling node {node_name}", exc) from exc
        except Exception as exc:
            raise KubeError.wrap(f"labelling node {node_name}", exc) from exc
        return change, patched
    raise AssertionError("unreachable: the last attempt returns or raises")


class NodeLabelPublisher(WatchedWriter):
    """The labeller's labels on its own Node, compared with a watched copy of the node.

    `apply` is called from one thread (the labelling loop); the watch runs in
    its own. Until the first list has succeeded (`sync_timeout` on the first
    call), while the copy has no node, and after a conflict, the node is read
    with a GET instead. A `watch` of the same node that another reader keeps
    (the config label's) is borrowed, not started or stopped here, so one
    watch serves both.
    """

    def __init__(
        self,
        api: ApiAccess,
        node_name: str,
        *,
        prefix: str = DEFAULT_PREFIX,
        keep: Collection[str] = DEFAULT_KEEP,
        timeout: float = 10.0,
        attempts: int = 3,
        sync_timeout: float = 3.0,
        on_error: Callable[[str], None] | None = None,
        watch_timeouts: WatchTimeouts = DEFAULT_WATCH_TIMEOUTS,
        clock: Clock = REAL_TIME,
        rng: random.Random | None = None,
        watch: ObjectWatch | None = None,
    ) -> None:
        if watch is not None and watch.name != node_name:
            raise ValueError(f"the watch is of node {watch.name}, not {node_name}")
        super().__init__(
            api,
            collection=raw.NODES,
            name=node_name,
            thread_name="gfd-node-watch",
            sync_timeout=sync_timeout,
            on_error=on_error,
            watch_timeouts=watch_timeouts,
            clock=clock,
            rng=rng,
            watch=watch,
        )
        self._node = node_name
        self._prefix = prefix
        self._keep = tuple(keep)
        self._timeout = timeout
        self._attempts = attempts

    def apply(self, labels: Mapping[str, str | None]) -> LabelChange:
        """Converge the node's labels under the prefix; sends nothing when they match.

        Raises:
            KubeError: the node could not be read or patched (one line).
        """
        client = self._connected()
        # No copy yet, or no node in it (it may be younger than the copy): read it.
        current = self._watch.current() if self._synced() else None
        change, patched = _converge(
            client,
            self._node,
            labels,
            prefix=self._prefix,
            keep=self._keep,
            bounds=(self._timeout, self._timeout),
            attempts=self._attempts,
            current=current,
            pause=self._pause,
        )
        if patched is not None:
            self._watch.observe(patched)
        return change


def _plan(
    current: Mapping[str, str],
    wanted: Mapping[str, str | None],
    *,
    prefix: str,
    keep: Collection[str],
) -> LabelChange:
    to_set = {
        key: value
        for key, value in sorted(wanted.items())
        if value is not None and current.get(key) != value
    }
    explicit_removals = {key for key, value in wanted.items() if value is None}
    stale = {
        key
        for key in current
        if key.startswith(prefix)
        and key not in wanted
        and not any(key.startswith(kept) for kept in keep)
    }
    removed = tuple(sorted(key for key in explicit_removals | stale if key in current))
    return LabelChange(set=to_set, removed=removed)


def _merge_patch(change: LabelChange, resource_version: str) -> raw.Json:
    labels: dict[str, str | None] = dict(change.set)
    labels.update(dict.fromkeys(change.removed))
    metadata: raw.Json = {"labels": labels}
    if resource_version:
        metadata["resourceVersion"] = resource_version
    return {"metadata": metadata}


def _resource_version(node: Mapping[str, object]) -> str:
    metadata = node.get("metadata")
    if isinstance(metadata, Mapping):
        return str(metadata.get("resourceVersion") or "")
    return ""
