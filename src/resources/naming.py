"""Resource names: the full-GPU name, MIG names under `mixed`, `.shared` renames.

Under the mixed strategy the reference creates one resource per MIG profile
whose compute-slice count equals its GPU-slice count (`<g>g.<mem>gb[suffix]`),
named `mig-` + the profile with every `+` turned into `.` (`1g.10gb+me` ->
`mig-1g.10gb.me`; a `-` suffix is kept). Profiles of the form
`<c>c.<g>g.<mem>gb` get no resource, so a node carrying one cannot start
under mixed. Profile strings themselves come from the devices package.
"""

from __future__ import annotations

import re

from resources.errors import ResourceError
from resources.model import RESOURCE_PREFIX

GPU_RESOURCE = RESOURCE_PREFIX + "gpu"
SHARED_SUFFIX = ".shared"
MAX_RESOURCE_NAME = 63

# `<g>g.<gb>gb` optionally followed by `+attrs` or `-attrs`; no `<c>c.` prefix.
_FULL_SLICE_PROFILE = re.compile(r"^[0-9]+g\.[0-9]+gb([+-][A-Za-z0-9.,]+)?$")
_DNS1123_SUBDOMAIN = re.compile(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
)


def mig_resource_name(profile: str) -> str:
    """Mixed-strategy resource of a MIG profile, e.g. `nvidia.com/mig-1g.10gb.me`.

    Raises:
        ResourceError: the profile has no resource (a `<c>c.<g>g...` profile or
            an unparsable string), with the reference's message.
    """
    if not _FULL_SLICE_PROFILE.match(profile):
        raise ResourceError(f"MIG profile '{profile}' does not match any resource patterns")
    return validate_resource_name(RESOURCE_PREFIX + "mig-" + profile.replace("+", "."))


def shared_name(name: str) -> str:
    """`renameByDefault` target: `nvidia.com/gpu` -> `nvidia.com/gpu.shared`."""
    return name + SHARED_SUFFIX


def validate_resource_name(name: str) -> str:
    """Check a full resource name the way the reference does and return it.

    Raises:
        ResourceError: longer than 63 characters, or the part after `/` is not
            a DNS-1123 subdomain.
    """
    if len(name) > MAX_RESOURCE_NAME:
        raise ResourceError(f"fully-qualified resource name must be 63 characters or less: {name}")
    short = name.split("/", 1)[-1]
    if not _DNS1123_SUBDOMAIN.match(short):
        raise ResourceError(
            f"incorrect format for resource name '{name}': must consist of lower case "
            "alphanumeric characters, '-' or '.', and must start and end with an "
            "alphanumeric character"
        )
    return name
