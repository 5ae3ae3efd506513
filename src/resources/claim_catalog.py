"""What a DRA node publishes, as the claim planner reads it.

The reconciler keeps one `Catalog` current (the DRA plan's devices with
their health now) and the claim preparer reads it at every prepare. It is
its own small module so the loop can build it without loading the claim
planner, the CDI spec content or the claim config models, which only a node
that prepares claims needs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from devices.model import Inventory, MigPlacement
from resources.options import ResourceOptions


@dataclass(frozen=True)
class CatalogDevice:
    """A device this node publishes: its GPU or MIG UUID, and why it is unhealthy."""

    name: str
    uuid: str  # a placement's: its GPU's
    unhealthy: str | None = None
    # Set for a dynamic MIG placement: preparing the device creates this MIG instance.
    placement: MigPlacement | None = None


@dataclass(frozen=True)
class Catalog:
    """What the node publishes now, and what a claim's spec is built from."""

    driver: str
    pool: str
    devices: Mapping[str, CatalogDevice]
    inventory: Inventory
    options: ResourceOptions
    # Whether a claim waits for its `/dev` nodes: a simulated node checks only
    # a `/dev` of its own (a driver root that carries one), never the host's.
    check_device_nodes: bool = True
