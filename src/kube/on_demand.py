"""The parts of this package that stand on the Kubernetes client, loaded on first use.

Nearly every module here imports the official client (`kube.official`),
which takes a quarter to half a second to load. Many nodes never talk to the
API server (no node name, no API access, no DRA), and those that do should
not pay for it on the way to their first registration. So a module outside
the client's side (in this package or above it) does not import those
modules at its top: it asks here. Each function loads its part when first
called and is typed with it (through `TYPE_CHECKING` imports), so callers
are checked as if they had imported it themselves. A class comes back as the
class; a function is called through a function of the same signature.

This module and its siblings (`labels.on_demand`, `reconciler.on_demand`)
are the only places where an import sits inside a function
(`tests/unit/test_imports.py` holds them to that); a new part a node may
never need is added here, not imported where it is used.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kube.claim_values import AllocatedDevice, OpaqueConfig, ResourceClaimView
    from kube.client import ApiAccess
    from kube.errors import KubeError
    from kube.event_api import EventApi
    from kube.label_follower import NodeLabelFollower
    from kube.node_watch import NodeLabelWatch
    from kube.pacing import WatchTimeouts
    from kube.resource_claims import ClaimReader
    from kube.resource_slices import SlicePublisher

__all__ = [
    "api_access",
    "claim_reader",
    "create_allocated_claim",
    "describe",
    "event_api",
    "kube_error",
    "node_label_watch",
    "slice_publisher",
    "start_node_label_follower",
]


def api_access(env: Mapping[str, str], *, kubeconfig: str | None = None) -> ApiAccess | None:
    """`kube.client.api_access`: the API access this process has, or None."""
    from kube.client import api_access

    return api_access(env, kubeconfig=kubeconfig)


def describe(exc: BaseException) -> str:
    """`kube.errors.describe`: one line saying why a request failed."""
    from kube.errors import describe

    return describe(exc)


def kube_error() -> type[KubeError]:
    """`kube.errors.KubeError`: what a failed request raises (the client loads with it).

    For an `except` clause in a module that must not load the client at its
    top: the clause's expression is evaluated only when something was raised.
    """
    from kube.errors import KubeError

    return KubeError


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
    """`kube.label_follower.start_node_label_follower`, for the labeller and the MPS daemon."""
    from kube.label_follower import start_node_label_follower

    return start_node_label_follower(
        node_name=node_name,
        label=label,
        env=env,
        user_agent=user_agent,
        watch_timeouts=watch_timeouts,
        kubeconfig=kubeconfig,
        on_value=on_value,
    )


def node_label_watch() -> type[NodeLabelWatch]:
    """`kube.node_watch.NodeLabelWatch`: the node's label and annotation, watched."""
    from kube.node_watch import NodeLabelWatch

    return NodeLabelWatch


def event_api() -> type[EventApi]:
    """`kube.event_api.EventApi`: posts and patches the node's Events."""
    from kube.event_api import EventApi

    return EventApi


def claim_reader() -> type[ClaimReader]:
    """`kube.resource_claims.ClaimReader`: reads the ResourceClaims a DRA driver prepares."""
    from kube.resource_claims import ClaimReader

    return ClaimReader


def slice_publisher() -> type[SlicePublisher]:
    """`kube.resource_slices.SlicePublisher`: writes the node's ResourceSlices, over a watch."""
    from kube.resource_slices import SlicePublisher

    return SlicePublisher


def create_allocated_claim(
    api: ApiAccess,
    namespace: str,
    name: str,
    results: Sequence[AllocatedDevice],
    *,
    config: Sequence[OpaqueConfig] = (),
    device_class: str = "gpu.nvidia.com",
    timeout: float = 10.0,
) -> ResourceClaimView:
    """`kube.resource_claims.create_allocated_claim`: a claim allocated as a scheduler leaves it."""
    from kube.resource_claims import create_allocated_claim

    return create_allocated_claim(
        api, namespace, name, results, config=config, device_class=device_class, timeout=timeout
    )
