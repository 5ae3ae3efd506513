"""`ComputeModeControl` over NVML: ``nvmlDeviceGetComputeMode`` / ``SetComputeMode``.

Kept apart from discovery (`devices.nvml`), which only reads: this is the one
place where the plugin's code changes a GPU setting, and only the MPS daemon
calls it. The `pynvml` module is passed in by `NvmlLibrary`, so a test that
swaps the module swaps it here too.
"""

from __future__ import annotations

from types import ModuleType

from devices.compute_mode import ComputeMode, ComputeModeError

__all__ = ["get_compute_mode", "set_compute_mode"]

_CODES = {
    ComputeMode.DEFAULT: "NVML_COMPUTEMODE_DEFAULT",
    ComputeMode.PROHIBITED: "NVML_COMPUTEMODE_PROHIBITED",
    ComputeMode.EXCLUSIVE_PROCESS: "NVML_COMPUTEMODE_EXCLUSIVE_PROCESS",
}


def _handle(nvml: ModuleType, uuid: str) -> object:
    try:
        return nvml.nvmlDeviceGetHandleByUUID(uuid)
    except nvml.NVMLError as exc:
        raise ComputeModeError(f"{uuid}: nvmlDeviceGetHandleByUUID failed: {exc}") from exc


def get_compute_mode(nvml: ModuleType, uuid: str) -> ComputeMode:
    handle = _handle(nvml, uuid)
    try:
        code = nvml.nvmlDeviceGetComputeMode(handle)
    except nvml.NVMLError as exc:
        raise ComputeModeError(f"{uuid}: nvmlDeviceGetComputeMode failed: {exc}") from exc
    for mode, name in _CODES.items():
        if code == getattr(nvml, name):
            return mode
    raise ComputeModeError(f"{uuid}: unknown compute mode {code}")


def set_compute_mode(nvml: ModuleType, uuid: str, mode: ComputeMode) -> None:
    handle = _handle(nvml, uuid)
    try:
        nvml.nvmlDeviceSetComputeMode(handle, getattr(nvml, _CODES[mode]))
    except nvml.NVMLError as exc:
        raise ComputeModeError(
            f"{uuid}: cannot set compute mode {mode}: nvmlDeviceSetComputeMode failed: {exc}"
        ) from exc
