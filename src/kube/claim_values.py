"""A ResourceClaim's allocation as plain values: what the scheduler gave, and the driver config.

The claim reader (`kube.resource_claims`) turns API objects into these, and
the claim planner (`resources.claim_plan`) and the kubelet simulator work
with them; they live apart from the reader so that neither loads the
Kubernetes client to name a claim's devices.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

__all__ = ["AllocatedDevice", "OpaqueConfig", "ResourceClaimView"]


@dataclass(frozen=True)
class AllocatedDevice:
    """One allocated device: which request it serves, and the driver, pool and device."""

    request: str
    driver: str
    pool: str
    device: str

    def to_json(self) -> dict[str, str]:
        return {"request": self.request, "driver": self.driver, "pool": self.pool,
                "device": self.device}  # fmt: skip


@dataclass(frozen=True)
class OpaqueConfig:
    """Driver parameters for some requests of a claim (all of them when `requests` is empty)."""

    requests: tuple[str, ...]
    driver: str
    parameters: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))

    def applies_to(self, request: str) -> bool:
        return not self.requests or request in self.requests

    def to_json(self, source: str = "FromClaim") -> dict[str, Any]:
        config: dict[str, Any] = {"source": source} if source else {}
        if self.requests:
            config["requests"] = list(self.requests)
        config["opaque"] = {"driver": self.driver, "parameters": _thawed(self.parameters)}
        return config


@dataclass(frozen=True)
class ResourceClaimView:
    namespace: str
    name: str
    uid: str
    allocated: bool  # whether the claim has an allocation at all
    results: tuple[AllocatedDevice, ...] = ()
    config: tuple[OpaqueConfig, ...] = ()

    def results_for(self, driver: str, pool: str) -> tuple[AllocatedDevice, ...]:
        return tuple(r for r in self.results if r.driver == driver and r.pool == pool)

    def config_for(self, driver: str, request: str) -> tuple[OpaqueConfig, ...]:
        """The opaque configs of `driver` that apply to `request`, in the claim's order."""
        return tuple(c for c in self.config if c.driver == driver and c.applies_to(request))


def _thawed(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {key: _thawed(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_thawed(item) for item in value]
    return value
