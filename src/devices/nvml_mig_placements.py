"""Where a GPU in MIG mode can create each GPU-instance profile: NVML's possible placements.

DRA's dynamic MIG publishes every placement of every GPU-instance profile as a
device. For each GPU-instance profile constant the GPU offers
(`nvmlDeviceGetGpuInstanceProfileInfo`: its profile id, memory, slices and
engines), `nvmlDeviceGetGpuInstancePossiblePlacements_v2` lists the memory
slices an instance may start at, whether or not something is there now: the
count first (a NULL array), then the placements. The profile is named the way
MIG devices are (`migprofile`), with a compute instance spanning the GPU
instance, as `create_mig` makes it.

Placements are a DRA nicety, like the MIG attributes: a constant the GPU does
not offer, a driver without the call (FUNCTION_NOT_FOUND), one that refuses it
(NOT_SUPPORTED, NO_PERMISSION) or a profile the naming rules do not cover
(3_SLICE_GFX) leaves those placements out. Any other failure is a
`DiscoveryError` naming the GPU and the call, as for the rest of discovery
(GPU_IS_LOST included, which `nvml_lost` handles). Only reads.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from typing import Any

from loguru import logger

from devices.errors import DiscoveryError
from devices.migprofile import GI_PROFILES, mig_memory_gb
from devices.model import MigAttributes, MigPlacement

__all__ = ["gi_profile_infos", "read_placements"]


def _call(nvml: Any, where: str, fn: Callable[..., Any], *args: Any, absent: set[int]) -> Any:
    try:
        return fn(*args)
    except nvml.NVMLError as exc:
        if getattr(exc, "value", None) in absent:
            return None
        name = getattr(fn, "__name__", str(fn))
        raise DiscoveryError(f"{where}: {name} failed: {exc}") from exc


def gi_profile_infos(nvml: Any, handle: Any, *, where: str) -> dict[int, Any]:
    """GPU-instance profile constant -> its profile info, for the constants the GPU offers.

    A profile id reported by two constants is kept for the first only.

    Raises:
        DiscoveryError: a call failed other than by the profile not being offered.
    """
    absent = {
        nvml.NVML_ERROR_NOT_SUPPORTED,
        nvml.NVML_ERROR_INVALID_ARGUMENT,
        nvml.NVML_ERROR_FUNCTION_NOT_FOUND,
    }
    infos: dict[int, Any] = {}
    seen: set[int] = set()
    for constant in range(nvml.NVML_GPU_INSTANCE_PROFILE_COUNT):
        info = _call(
            nvml,
            where,
            nvml.nvmlDeviceGetGpuInstanceProfileInfo,
            handle,
            constant,
            absent=absent,
        )
        if info is None or int(info.id) in seen:
            continue
        seen.add(int(info.id))
        infos[constant] = info
    return infos


def possible_placements(
    nvml: Any, handle: Any, profile_id: int, *, where: str
) -> list[tuple[int, int]] | None:
    """(start, size) of every placement of GPU-instance profile `profile_id`; None: not offered.

    Raises:
        DiscoveryError: the call failed other than by not being offered.
    """
    absent = {
        nvml.NVML_ERROR_NOT_SUPPORTED,
        nvml.NVML_ERROR_FUNCTION_NOT_FOUND,
        nvml.NVML_ERROR_NO_PERMISSION,
    }
    query = nvml.nvmlDeviceGetGpuInstancePossiblePlacements
    count = ctypes.c_uint(0)
    if (
        _call(nvml, where, query, handle, profile_id, None, ctypes.pointer(count), absent=absent)
        is None
    ):
        return None
    if count.value == 0:
        return []
    array = (nvml.c_nvmlGpuInstancePlacement_t * count.value)()
    if (
        _call(nvml, where, query, handle, profile_id, array, ctypes.pointer(count), absent=absent)
        is None
    ):
        return None
    return [(int(array[n].start), int(array[n].size)) for n in range(min(count.value, len(array)))]


def _attributes(info: Any) -> MigAttributes:
    slices = int(info.sliceCount)
    return MigAttributes(
        multiprocessors=int(info.multiprocessorCount),
        gi_slices=slices,
        ci_slices=slices,  # the compute instance create_mig makes spans the GPU instance
        copy_engines=int(info.copyEngineCount),
        decoders=int(info.decoderCount),
        encoders=int(info.encoderCount),
        jpegs=int(info.jpegCount),
        ofas=int(info.ofaCount),
    )


def _name(constant: int, memory_mib: int, parent_bytes: int) -> str | None:
    if constant not in GI_PROFILES:
        return None
    slices, suffix = GI_PROFILES[constant]
    return f"{slices}g.{mig_memory_gb(memory_mib, parent_bytes)}gb{suffix}"


def read_placements(
    nvml: Any, handle: Any, *, where: str, parent_bytes: int
) -> tuple[MigPlacement, ...]:
    """Every placement of every GPU-instance profile of the GPU, by profile id, then start.

    Call it only where MIG mode is on. `parent_bytes` is the GPU's memory,
    which names the profiles; unknown (0), there are no placements.

    Raises:
        DiscoveryError: a call failed other than by the feature not being offered.
    """
    if parent_bytes <= 0:
        logger.warning("{}: memory unknown, so MIG placements cannot be named: none listed", where)
        return ()
    placements: list[MigPlacement] = []
    for constant, info in gi_profile_infos(nvml, handle, where=where).items():
        memory_mib = int(info.memorySizeMB)
        name = _name(constant, memory_mib, parent_bytes)
        if name is None:
            continue
        found = possible_placements(nvml, handle, int(info.id), where=where)
        for start, size in found or ():
            placements.append(
                MigPlacement(
                    profile=name,
                    profile_id=int(info.id),
                    start=start,
                    size=size,
                    memory_mib=memory_mib,
                    attributes=_attributes(info),
                )
            )
    return tuple(sorted(placements, key=lambda p: (p.profile_id, p.start)))
