"""MIG profile names (`1g.5gb`, `1c.2g.10gb`, `1g.5gb+me`) as the reference plugin spells them.

A suffix names what the GPU instance has besides its slices: `+me` a media
extension (one set of video engines and the optical-flow unit), `+me.all`
every media engine of the GPU, `-me` none at all, `+gfx` graphics (OpenGL,
Vulkan). Each suffixed profile is a profile of its own: its own resource under
the mixed strategy and its own labels.

The name is a user-visible contract: it becomes the resource name
`nvidia.com/mig-<profile>` and a node label, so it must match the reference
to the character. It is built from the NVML GPU-instance profile (slice count
and media-engine attribute), the compute-instance profile (compute slices) and
a memory figure rounded in a specific way: up to the next eighth of the
parent's memory, then half away from zero. Python's `round()` rounds half to
even and would name an H200 slice `3g.70gb` instead of `3g.71gb`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from types import MappingProxyType

from devices.errors import DiscoveryError

_MIB = 1 << 20
_GIB = 1 << 30

# NVML GPU-instance profile constant -> (GPU slices, name suffix).
GI_PROFILES: Mapping[int, tuple[int, str]] = MappingProxyType(
    {
        0: (1, ""),  # 1_SLICE
        7: (1, "+me"),  # 1_SLICE_REV1
        9: (1, ""),  # 1_SLICE_REV2 (1g.20gb on 80 GB parts)
        10: (1, "+gfx"),  # 1_SLICE_GFX
        13: (1, "-me"),  # 1_SLICE_NO_ME
        15: (1, "+me.all"),  # 1_SLICE_ALL_ME
        1: (2, ""),  # 2_SLICE
        8: (2, "+me"),  # 2_SLICE_REV1
        11: (2, "+gfx"),  # 2_SLICE_GFX
        14: (2, "-me"),  # 2_SLICE_NO_ME
        16: (2, "+me.all"),  # 2_SLICE_ALL_ME
        2: (3, ""),  # 3_SLICE
        3: (4, ""),  # 4_SLICE
        12: (4, "+gfx"),  # 4_SLICE_GFX
        6: (6, ""),  # 6_SLICE
        4: (7, ""),  # 7_SLICE
        5: (8, ""),  # 8_SLICE
    }
)

# NVML compute-instance profile constant -> compute slices.
CI_PROFILES: Mapping[int, int] = MappingProxyType(
    {0: 1, 7: 1, 1: 2, 2: 3, 3: 4, 6: 6, 4: 7, 8: 7, 5: 8}
)

# `[<c>c.]<g>g.<gb>gb` followed by at most one `+attr[,attr]` or `-attr[,attr]` list.
_NAME = re.compile(
    r"^(?:(?P<c>[1-9]\d*)c\.)?(?P<g>[1-9]\d*)g\.(?P<gb>[1-9]\d*)gb"
    r"(?:(?P<sign>[+-])(?P<attrs>[a-z][a-z.]*(?:,[a-z][a-z.]*)*))?$"
)

# The attribute of GPU instances that also run graphics (`+gfx`, Blackwell RTX PRO parts):
# a container given one needs the parent GPU's DRM nodes as well.
GRAPHICS = "gfx"


def mig_memory_gb(memory_mib: int, parent_total_bytes: int) -> int:
    """GB figure of a MIG profile name, from its memory and the parent GPU's total memory.

    Rounds the fraction of the parent's memory up to the next 1/8, scales it by
    the parent's memory in whole GiB (rounded up) and rounds half away from zero.
    """
    if parent_total_bytes <= 0:
        raise ValueError(f"parent memory must be positive, got {parent_total_bytes}")
    # Kept in float64 like the reference so boundary cases round identically.
    fraction = (memory_mib * _MIB) / parent_total_bytes
    fraction = math.ceil(fraction * 8) / 8
    total_gib = -(-parent_total_bytes // _GIB)
    return math.floor(fraction * total_gib + 0.5)


def mig_profile_name(
    *, gi_profile: int, ci_profile: int, memory_mib: int, parent_total_bytes: int
) -> str:
    """Name of a MIG device from its NVML GI/CI profile constants and memory.

    Raises:
        DiscoveryError: the GI or CI profile constant is one the reference does not name
            (for example 3_SLICE_GFX).
    """
    if gi_profile not in GI_PROFILES:
        raise DiscoveryError(f"invalid GPU Instance Profile ID: {gi_profile}")
    if ci_profile not in CI_PROFILES:
        raise DiscoveryError(f"invalid Compute Instance Profile ID: {ci_profile}")
    g, suffix = GI_PROFILES[gi_profile]
    c = CI_PROFILES[ci_profile]
    gb = mig_memory_gb(memory_mib, parent_total_bytes)
    slices = f"{g}g" if c == g else f"{c}c.{g}g"
    return f"{slices}.{gb}gb{suffix}"


def is_profile_name(name: str) -> bool:
    """Whether `name` is a well-formed profile name (says nothing about a GPU supporting it)."""
    return _NAME.fullmatch(name) is not None


def profile_slices(name: str) -> tuple[int, int]:
    """(compute slices, GPU slices) of a well-formed profile name; C defaults to G."""
    match = _NAME.fullmatch(name)
    if match is None:
        raise ValueError(f"not a MIG profile name: {name!r}")
    g = int(match["g"])
    return (int(match["c"]) if match["c"] else g, g)


def profile_attributes(name: str) -> tuple[str, ...]:
    """The attributes a well-formed profile name adds (`+me`, `+me.all`, `+gfx`); `-me` adds none.

    Raises:
        ValueError: `name` is not a profile name.
    """
    match = _NAME.fullmatch(name)
    if match is None:
        raise ValueError(f"not a MIG profile name: {name!r}")
    if match["sign"] != "+":
        return ()
    return tuple(match["attrs"].split(","))


def is_graphics_profile(name: str) -> bool:
    """Whether MIG devices of this profile run graphics (their containers need DRM nodes)."""
    return is_profile_name(name) and GRAPHICS in profile_attributes(name)
