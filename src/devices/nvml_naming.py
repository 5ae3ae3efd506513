"""NVML facts in the form NVIDIA's own tools publish them: brand names, MIG placements.

NVIDIA's DRA driver publishes a GPU's brand as go-nvlib spells NVML's brand
enum (`Nvidia`, `Tesla`, `GeForceRTX`, ...) and names a MIG device after its
GPU instance's placement. Both are read once per discovery pass; an enum value
newer than this table reads as `Unknown`, as an NVML brand it cannot name
would, rather than failing discovery.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

__all__ = ["brand_name", "placement_start"]

# nvmlBrandType_t -> go-nvlib's GetBrandAsString.
_BRANDS: Mapping[int, str] = MappingProxyType(
    {
        0: "Unknown",
        1: "Quadro",
        2: "Tesla",
        3: "NVS",
        4: "Grid",
        5: "GeForce",
        6: "Titan",
        7: "NvidiaVApps",
        8: "NvidiaVPC",
        9: "NvidiaVCS",
        10: "NvidiaVWS",
        11: "NvidiaCloudGaming",
        12: "QuadroRTX",
        13: "NvidiaRTX",
        14: "Nvidia",
        15: "GeForceRTX",
        16: "TitanRTX",
    }
)


def brand_name(code: int) -> str:
    return _BRANDS.get(code, "Unknown")


def placement_start(instance: Any) -> int | None:
    """The first memory slice of a GPU instance, from `nvmlGpuInstanceGetInfo`'s record."""
    placement = getattr(instance, "placement", None)
    start = getattr(placement, "start", None)
    return None if start is None else int(start)
