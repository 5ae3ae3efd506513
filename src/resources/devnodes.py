"""Device node paths the plugin hands to containers.

Paths here are host-absolute `/dev/...` names. Where they end up on the host
side of a DeviceSpec or CDI entry depends on the driver and dev roots, which
the callers apply with `options.join_root`.
"""

from __future__ import annotations

from devices.model import Gpu, MigDevice
from resources.errors import ResourceError
from resources.options import ResourceOptions, join_root

# Added ahead of the GPUs when passDeviceSpecs is on, each only if it exists
# inside the plugin container (nvidia-uvm and nvidia-modeset load lazily).
CONTROL_NODES = (
    "/dev/nvidiactl",
    "/dev/nvidia-uvm",
    "/dev/nvidia-uvm-tools",
    "/dev/nvidia-modeset",
)
# (The CDI spec lists the same nodes in its own order: `cdi.driver.CONTROL_NODES`.)

IMEX_CHANNEL_DIR = "/dev/nvidia-caps-imex-channels"


def imex_channel_path(channel: str) -> str:
    return f"{IMEX_CHANNEL_DIR}/channel{channel}"


def cap_node(minor: int) -> str:
    return f"/dev/nvidia-caps/nvidia-cap{minor}"


def gi_capability(parent_minor: int, gi: int) -> str:
    return f"/proc/driver/nvidia/capabilities/gpu{parent_minor}/mig/gi{gi}/access"


def ci_capability(parent_minor: int, gi: int, ci: int) -> str:
    return f"/proc/driver/nvidia/capabilities/gpu{parent_minor}/mig/gi{gi}/ci{ci}/access"


def mig_device_paths(parent: Gpu, mig: MigDevice) -> tuple[str, ...]:
    """Parent GPU node, then the GI and CI access capability nodes.

    Raises:
        ResourceError: a capability minor is unknown (no entry in
            `/proc/driver/nvidia-caps/mig-minors`). The reference names the GI
            path even when the CI entry is the one missing; here the message
            names the capability that is actually missing.
    """
    if mig.gi_cap_minor is None:
        raise ResourceError(
            "missing MIG GPU instance capability path: " + gi_capability(parent.minor, mig.gi)
        )
    if mig.ci_cap_minor is None:
        raise ResourceError(
            "missing MIG compute instance capability path: "
            + ci_capability(parent.minor, mig.gi, mig.ci)
        )
    return (parent.device_path, cap_node(mig.gi_cap_minor), cap_node(mig.ci_cap_minor))


# Device nodes whose presence makes the gdrcopy / GDS / MOFED CDI devices worth
# generating (the reference drops a class whose spec would have no edits).
EXTRA_CLASSES = ("gdrcopy", "gds", "mofed")
EXTRA_NODE_PATTERNS: dict[str, tuple[str, ...]] = {
    "gdrcopy": ("/dev/gdrdrv",),
    "gds": ("/dev/nvidia-fs*",),
    "mofed": ("/dev/infiniband/uverbs*", "/dev/infiniband/rdma_cm"),
}


def enabled_extras(options: ResourceOptions) -> tuple[str, ...]:
    flags = {
        "gdrcopy": options.gdrcopy_enabled,
        "gds": options.gds_enabled,
        "mofed": options.mofed_enabled,
    }
    return tuple(kind for kind in EXTRA_CLASSES if flags[kind])


def extra_nodes(kind: str, options: ResourceOptions) -> tuple[str, ...]:
    """`/dev/...` nodes of an extra feature found under the container dev root."""
    root = options.container_dev_root.rstrip("/")
    found: list[str] = []
    for pattern in EXTRA_NODE_PATTERNS[kind]:
        for hit in options.glob(join_root(root or "/", pattern)):
            path = hit[len(root) :] if root and hit.startswith(root + "/") else hit
            if path not in found:
                found.append(path)
    return tuple(found)
