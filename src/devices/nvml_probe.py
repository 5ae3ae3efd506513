"""Re-probing one GPU or MIG device through NVML, for health recovery.

After an error the health machine wants to know whether a device answers
again and whether it has been reset. NVML has no reset counter, so the probe
infers one: a device seen failing (handle lookup or a read fails, pages are
waiting to be retired, rows waiting to be remapped) and later seen clean has
been reset or re-attached, and its generation goes up by one. A sticky error
(a GPU fallen off the bus, an uncorrectable ECC error) clears only after such
a step; an error that leaves no trace NVML can see stays until the plugin
restarts, as it does in the reference plugin.

Every probe takes a fresh handle by UUID, so a stale handle cannot make a
replaced device look fine. Checks the GPU does not support are skipped,
never counted as failures. The NVML module is passed in so the discovery
backend and its tests share one (possibly fake) module.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from devices.library import ProbeResult


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class _Failed(Exception):
    """One probe step found the device not usable; the message says why."""


class NvmlProber:
    """Probes devices and remembers, per UUID, the failures that imply a later reset."""

    def __init__(self, nvml: Callable[[], Any]) -> None:
        self._nvml = nvml  # returns the module at call time (tests swap it)
        self._lock = threading.Lock()
        self._failing: set[str] = set()
        self._generation: dict[str, int] = {}

    def probe(self, uuid: str) -> ProbeResult:
        nvml = self._nvml()
        try:
            checked = self._check(nvml, uuid)
        except _Failed as failed:
            with self._lock:
                self._failing.add(uuid)
                generation = self._generation.get(uuid, 0)
            return ProbeResult(ok=False, detail=str(failed), generation=generation)
        with self._lock:
            if uuid in self._failing:
                self._failing.discard(uuid)
                self._generation[uuid] = self._generation.get(uuid, 0) + 1
            generation = self._generation.get(uuid, 0)
        return ProbeResult(ok=True, detail=checked, generation=generation)

    def _check(self, nvml: Any, uuid: str) -> str:
        handle = self._call(nvml, nvml.nvmlDeviceGetHandleByUUID, uuid)
        seen = _text(self._call(nvml, nvml.nvmlDeviceGetUUID, handle))
        if seen != uuid:
            raise _Failed(f"handle for {uuid} reports UUID {seen}")
        self._call(nvml, nvml.nvmlDeviceGetMemoryInfo, handle)
        parent = handle
        if uuid.startswith("MIG-"):
            parent = self._call(nvml, nvml.nvmlDeviceGetDeviceHandleFromMigDeviceHandle, handle)
        checks = ["handle", "memory"]
        pending = self._optional(nvml, nvml.nvmlDeviceGetRetiredPagesPendingStatus, parent)
        if pending is not None:
            checks.append("retired pages")
            if int(pending) == nvml.NVML_FEATURE_ENABLED:
                raise _Failed("retired pages pending (a reset is required)")
        rows = self._optional(nvml, nvml.nvmlDeviceGetRemappedRows, parent)
        if rows is not None:
            checks.append("row remapping")
            _corrected, _uncorrected, remap_pending, remap_failed = rows
            if remap_failed:
                raise _Failed("row remapping failed")
            if remap_pending:
                raise _Failed("row remapping pending (a reset is required)")
        return "checked " + ", ".join(checks)

    @staticmethod
    def _call(nvml: Any, fn: Callable[..., Any], *args: Any) -> Any:
        try:
            return fn(*args)
        except nvml.NVMLError as exc:
            raise _Failed(f"{getattr(fn, '__name__', fn)} failed: {exc}") from exc

    @staticmethod
    def _optional(nvml: Any, fn: Callable[..., Any], *args: Any) -> Any:
        """None where the GPU or driver does not offer the check."""
        absent = {nvml.NVML_ERROR_NOT_SUPPORTED, nvml.NVML_ERROR_FUNCTION_NOT_FOUND}
        try:
            return fn(*args)
        except nvml.NVMLError as exc:
            if getattr(exc, "value", None) in absent:
                return None
            raise _Failed(f"{getattr(fn, '__name__', fn)} failed: {exc}") from exc
