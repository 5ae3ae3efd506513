"""Creating and destroying MIG instances through NVML, for DRA's dynamic MIG.

Apart from the compute mode (`nvml_compute_mode`), this is the only code that
changes a GPU, and only a DRA claim being prepared or unprepared calls it.

`create_instance` makes a GPU instance of a profile at a placement
(`nvmlDeviceCreateGpuInstanceWithPlacement`, the placement's size taken from
the GPU's own possible placements) and one compute instance spanning it (the
compute-instance profile whose slice count is the GPU instance's,
`nvmlGpuInstanceCreateComputeInstance`). If any step after the GPU instance
fails, the GPU instance is destroyed again before the error is raised: nothing
is left half made. `destroy_instance` destroys the compute instance, then the
GPU instance; an instance (or GPU, or MIG mode) that is already gone is not an
error, so a retry after a crash finishes the job.

Every failure is one `MigError` line naming the GPU and the NVML call. The
NVML module is passed in, so the backend and its tests share one (possibly
fake) module.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from loguru import logger

from devices.errors import DiscoveryError, MigError
from devices.nvml_mig_placements import gi_profile_infos, possible_placements

__all__ = ["CreatedInstance", "create_instance", "destroy_instance", "gpu_handle"]


@dataclass(frozen=True)
class CreatedInstance:
    """The GPU the instance was made on, and its ids."""

    gpu: Any  # the GPU's NVML handle
    gi: int
    ci: int


def _name(fn: Callable[..., Any]) -> str:
    return str(getattr(fn, "__name__", fn))


def _code(exc: Exception) -> Any:
    return getattr(exc, "value", None)


def _call(nvml: Any, where: str, fn: Callable[..., Any], *args: Any) -> Any:
    try:
        return fn(*args)
    except nvml.NVMLError as exc:
        raise MigError(f"{where}: {_name(fn)} failed: {exc}") from exc


def gpu_handle(nvml: Any, gpu_uuid: str) -> Any:
    """The GPU's handle; None when NVML knows no GPU with that UUID.

    Raises:
        MigError: the lookup failed for another reason.
    """
    try:
        return nvml.nvmlDeviceGetHandleByUUID(gpu_uuid)
    except nvml.NVMLError as exc:
        if _code(exc) == nvml.NVML_ERROR_NOT_FOUND:
            return None
        raise MigError(f"GPU {gpu_uuid}: nvmlDeviceGetHandleByUUID failed: {exc}") from exc


def _full_compute_profile(nvml: Any, where: str, gi_handle: Any, slices: int) -> int:
    """The id of the compute-instance profile that spans a GPU instance of `slices` slices."""
    absent = {
        nvml.NVML_ERROR_NOT_SUPPORTED,
        nvml.NVML_ERROR_INVALID_ARGUMENT,
        nvml.NVML_ERROR_FUNCTION_NOT_FOUND,
    }
    query = nvml.nvmlGpuInstanceGetComputeInstanceProfileInfo
    for constant in range(nvml.NVML_COMPUTE_INSTANCE_PROFILE_COUNT):
        try:
            info = query(gi_handle, constant, nvml.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
        except nvml.NVMLError as exc:
            if _code(exc) in absent:
                continue
            raise MigError(f"{where}: {_name(query)} failed: {exc}") from exc
        if int(info.sliceCount) == slices:
            return int(info.id)
    raise MigError(f"{where}: no compute-instance profile spans {slices} slices")


def create_instance(nvml: Any, gpu_uuid: str, profile_id: int, start: int) -> CreatedInstance:
    """Create a GPU instance of `profile_id` at memory slice `start`, and a compute instance
    spanning it.

    Raises:
        MigError: the GPU is unknown, MIG mode is off, the profile or start is
            not offered, or NVML refused (the placement is taken: Insufficient
            Resources); nothing is left made.
    """
    where = f"GPU {gpu_uuid}"
    handle = gpu_handle(nvml, gpu_uuid)
    if handle is None:
        raise MigError(f"{where}: no such GPU")
    try:
        mode = nvml.nvmlDeviceGetMigMode(handle)
    except nvml.NVMLError as exc:
        if _code(exc) not in (nvml.NVML_ERROR_NOT_SUPPORTED, nvml.NVML_ERROR_FUNCTION_NOT_FOUND):
            raise MigError(f"{where}: nvmlDeviceGetMigMode failed: {exc}") from exc
        mode = None
    if mode is None or mode[0] != nvml.NVML_DEVICE_MIG_ENABLE:
        raise MigError(f"{where}: MIG mode is off")
    try:
        infos = gi_profile_infos(nvml, handle, where=where)
        info = next((i for i in infos.values() if int(i.id) == profile_id), None)
        if info is None:
            offered = ", ".join(str(i) for i in sorted(int(i.id) for i in infos.values()))
            raise MigError(
                f"{where}: no GPU-instance profile id {profile_id} (offered: {offered or 'none'})"
            )
        placements = possible_placements(nvml, handle, profile_id, where=where) or []
    except DiscoveryError as exc:
        raise MigError(str(exc)) from exc
    size = next((s for st, s in placements if st == start), None)
    if size is None:
        starts = ", ".join(str(st) for st, _ in placements) or "none"
        raise MigError(
            f"{where}: GPU-instance profile id {profile_id} cannot start at memory slice "
            f"{start} (possible starts: {starts})"
        )
    placement = nvml.c_nvmlGpuInstancePlacement_t()
    placement.start = start
    placement.size = size
    gi_handle = _call(
        nvml,
        where,
        nvml.nvmlDeviceCreateGpuInstanceWithPlacement,
        handle,
        profile_id,
        ctypes.pointer(placement),
    )
    gi: int | None = None
    try:
        gi = int(_call(nvml, where, nvml.nvmlGpuInstanceGetInfo, gi_handle).id)
        ci_profile = _full_compute_profile(nvml, where, gi_handle, int(info.sliceCount))
        ci_handle = _call(
            nvml, where, nvml.nvmlGpuInstanceCreateComputeInstance, gi_handle, ci_profile
        )
        ci = int(_call(nvml, where, nvml.nvmlComputeInstanceGetInfo, ci_handle).id)
    except MigError as exc:
        raise MigError(f"{exc}; {_undo(nvml, gi_handle, gi)}") from exc
    return CreatedInstance(gpu=handle, gi=gi, ci=ci)


def _undo(nvml: Any, gi_handle: Any, gi: int | None) -> str:
    """Destroy a GPU instance whose compute instance could not be made; what happened."""
    instance = "the GPU instance" if gi is None else f"GPU instance {gi}"
    try:
        nvml.nvmlGpuInstanceDestroy(gi_handle)
    except nvml.NVMLError as exc:
        logger.error("{} could not be destroyed again: {}", instance, exc)
        return f"{instance} could not be destroyed again: nvmlGpuInstanceDestroy failed: {exc}"
    return f"{instance} destroyed again"


def destroy_instance(nvml: Any, gpu_uuid: str, gi: int, ci: int) -> None:
    """Destroy compute instance `ci` of GPU instance `gi`, then the GPU instance.

    What is already gone (the GPU, MIG mode, the GPU instance, the compute
    instance) is skipped.

    Raises:
        MigError: NVML refused (a process still uses the instance: In use); one line.
    """
    where = f"GPU {gpu_uuid}"
    handle = gpu_handle(nvml, gpu_uuid)
    if handle is None:
        logger.warning("{}: no such GPU, so no GPU instance {} to destroy", where, gi)
        return
    gone = {nvml.NVML_ERROR_NOT_FOUND, nvml.NVML_ERROR_INVALID_ARGUMENT}
    try:
        gi_handle = nvml.nvmlDeviceGetGpuInstanceById(handle, gi)
    except nvml.NVMLError as exc:
        # Not found, or MIG mode off (NOT_SUPPORTED): no instance is left either way.
        if _code(exc) in gone | {nvml.NVML_ERROR_NOT_SUPPORTED}:
            return
        raise MigError(f"{where}: nvmlDeviceGetGpuInstanceById failed: {exc}") from exc
    try:
        ci_handle = nvml.nvmlGpuInstanceGetComputeInstanceById(gi_handle, ci)
    except nvml.NVMLError as exc:
        if _code(exc) not in gone:
            raise MigError(f"{where}: nvmlGpuInstanceGetComputeInstanceById failed: {exc}") from exc
        ci_handle = None
    steps = (
        (nvml.nvmlComputeInstanceDestroy, ci_handle, f"compute instance {ci} of GPU instance {gi}"),
        (nvml.nvmlGpuInstanceDestroy, gi_handle, f"GPU instance {gi}"),
    )
    for step, target, what in steps:
        if target is None:
            continue
        try:
            step(target)
        except nvml.NVMLError as exc:
            if _code(exc) in gone:
                continue
            raise MigError(f"{where}: cannot destroy {what}: {_name(step)} failed: {exc}") from exc
