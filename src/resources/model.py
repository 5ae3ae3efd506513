"""What the kubelet sees: resources, their advertised devices and their health."""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum

RESOURCE_PREFIX = "nvidia.com/"


class Health(StrEnum):
    """The two values the kubelet understands (v1beta1 constants)."""

    HEALTHY = "Healthy"
    UNHEALTHY = "Unhealthy"


@dataclass(frozen=True)
class PluginDevice:
    """One device ID advertised to the kubelet.

    `id` is what the kubelet sees: a GPU UUID, a MIG UUID, or a replica
    `<uuid>::<n>`. `uuid` is the underlying GPU or MIG UUID (no replica
    suffix) and `gpu_uuid` the physical GPU it lives on, which is what health
    events and topology are keyed by.
    """

    id: str
    uuid: str
    gpu_uuid: str
    index: str  # "3" for a GPU, "0:1" for a MIG device
    paths: tuple[str, ...]
    numa_node: int | None = None
    memory_mib: int = 0
    compute_capability: str = ""
    replicas: int = 0
    health: Health = Health.HEALTHY
    gi: int | None = None  # MIG GPU instance id, for health events aimed at one instance
    ci: int | None = None  # MIG compute instance id

    @property
    def is_mig(self) -> bool:
        return ":" in self.index

    def with_health(self, health: Health) -> PluginDevice:
        return self if health == self.health else replace(self, health=health)


def socket_name(resource: str) -> str:
    """Socket base name of a resource: `nvidia-<name after "/">.sock`."""
    return f"nvidia-{resource.split('/', 1)[-1]}.sock"
