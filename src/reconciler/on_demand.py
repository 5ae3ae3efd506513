"""The parts a node may never use, loaded on first use.

A plain node (one resource, no DRA, no MPS, no CDI, maybe no API access)
should register without loading what only other nodes need: the Kubernetes
client (a quarter to half a second), the DRA side (its servers, gRPC stubs
and claim handling), the MPS daemon probe and the CDI spec builder. So the
reconciler does not import those at the top of a module: it asks here. Each
function loads its part when first called and is typed with it (through
`TYPE_CHECKING` imports), so callers are checked as if they had imported it
themselves. A class comes back as the class; a function is called through a
function of the same signature.

The Kubernetes client's parts are `kube.on_demand`'s, named here too so the
reconciler has one place to ask. This module and its siblings
(`kube.on_demand`, `labels.on_demand`) are the only places where an import
sits inside a function (`tests/unit/test_imports.py` holds them to that); a
new part a node may never need is added here, not imported where it is used.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from kube.on_demand import api_access, claim_reader, node_label_watch, slice_publisher

if TYPE_CHECKING:
    from devices.model import Inventory
    from kubelet.dra.prepare import ClaimPreparer
    from kubelet.dra.server import DraPluginServer
    from mps.errors import MpsNotReady
    from resources.cdi_files import Spec
    from resources.model import PluginDevice
    from resources.options import ResourceOptions

__all__ = [
    "api_access",
    "cdi_specs",
    "claim_preparer",
    "claim_reader",
    "dra_plugin_server",
    "mps_daemon_ready",
    "node_label_watch",
    "slice_publisher",
]


def claim_preparer() -> type[ClaimPreparer]:
    """`kubelet.dra.prepare.ClaimPreparer`: prepares and unprepares the DRA driver's claims."""
    from kubelet.dra.prepare import ClaimPreparer

    return ClaimPreparer


def dra_plugin_server() -> type[DraPluginServer]:
    """`kubelet.dra.server.DraPluginServer`: the DRA driver's registration and plugin sockets."""
    from kubelet.dra.server import DraPluginServer

    return DraPluginServer


def cdi_specs(inventory: Inventory, options: ResourceOptions) -> tuple[Spec, ...]:
    """`resources.cdi_spec.cdi_specs`: every CDI spec to write (none without a CDI strategy)."""
    from resources.cdi_spec import cdi_specs

    return cdi_specs(inventory, options)


async def mps_daemon_ready(
    root: Path, resource: str, devices: Sequence[PluginDevice], *, timeout: float
) -> MpsNotReady | None:
    """`mps.probe.daemon_ready`: None once the resource's MPS daemon answers with its limits."""
    from mps.probe import daemon_ready

    return await daemon_ready(root, resource, devices, timeout=timeout)
