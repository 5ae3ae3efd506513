"""Publishing the labels through the Kubernetes API: a NodeFeature object, or the Node.

`--use-node-feature-api` (env `GFD_USE_NODE_FEATURE_API`) publishes the
labels as NFD's `NodeFeature` object `nvidia-features-for-<node>` in the
labeller's namespace, owned by its DaemonSet and Pod, for nfd-master to turn
into node labels. `--write-node-labels` (env `GFD_WRITE_NODE_LABELS`, set by
the chart when NFD is not installed) sets them on the Node itself and removes
stale ones under `nvidia.com/` that this labeller owns; labels that other
components own under the same prefix are left alone.

Both keep a watched copy of what they write to (`kube.node_features`,
`kube.node_labels`): a pass whose labels are already there sends nothing, so
a node in steady state only pays for the watch (a few requests an hour, not
one per pass). A failed request is a `PublishError`: the loop retries the pass
after a jittered backoff, and never removes what is published. The NodeFeature
object is never deleted by the labeller; garbage collection removes it with
its owners.

`KubeSinks` owns the publishers and their watch threads for the whole
process, so a reload (SIGHUP, a changed config) keeps them and their copies;
`close()` stops them when the command ends. When the labeller already
watches its Node for the config label, the Node sink borrows that watch
instead of opening a second one.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable, Mapping
from typing import Protocol

from loguru import logger

from foundation.errors import PluginError
from kube.client import ApiAccess, api_access
from kube.node_features import NodeFeaturePublisher, Outcome
from kube.node_labels import NodeLabelPublisher
from kube.object_watch import ObjectWatch
from kube.pacing import LABELLER_WATCH_TIMEOUTS, REAL_TIME, Clock, WatchTimeouts
from labels.options import GfdOptions
from labels.output import LabelSink, PublishError
from settings import ConfigError

__all__ = ["USER_AGENT", "KubeSinks", "NodeFeatureSink", "NodeLabelSink"]

USER_AGENT = "gpu-feature-discovery"
AccessFinder = Callable[[GfdOptions], ApiAccess | None]


class _Publisher(Protocol):
    def start(self) -> None: ...

    def close(self) -> None: ...


class NodeLabelSink:
    def __init__(self, publisher: NodeLabelPublisher, node_name: str) -> None:
        self._publisher = publisher
        self._node = node_name

    def publish(self, labels: Mapping[str, str]) -> None:
        try:
            change = self._publisher.apply(dict(labels))
        except PluginError as err:
            raise PublishError(str(err)) from err
        if change.changed:
            logger.info(
                "node {node} labels: {n} set, {m} removed",
                node=self._node,
                n=len(change.set),
                m=len(change.removed),
            )

    def withdraw(self) -> None:
        # Labels stay on the Node across restarts: removing them on every
        # rollout would make pods that select on them unschedulable meanwhile.
        return None


class NodeFeatureSink:
    def __init__(self, publisher: NodeFeaturePublisher) -> None:
        self._publisher = publisher

    def publish(self, labels: Mapping[str, str]) -> None:
        try:
            outcome = self._publisher.apply(labels)
        except PluginError as err:
            raise PublishError(str(err)) from err
        if outcome is not Outcome.UNCHANGED:
            logger.info(
                "NodeFeature {name}: {outcome} with {count} labels",
                name=self._publisher.name,
                outcome=outcome.value,
                count=len(labels),
            )

    def withdraw(self) -> None:
        # Never deleted by the labeller: its owner references let garbage
        # collection remove it with the DaemonSet.
        return None


def _default_access(options: GfdOptions) -> ApiAccess | None:
    return api_access(os.environ, kubeconfig=options.kubeconfig or None)


class KubeSinks:
    """Builds the API-backed sinks; one publisher (and watch) per target for the process."""

    def __init__(
        self,
        *,
        access: AccessFinder = _default_access,
        watch_timeouts: WatchTimeouts = LABELLER_WATCH_TIMEOUTS,
        sync_timeout: float = 3.0,
        clock: Clock = REAL_TIME,
        rng: random.Random | None = None,
        node_watch: ObjectWatch | None = None,
    ) -> None:
        self._access = access
        self._node_watch = node_watch  # the config label's: borrowed for the node's labels
        self._watch_timeouts = watch_timeouts
        self._sync_timeout = sync_timeout
        self._clock = clock
        self._rng = rng
        self._publishers: dict[tuple[str, ...], _Publisher] = {}

    def node_feature(self, options: GfdOptions) -> LabelSink:
        """The NodeFeature sink; a missing node name, namespace or API access is a config error."""
        flag = "--use-node-feature-api"
        if not options.node_name:
            raise ConfigError("required flag node-name not set (NODE_NAME)", path=flag)
        if not options.namespace:
            raise ConfigError("required flag namespace not set (NAMESPACE)", path=flag)
        key = ("nodefeature", options.kubeconfig, options.node_name, options.namespace,
               options.pod_name)  # fmt: skip
        publisher = self._publishers.get(key)
        if not isinstance(publisher, NodeFeaturePublisher):
            access = self._api(options, flag)
            publisher = NodeFeaturePublisher(
                access,
                node_name=options.node_name,
                namespace=options.namespace,
                pod_name=options.pod_name,
                sync_timeout=self._sync_timeout,
                on_error=_warn,
                watch_timeouts=self._watch_timeouts,
                clock=self._clock,
                rng=self._rng,
            )
            self._keep(key, publisher)
        return NodeFeatureSink(publisher)

    def node_labels(self, options: GfdOptions) -> LabelSink:
        """The Node-object sink; a missing node name or API access is a config error."""
        flag = "--write-node-labels"
        if not options.node_name:
            raise ConfigError("writing node labels needs the node's name", path=flag)
        key = ("node", options.kubeconfig, options.node_name)
        publisher = self._publishers.get(key)
        if not isinstance(publisher, NodeLabelPublisher):
            access = self._api(options, flag)
            shared = self._node_watch
            publisher = NodeLabelPublisher(
                access,
                options.node_name,
                sync_timeout=self._sync_timeout,
                on_error=_warn,
                watch_timeouts=self._watch_timeouts,
                clock=self._clock,
                rng=self._rng,
                watch=shared if shared is not None and shared.name == options.node_name else None,
            )
            self._keep(key, publisher)
        return NodeLabelSink(publisher, options.node_name)

    def close(self) -> None:
        """Stop every watch (the command is ending)."""
        publishers, self._publishers = self._publishers, {}
        for publisher in publishers.values():
            publisher.close()

    def _api(self, options: GfdOptions, flag: str) -> ApiAccess:
        try:
            access = self._access(options)
        except PluginError as err:
            raise ConfigError(str(err), path=flag) from err
        if access is None:
            what = "writing node labels" if flag == "--write-node-labels" else "the NodeFeature API"
            raise ConfigError(
                f"{what} needs Kubernetes API access (in-cluster or KUBECONFIG)", path=flag
            )
        return access.named(USER_AGENT)

    def _keep(self, key: tuple[str, ...], publisher: _Publisher) -> None:
        # A reload that changed the target (another namespace, say) retires the
        # old watch; one that did not keeps it and its copy.
        kind = key[0]
        for old_key in [k for k in self._publishers if k[0] == kind]:
            self._publishers.pop(old_key).close()
        publisher.start()
        self._publishers[key] = publisher


def _warn(message: str) -> None:
    logger.warning("{message}", message=message)
