"""Desired state: effective config + inventory -> the resources to serve.

Pure apart from reading its inputs: the same config and inventory always give
the same plan and the same digest, which is how the loop tells "nothing
changed" from "apply a diff".
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass

from devices.model import Inventory
from resources.allocation import Allocator
from resources.builder import build_resources
from settings import EffectiveConfig


@dataclass(frozen=True)
class Plan:
    config: EffectiveConfig
    inventory: Inventory
    allocators: tuple[Allocator, ...]
    digest: str
    needs_mps: bool = False

    @property
    def resource_names(self) -> list[str]:
        return [allocator.name for allocator in self.allocators]


def inventory_digest(inventory: Inventory) -> str:
    blob = json.dumps(asdict(inventory), sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def build_plan(config: EffectiveConfig, inventory: Inventory) -> Plan:
    """Raises ResourceError when devices and config do not make valid resources."""
    allocators = tuple(Allocator(resource) for resource in build_resources(inventory))
    digest = hashlib.sha256(
        f"{config.digest}:{inventory_digest(inventory)}".encode()
    ).hexdigest()[:16]
    return Plan(config=config, inventory=inventory, allocators=allocators, digest=digest)
