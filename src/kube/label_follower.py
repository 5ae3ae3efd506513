"""This node's config label, for gpu-feature-discovery and the MPS control daemon.

The plugin, the labeller and the MPS daemon each pick their config from the
same ConfigMap directory by the same node label, so each has to know the
label's value. `follow_node_label` decides whether that is possible (a node
name and API access are needed; without them the label counts as unset, as
in the plugin) and, when it is, keeps the value current with one
`NodeLabelWatch`: a list, then watches resumed from the last resourceVersion,
so a quiet node costs a few requests an hour and no polling. Both callers
only read the value, so they take the labeller's long watches
(`pacing.LABELLER_WATCH_TIMEOUTS`, about 2.7 requests an hour).

The value is read from any thread (`value()`); a change is also handed to
`on_value` from the watch thread, so an asyncio loop can be woken with
``call_soon_threadsafe``. Nothing here logs: the reason selection is off
(`FollowOff`) and the watch's errors go back to the caller, which says them
in its own log once.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from loguru import logger

from foundation.errors import PluginError
from kube.client import ApiAccess, api_access
from kube.node_watch import NodeLabelWatch
from kube.object_watch import ObjectWatch
from kube.pacing import DEFAULT_WATCH_TIMEOUTS, REAL_TIME, Clock, WatchTimeouts

__all__ = ["FollowOff", "NodeLabelFollower", "follow_node_label", "start_node_label_follower"]


@dataclass(frozen=True)
class FollowOff:
    """Why the label cannot be followed; ``unusable`` when access is configured but broken."""

    reason: str
    unusable: bool = False


class NodeLabelFollower:
    """The latest value of ``label`` on node ``node_name`` (None: absent or not read yet)."""

    def __init__(
        self,
        *,
        api: ApiAccess,
        node_name: str,
        label: str,
        on_value: Callable[[str | None], None] | None = None,
        on_error: Callable[[str], None] | None = None,
        watch_timeouts: WatchTimeouts = DEFAULT_WATCH_TIMEOUTS,
        clock: Clock = REAL_TIME,
        thread_name: str = "node-label-watch",
    ) -> None:
        self.source = api.source
        self._on_value = on_value
        self._lock = threading.Lock()
        self._value: str | None = None
        self._first = threading.Event()
        self._watch = NodeLabelWatch(
            api=api,
            node_name=node_name,
            label=label,
            on_value=self._seen,
            on_error=on_error,
            watch_timeouts=watch_timeouts,
            clock=clock,
            thread_name=thread_name,
        )

    @property
    def node_name(self) -> str:
        return self._watch.node_name

    @property
    def label(self) -> str:
        return self._watch.label

    @property
    def object_watch(self) -> ObjectWatch:
        """The watch of the node itself, for a reader that needs more than the label."""
        return self._watch.object_watch

    @property
    def synced(self) -> bool:
        """True once a list answered: `value()` then speaks for the API server."""
        return self._first.is_set()

    def value(self) -> str | None:
        with self._lock:
            return self._value

    def wait_first(self, timeout: float) -> bool:
        """Block until the first list answered; False after ``timeout`` seconds."""
        return self._first.wait(timeout)

    def start(self) -> None:
        self._watch.start()

    def stop(self, timeout: float | None = 5.0) -> bool:
        return self._watch.stop(timeout)

    def _seen(self, value: str | None) -> None:
        with self._lock:
            self._value = value
        self._first.set()
        if self._on_value is not None:
            self._on_value(value)


def follow_node_label(
    *,
    node_name: str,
    label: str,
    env: Mapping[str, str],
    user_agent: str,
    kubeconfig: str | None = None,
    on_value: Callable[[str | None], None] | None = None,
    on_error: Callable[[str], None] | None = None,
    watch_timeouts: WatchTimeouts = DEFAULT_WATCH_TIMEOUTS,
) -> NodeLabelFollower | FollowOff:
    """A follower for ``label`` on this node (not started yet), or why there is none.

    Access is found as the plugin finds it: ``kubeconfig``, then ``KUBECONFIG``
    in ``env``, then the in-cluster service account.
    """
    if not node_name:
        return FollowOff("no --node-name (NODE_NAME) given")
    try:
        access = api_access(env, kubeconfig=kubeconfig or None)
    except PluginError as err:
        return FollowOff(str(err), unusable=True)
    if access is None:
        return FollowOff("no Kubernetes API access (not in a cluster and no KUBECONFIG)")
    return NodeLabelFollower(
        api=access.named(user_agent),
        node_name=node_name,
        label=label,
        on_value=on_value,
        on_error=on_error,
        watch_timeouts=watch_timeouts,
    )


def start_node_label_follower(
    *,
    node_name: str,
    label: str,
    env: Mapping[str, str],
    user_agent: str,
    watch_timeouts: WatchTimeouts,
    kubeconfig: str | None = None,
    on_value: Callable[[str | None], None] | None = None,
) -> NodeLabelFollower | None:
    """`follow_node_label`, started, with its errors logged; None (and why, logged once) if off.

    What the labeller and the MPS daemon do alike; the plugin has its own
    source on its event loop.
    """
    follower = follow_node_label(
        node_name=node_name,
        label=label,
        env=env,
        user_agent=user_agent,
        kubeconfig=kubeconfig,
        on_value=on_value,
        on_error=lambda message: logger.warning("node label watch: {}", message),
        watch_timeouts=watch_timeouts,
    )
    if isinstance(follower, FollowOff):
        log = logger.warning if follower.unusable else logger.info
        log("per-node config selection is off: {reason}", reason=follower.reason)
        return None
    follower.start()
    logger.info(
        "watching label {label} of node {node} through {source}",
        label=follower.label,
        node=follower.node_name,
        source=follower.source,
    )
    return follower
