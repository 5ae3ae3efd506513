"""gpu-feature-discovery follows the node's config label, as the plugin does.

With ``--config-directory`` the label ``--node-label`` names the config file,
and the labels must describe the config the plugin serves on this node
(``nvidia.com/mps.capable``, ``<R>.replicas``, ``-SHARED``). So the labeller
reads the label's value through the Kubernetes API with one resumed watch
(`kube.label_follower`); the config fingerprint the waiter checks every
second includes the selection, so a label change relabels at once, and an
unknown value keeps the config in use.

Without ``--node-name`` (``NODE_NAME``) or API access the label counts as
unset (the default, else the fallbacks), as in the plugin, and the log says
so once. At start-up the first read of the label is awaited for a few
seconds, so a node labelled for another config is not labelled with the
default one for a moment; a pending signal ends that wait.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING

from loguru import logger

from kube import on_demand
from kube.pacing import LABELLER_WATCH_TIMEOUTS
from labels.flags import SetValue
from labels.options import boot_config
from labels.waiting import SIGNALS
from settings import ConfigError

if TYPE_CHECKING:
    from kube.label_follower import NodeLabelFollower

__all__ = ["LABEL_WAIT_SECONDS", "follow_config_label", "wait_first_label"]

USER_AGENT = "gpu-feature-discovery"
# How long start-up waits for the first read of the node label (as the plugin).
LABEL_WAIT_SECONDS = 10.0
_SLICE = 0.1


def follow_config_label(
    values: Mapping[str, SetValue], env: Mapping[str, str]
) -> NodeLabelFollower | None:
    """A started follower of the config label, or None (no directory, or why is logged).

    Flags that do not load return None too: the labelling run reports them.
    """
    if not values.get("config_directory"):
        return None
    try:
        flags = boot_config(values).flags
    except ConfigError:
        return None
    # The Kubernetes client costs a quarter second to import: only a labeller
    # that selects its config by label pays for it here.
    node_name = values.get("node_name")
    kubeconfig = values.get("kubeconfig")
    return on_demand.start_node_label_follower(
        node_name=str(node_name.value) if node_name else "",
        label=flags.node_label,
        env=env,
        user_agent=USER_AGENT,
        kubeconfig=str(kubeconfig.value) if kubeconfig else None,
        watch_timeouts=LABELLER_WATCH_TIMEOUTS,
    )


def wait_first_label(follower: NodeLabelFollower, timeout: float = LABEL_WAIT_SECONDS) -> bool:
    """Wait for the label's first read; False after ``timeout`` or once a signal is pending.

    The signals stay blocked (the waiter collects them later), so one that
    arrives now is seen as pending and ends the wait at once.
    """
    deadline = time.monotonic() + timeout
    while not follower.wait_first(min(_SLICE, max(0.0, deadline - time.monotonic()))):
        if signal.sigpending() & SIGNALS:
            return False
        if time.monotonic() >= deadline:
            logger.warning(
                "no answer from the Kubernetes API within {t:g}s; starting without the node label",
                t=timeout,
            )
            return False
    return True
