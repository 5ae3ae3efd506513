"""Label value spelling: sanitised names, products and architecture families.

NFD and the API server accept only a narrow alphabet in label values, and
users select nodes by these exact strings (``nvidia.com/gpu.product=Tesla-T4``),
so the transformations are those of the reference labeller, character for
character: delete anything outside ``A-Z a-z 0-9 - _ . space``, then join the
space-separated pieces with ``-``. No truncation and no further validation is
applied, as in the reference.
"""

from __future__ import annotations

import re

__all__ = [
    "architecture_family",
    "full_gpu_product",
    "mig_product",
    "mig_profile_label_name",
    "sanitise",
]

_OUTSIDE_ALPHABET = re.compile(r"[^A-Za-z0-9\-_. ]")
SHARED = "SHARED"


def sanitise(text: str) -> str:
    """``NVIDIA A100-SXM4-40GB`` -> ``NVIDIA-A100-SXM4-40GB``; ``(``, ``+``, tabs vanish."""
    kept = _OUTSIDE_ALPHABET.sub("", text)
    # Only ASCII spaces are left as whitespace, so str.split matches Go's Fields.
    return "-".join(kept.split())


def _join(parts: list[str]) -> str:
    return "-".join(part for part in (sanitise(p) for p in parts) if part)


def full_gpu_product(name: str, *, shared: bool) -> str:
    """Product of a full GPU, ``-SHARED`` appended when its replicas keep the name."""
    return _join([name, SHARED] if shared else [name])


def mig_profile_label_name(profile: str) -> str:
    """A MIG profile as labels spell it: every ``+`` becomes ``.`` (``1g.5gb.me``)."""
    return profile.replace("+", ".")


def mig_product(parent_name: str, profile: str, *, shared: bool) -> str:
    """``<parent>-MIG-<profile>[-SHARED]``, e.g. ``NVIDIA-A100-SXM4-40GB-MIG-1g.5gb``."""
    parts = [parent_name, "MIG", mig_profile_label_name(profile)]
    return _join([*parts, SHARED] if shared else parts)


def architecture_family(major: int, minor: int) -> str:
    """Architecture of a compute capability (``8.0`` -> ``ampere``), ``undefined`` if unknown.

    11.x is left unnamed on purpose, as in the reference.
    """
    match major:
        case 1:
            return "tesla"
        case 2:
            return "fermi"
        case 3:
            return "kepler"
        case 5:
            return "maxwell"
        case 6:
            return "pascal"
        case 7:
            return "volta" if minor < 5 else "turing"
        case 8:
            return "ampere" if minor < 9 else "ada-lovelace"
        case 9:
            return "hopper"
        case 10 | 12:
            return "blackwell"
        case 13:
            return "rubin"
        case _:
            return "undefined"
