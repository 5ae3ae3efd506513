"""A GPU's DRM nodes (`/dev/dri/cardN`, `/dev/dri/renderDN`) and their by-path links.

The kernel lists the DRM minors of a PCI function as the entries of
`/sys/bus/pci/devices/<bus id>/drm/` (only while `nvidia-drm` is loaded).
A node is listed only when it also exists under the dev root.

udev's `/dev/dri/by-path/pci-<bus id>-card` and `-render` links are not
device nodes, so a runtime does not create them; a `create-symlinks` hook
does, with the link's own relative target (`../card1`) and the path *in the
workload* (`/dev/dri/by-path/...`). A link is recreated only when it exists on
the node and points at one of this GPU's nodes.
"""

from __future__ import annotations

import os
import posixpath
import re

from cdi.layout import Layout
from devices.pci import sysfs_bus_id

DRI_DIR = "/dev/dri"
BY_PATH_DIR = "/dev/dri/by-path"
_NODE_NAME = re.compile(r"^(card|renderD)[0-9]{1,6}$")


def _valid_bus_id(bus_id: str) -> bool:
    return bool(bus_id) and "/" not in bus_id and bus_id not in (".", "..")


def drm_nodes(bus_id: str, layout: Layout) -> tuple[str, ...]:
    """`/dev/dri/card*` then `/dev/dri/renderD*` of the GPU at NVML bus id `bus_id`."""
    pci = sysfs_bus_id(bus_id)
    if not _valid_bus_id(pci):
        return ()
    folder = os.path.join(layout.sysfs_root, "bus", "pci", "devices", pci, "drm")
    try:
        names = [name for name in os.listdir(folder) if _NODE_NAME.match(name)]
    except (OSError, ValueError):
        return ()
    # card before renderD; numbers in numeric order
    names.sort(key=lambda name: (not name.startswith("card"), len(name), name))
    paths = (f"{DRI_DIR}/{name}" for name in names)
    return tuple(path for path in paths if layout.has_device_node(path))


def by_path_links(
    bus_id: str, nodes: tuple[str, ...], layout: Layout
) -> tuple[tuple[str, str], ...]:
    """(target, link) pairs of the udev by-path links that point at `nodes`."""
    pci = sysfs_bus_id(bus_id)
    if not _valid_bus_id(pci) or not nodes:
        return ()
    found = []
    for kind in ("card", "render"):
        link = f"{BY_PATH_DIR}/pci-{pci}-{kind}"
        target = layout.dev.readlink(link)
        if not target:
            continue
        pointed = posixpath.normpath(posixpath.join(BY_PATH_DIR, target))
        if pointed in nodes:
            found.append((target, link))
    return tuple(found)
