"""Which NVLink fabric (IMEX domain) a GPU belongs to, read through NVML.

GPUs joined by NVSwitches across machines (GB200 NVL72 and the like) register
with the fabric manager; once registration completes, NVML reports the
cluster UUID and clique id that the `nvidia.com/gpu.clique` node label
publishes. A GPU counts as attached only when its registration state is
COMPLETED, its status is SUCCESS and its cluster UUID is not all zero bytes,
as in the reference labeller; anything less means "not attached", not an
error.

The versioned query (`nvmlDeviceGetGpuFabricInfoV`) is tried first and the
original one when the driver or pynvml lacks it. A GPU or driver without
fabric support is simply not attached; any other failure is a
`DiscoveryError`, as a failing fabric query is fatal for the reference
labeller. The NVML module is passed in, as for `nvml_probe`, so discovery and
its tests share one (possibly fake) module. Only reads: nothing here changes
the GPU.
"""

from __future__ import annotations

import ctypes
import uuid
from typing import Any

from loguru import logger

from devices.model import Fabric

# (query, info structure) pairs, newest first.
_QUERIES = (
    ("nvmlDeviceGetGpuFabricInfoV", "c_nvmlGpuFabricInfoV_t"),
    ("nvmlDeviceGetGpuFabricInfo", "c_nvmlGpuFabricInfo_t"),
)


def fabric_of(nvml: Any, info: Any) -> Fabric | None:
    """The fabric domain in an NVML fabric-info record; None unless registration completed."""
    if int(info.state) != nvml.NVML_GPU_FABRIC_STATE_COMPLETED:
        return None
    if int(info.status) != nvml.NVML_SUCCESS:
        return None
    raw = bytes(info.clusterUuid)
    if not any(raw):
        return None
    return Fabric(cluster_uuid=str(uuid.UUID(bytes=raw)), clique_id=int(info.cliqueId))


def read_fabric(nvml: Any, handle: Any, *, where: str) -> Fabric | None:
    """The fabric domain of the GPU behind `handle`, or None when it is not attached.

    A failing query is logged and reads as "not attached": the fabric only
    feeds the `gpu.clique` label, and must never cost the node its GPUs.
    """
    # The driver answers a version it does not know with a mismatch: the older query still works.
    fall_back = {nvml.NVML_ERROR_FUNCTION_NOT_FOUND, nvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH}
    for name, structure in _QUERIES:
        query = getattr(nvml, name, None)
        record = getattr(nvml, structure, None)
        if query is None or record is None:
            continue
        info = record()
        try:
            query(handle, ctypes.pointer(info))
        except nvml.NVMLError as exc:
            code = getattr(exc, "value", None)
            if code == nvml.NVML_ERROR_NOT_SUPPORTED:
                return None
            if code in fall_back:
                continue
            logger.warning("{where}: {name} failed: {exc}", where=where, name=name, exc=str(exc))
            return None
        return fabric_of(nvml, info)
    return None
