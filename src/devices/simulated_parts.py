"""Facts of the GPU parts the shipped profiles simulate, which a profile need not repeat.

A simulated MIG device is named for DRA from its GPU-instance profile id (the
ID column of `nvidia-smi mig -lgip`) and its placement; the id depends on the
part and the profile only, so it is built in for the parts the shipped
profiles use, as are the MIG attributes (multiprocessors and engines) and,
for DRA's dynamic MIG, where each GPU-instance profile can be placed. The
brand is what NVML's `nvmlDeviceGetBrand` reports for those parts with the
R550 drivers the profiles name. A profile may state any of these itself
(`profileId`, `attributes`, `migPlacements`, `brand`); for other parts they
stay unknown (None, or no placements) unless it does, and whatever reads them
leaves out what is unknown rather than guessing.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

__all__ = [
    "GiProfileFacts",
    "MigNumbers",
    "known_brand",
    "known_gi_profile_id",
    "known_gi_profiles",
    "known_mig_attributes",
]

# (multiprocessors, copy engines, decoders, encoders, jpegs, ofas)
MigNumbers = tuple[int, int, int, int, int, int]

# Parent product -> MIG profile -> GPU-instance profile id.
_GI_PROFILE_IDS: Mapping[str, Mapping[str, int]] = MappingProxyType(
    {
        "NVIDIA A100-SXM4-40GB": {
            "1g.5gb": 19,
            "1g.5gb+me": 20,
            "1g.10gb": 15,
            "2g.10gb": 14,
            "3g.20gb": 9,
            "4g.20gb": 5,
            "7g.40gb": 0,
        },
        "NVIDIA H100 80GB HBM3": {
            "1g.10gb": 19,
            "1g.10gb+me": 20,
            "1g.20gb": 15,
            "2g.20gb": 14,
            "3g.40gb": 9,
            "4g.40gb": 5,
            "7g.80gb": 0,
        },
    }
)

# Parent product -> MIG profile -> its numbers, as `nvidia-smi mig -lgip` lists them.
_MIG_ATTRIBUTES: Mapping[str, Mapping[str, MigNumbers]] = MappingProxyType(
    {
        "NVIDIA A100-SXM4-40GB": {
            "1g.5gb": (14, 1, 0, 0, 0, 0),
            "1g.5gb+me": (14, 1, 1, 0, 1, 1),
            "1g.10gb": (14, 1, 1, 0, 0, 0),
            "2g.10gb": (28, 2, 1, 0, 0, 0),
            "3g.20gb": (42, 3, 2, 0, 0, 0),
            "4g.20gb": (56, 4, 2, 0, 0, 0),
            "7g.40gb": (98, 7, 5, 0, 1, 1),
        },
        "NVIDIA H100 80GB HBM3": {
            "1g.10gb": (16, 1, 1, 0, 1, 0),
            "1g.10gb+me": (16, 1, 1, 0, 1, 1),
            "1g.20gb": (26, 1, 1, 0, 1, 0),
            "2g.20gb": (32, 2, 2, 0, 2, 0),
            "3g.40gb": (60, 3, 3, 0, 3, 0),
            "4g.40gb": (64, 4, 4, 0, 4, 0),
            "7g.80gb": (132, 8, 7, 0, 7, 1),
        },
        # Four slices; `+me.all` takes every media engine, `-me` none, `+gfx` adds graphics.
        "NVIDIA RTX PRO 6000 Blackwell Server Edition": {
            "1g.24gb": (46, 1, 1, 1, 1, 0),
            "1g.24gb+me": (46, 1, 1, 1, 1, 1),
            "1g.24gb+gfx": (46, 1, 1, 1, 1, 0),
            "1g.24gb+me.all": (46, 1, 4, 4, 4, 1),
            "1g.24gb-me": (46, 1, 0, 0, 0, 0),
            "2g.48gb": (94, 2, 2, 2, 2, 0),
            "2g.48gb+gfx": (94, 2, 2, 2, 2, 0),
            "2g.48gb+me.all": (94, 2, 4, 4, 4, 1),
            "2g.48gb-me": (94, 2, 0, 0, 0, 0),
            "4g.96gb": (188, 4, 4, 4, 4, 1),
            "4g.96gb+gfx": (188, 4, 4, 4, 4, 1),
        },
    }
)


@dataclass(frozen=True)
class GiProfileFacts:
    """Where one GPU-instance profile of a part can be created, and what an instance holds."""

    profile: str  # "1g.5gb"
    profile_id: int  # `nvidia-smi mig -lgip` ID
    size: int  # memory slices an instance occupies
    starts: tuple[int, ...]  # first memory slices it may start at, ascending
    memory_mib: int
    instances: int  # how many the GPU holds at most at once


# Parent product -> (profile, memory slices, possible starts, MiB, most instances), in the
# order `nvidia-smi mig -lgipp` lists them. Every part here has 8 memory slices.
#
# Sources. Placements: NVIDIA's Multi-Instance GPU User Guide, "Getting Started with
# MIG", lists an A100-SXM4-40GB's `nvidia-smi mig -lgipp`: profile IDs 19 and 20
# {0,1,2,3,4,5,6}:1, 15 {0,2,4,6}:2, 14 {0,2,4}:2, 9 {0,4}:4, 5 {0}:4, 0 {0}:8;
# NVIDIA's H100 material (the H100 NVL's `-lgipp`) shows the same sets for the
# H100. Instance counts: the guide's "Supported MIG Profiles" tables (7, 1, 4, 3,
# 2, 1, 1 on both parts). Memory: `nvidia-smi mig -lgip` in GiB times 1024, on
# the A100-40GB 4.75, 9.75, 19.50 and 39.25 GiB (some drivers print 9.62 and
# 19.62; these are the figures the shipped profiles' MIG devices state), on the
# H100 80GB 9.75, 19.62, 39.50 and 79.25 GiB.
_PLACEMENTS: Mapping[str, tuple[tuple[str, int, tuple[int, ...], int, int], ...]] = (
    MappingProxyType(
        {
            "NVIDIA A100-SXM4-40GB": (
                ("1g.5gb", 1, (0, 1, 2, 3, 4, 5, 6), 4864, 7),
                ("1g.5gb+me", 1, (0, 1, 2, 3, 4, 5, 6), 4864, 1),
                ("1g.10gb", 2, (0, 2, 4, 6), 9984, 4),
                ("2g.10gb", 2, (0, 2, 4), 9984, 3),
                ("3g.20gb", 4, (0, 4), 19968, 2),
                ("4g.20gb", 4, (0,), 19968, 1),
                ("7g.40gb", 8, (0,), 40192, 1),
            ),
            "NVIDIA H100 80GB HBM3": (
                ("1g.10gb", 1, (0, 1, 2, 3, 4, 5, 6), 9984, 7),
                ("1g.10gb+me", 1, (0, 1, 2, 3, 4, 5, 6), 9984, 1),
                ("1g.20gb", 2, (0, 2, 4, 6), 20096, 4),
                ("2g.20gb", 2, (0, 2, 4), 20096, 3),
                ("3g.40gb", 4, (0, 4), 40448, 2),
                ("4g.40gb", 4, (0,), 40448, 1),
                ("7g.80gb", 8, (0,), 81152, 1),
            ),
        }
    )
)

_COMPUTE_PREFIX = re.compile(r"^[1-9]\d*c\.")

_BRANDS: Mapping[str, str] = MappingProxyType(
    {"NVIDIA A100-SXM4-40GB": "Nvidia", "NVIDIA H100 80GB HBM3": "Nvidia"}
)


def known_gi_profile_id(parent: str, profile: str) -> int | None:
    """The GPU-instance profile id of `profile` on the part `parent`, when built in.

    A compute-instance prefix (`1c.3g.20gb`) does not change the GPU instance.
    """
    gpu_instance = _COMPUTE_PREFIX.sub("", profile, count=1)
    return _GI_PROFILE_IDS.get(parent, {}).get(gpu_instance)


def known_mig_attributes(parent: str, profile: str) -> MigNumbers | None:
    """(multiprocessors, copy engines, decoders, encoders, jpegs, ofas) of `profile` on `parent`."""
    return _MIG_ATTRIBUTES.get(parent, {}).get(profile)


def known_gi_profiles(parent: str) -> tuple[GiProfileFacts, ...]:
    """Every GPU-instance profile of the part `parent` with its placements; () when not built in."""
    ids = _GI_PROFILE_IDS.get(parent, {})
    return tuple(
        GiProfileFacts(
            profile=profile,
            profile_id=ids[profile],
            size=size,
            starts=starts,
            memory_mib=memory_mib,
            instances=instances,
        )
        for profile, size, starts, memory_mib, instances in _PLACEMENTS.get(parent, ())
    )


def known_brand(parent: str) -> str | None:
    return _BRANDS.get(parent)
