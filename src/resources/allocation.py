"""Answering the kubelet's Allocate and GetPreferredAllocation for one resource.

`Allocator` is immutable and built from one resource's devices, so the gRPC
handlers stay pure lookups: no NVML and no locks on the hot path.
"""

from __future__ import annotations

from collections.abc import Sequence

from resources.builder import ResourceSet
from resources.edits import ContainerEdits
from resources.errors import InvalidRequest


def strip_replica(device_id: str) -> str:
    """`GPU-x::3` -> `GPU-x`; an ID without `::` is returned as is."""
    return device_id.split("::", 1)[0]


class Allocator:
    """Allocation behaviour of one resource (envvar strategy)."""

    def __init__(self, resource: ResourceSet) -> None:
        self.resource = resource
        self._known = {device.id: device for device in resource.devices}

    @property
    def name(self) -> str:
        return self.resource.name

    def _check_known(self, ids: Sequence[str]) -> None:
        unknown = [device_id for device_id in ids if device_id not in self._known]
        if unknown:
            raise InvalidRequest(
                f"invalid allocation request for '{self.name}': "
                f"unknown device: {', '.join(unknown)}"
            )

    def allocate(self, ids: Sequence[str]) -> ContainerEdits:
        """Container edits for one container request."""
        self._check_known(ids)
        visible = list(dict.fromkeys(strip_replica(device_id) for device_id in ids))
        return ContainerEdits(envs={"NVIDIA_VISIBLE_DEVICES": ",".join(visible)})

    def preferred(
        self, available: Sequence[str], required: Sequence[str], size: int
    ) -> list[str]:
        """Required IDs first, then available ones in advertised order."""
        self._check_known([*available, *required])
        if size < len(required):
            raise InvalidRequest(
                f"allocation size {size} is smaller than the {len(required)} required devices"
            )
        chosen = list(dict.fromkeys(required))
        for device_id in sorted(set(available) - set(chosen), key=list(self._known).index):
            if len(chosen) >= size:
                break
            chosen.append(device_id)
        if len(chosen) < size:
            raise InvalidRequest("not enough available devices to satisfy allocation")
        return chosen
