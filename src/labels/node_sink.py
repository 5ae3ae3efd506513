"""Publishing the labels on this node's own Node object, without NFD.

With `--write-node-labels` (env `GFD_WRITE_NODE_LABELS`, set by the chart
when NFD is not installed) every pass merges the computed labels into the
Node and removes stale ones under `nvidia.com/` that this labeller owns;
labels that other components own under the same prefix (the config
selection label, the GPU operator's) are left alone. An API error is
logged and the next pass tries again: labelling never stops the features
file from being written.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from loguru import logger

from foundation.errors import PluginError
from kube.client import ApiAccess, api_access
from kube.node_labels import patch_node_labels
from labels.options import GfdOptions
from labels.output import LabelSink
from settings import ConfigError


class NodeLabelSink:
    def __init__(self, access: ApiAccess, node_name: str) -> None:
        self._access = access
        self._node = node_name

    def publish(self, labels: Mapping[str, str]) -> None:
        try:
            change = patch_node_labels(self._access, self._node, dict(labels))
        except PluginError as err:
            logger.warning("labelling node {node} failed: {err}", node=self._node, err=str(err))
            return
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


def node_label_sink(options: GfdOptions) -> LabelSink:
    """The Node-object sink; a missing node name or API access is a config error."""
    if not options.node_name:
        raise ConfigError(
            "writing node labels needs the node's name", path="--write-node-labels"
        )
    try:
        access = api_access(os.environ)
    except PluginError as err:
        raise ConfigError(str(err), path="--write-node-labels") from err
    if access is None:
        raise ConfigError(
            "writing node labels needs Kubernetes API access (in-cluster or KUBECONFIG)",
            path="--write-node-labels",
        )
    return NodeLabelSink(access, options.node_name)
