"""Facts of the GPU parts the shipped profiles simulate, which a profile need not repeat.

A simulated MIG device is named for DRA from its GPU-instance profile id (the
ID column of `nvidia-smi mig -lgip`) and its placement; the id depends on the
part and the profile only, so it is built in for the parts the shipped
profiles use, as the MIG attributes are (`simulated`). The brand is what
NVML's `nvmlDeviceGetBrand` reports for those parts with the R550 drivers the
profiles name. A profile may state any of these itself (`profileId`,
`brand`); for other parts they stay unknown (None) unless it does, and
whatever reads them leaves out what is unknown rather than guessing.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from types import MappingProxyType

__all__ = ["known_brand", "known_gi_profile_id"]

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


def known_brand(parent: str) -> str | None:
    return _BRANDS.get(parent)
