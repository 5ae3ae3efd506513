"""The NVML event loop: XID and double-bit ECC events of every GPU, in one thread.

One event set for the whole node, each physical GPU registered once (the
reference registers a GPU once per replica or MIG device, upstream #2052)
for XID critical, double-bit and single-bit ECC events, masked by what the
GPU supports. MIG devices need no registration: their errors arrive on the
parent GPU carrying GPU- and compute-instance ids, and the health machine
fans them out.

What is deliberately different from the reference:

- the wait is bounded at about a second so the stop flag is seen promptly;
  NVML's timeout means "nothing happened";
- any other wait error is `degraded` (once), followed by capped backoff and,
  after a few failures in a row, a fresh event set; the first clean wait
  afterwards is `restored`. The reference instead marked every device
  unhealthy on each failed wait, in a tight loop (upstream #669);
- a GPU whose registration fails is `lost` on its own and registration is
  retried periodically (`found` once it succeeds);
- a GPU that does not support the events at all (NVML answers Not Supported,
  or it offers none of the three kinds) is logged with the reference's words,
  stays healthy and is not retried, as in the reference from v0.19 on (its
  v0.17 marked it unhealthy for good). Either way the GPU is reported
  `unmonitored` with the reason (and `watched` once a retry registers it), so
  the status shows which GPUs no event can reach;
- an event whose device cannot be named is logged and dropped instead of
  marking every device unhealthy;
- single-bit (corrected) ECC events are registered, as the reference does,
  but not reported.
"""

from __future__ import annotations

import time
from typing import Any

import pynvml
from loguru import logger

from devices.health import EventKind, HealthEvent, Post, ThreadedSource
from devices.library import DeviceLibrary
from devices.model import Inventory
from devices.xids import XidPolicy
from foundation.backoff import Backoff

NO_INSTANCE = 0xFFFFFFFF  # gpuInstanceId / computeInstanceId of a GPU-wide event
WAIT_MS = 1000
REREGISTER_SECONDS = 30.0
FRESH_SET_AFTER = 3  # failed waits in a row before the event set is rebuilt


class _NotWatched(Exception):
    """A GPU could not be registered for events (its NVML calls fail)."""


class _Unwatchable(Exception):
    """A GPU that NVML cannot watch for the events we need (Not Supported)."""


class NvmlHealthSource(ThreadedSource):
    """Watches every GPU of an inventory through one NVML event set."""

    def __init__(
        self,
        library: DeviceLibrary,
        inventory: Inventory,
        *,
        policy: XidPolicy,
        nvml: Any = None,
        wait_ms: int = WAIT_MS,
        reregister_seconds: float = REREGISTER_SECONDS,
        backoff: Backoff = Backoff(initial=1.0, cap=30.0),  # noqa: B008 (frozen)
    ) -> None:
        super().__init__("health-nvml")
        self._library = library
        self._uuids = tuple(gpu.uuid for gpu in inventory.gpus)
        self._policy = policy
        self._nvml = nvml if nvml is not None else pynvml
        self._wait_ms = wait_ms
        self._reregister = reregister_seconds
        self._backoff = backoff
        self._unmonitored: set[str] = set()  # reported UNMONITORED and not WATCHED since
        self._mask = (
            self._nvml.nvmlEventTypeXidCriticalError
            | self._nvml.nvmlEventTypeDoubleBitEccError
            | self._nvml.nvmlEventTypeSingleBitEccError
        )

    # -- the thread -------------------------------------------------------------

    def _run(self, post: Post) -> None:
        nvml = self._nvml
        event_set: Any = None
        started = False
        degraded: str | None = None
        failures = 0
        pending: set[str] = set()  # GPUs whose registration should be retried
        retry_at = 0.0
        try:
            while not self._stopping.is_set():
                if not started or event_set is None:
                    try:
                        if not started:
                            self._library.init()
                            started = True
                        event_set = nvml.nvmlEventSetCreate()
                    except Exception as exc:
                        degraded = self._degrade(post, degraded, f"cannot watch events: {exc}")
                        self._stopping.wait(self._backoff.delay(failures))
                        failures += 1
                        continue
                    pending = self._register_all(event_set, post)
                    retry_at = time.monotonic() + self._reregister
                if pending and time.monotonic() >= retry_at:
                    pending = self._register_some(event_set, pending, post)
                    retry_at = time.monotonic() + self._reregister
                try:
                    data = nvml.nvmlEventSetWait_v2(event_set, self._wait_ms)
                except nvml.NVMLError as exc:
                    if getattr(exc, "value", None) == nvml.NVML_ERROR_TIMEOUT:
                        self._restore(post, degraded)
                        degraded, failures = None, 0
                        continue
                    degraded = self._degrade(post, degraded, f"waiting for events failed: {exc}")
                    failures += 1
                    if failures >= FRESH_SET_AFTER:
                        self._free(event_set)
                        event_set = None
                    self._stopping.wait(self._backoff.delay(failures - 1))
                    continue
                self._restore(post, degraded)
                degraded, failures = None, 0
                self._dispatch(data, post)
        finally:
            self._free(event_set)
            if started:
                self._library.shutdown()

    def _degrade(self, post: Post, current: str | None, detail: str) -> str:
        if current != detail:
            logger.warning("device health monitoring degraded: {}", detail)
            post(HealthEvent(EventKind.DEGRADED, detail=detail))
        return detail

    def _restore(self, post: Post, current: str | None) -> None:
        if current is not None:
            logger.info("device health monitoring restored")
            post(HealthEvent(EventKind.RESTORED, detail="waiting for events works again"))

    def _free(self, event_set: Any) -> None:
        if event_set is None:
            return
        try:
            self._nvml.nvmlEventSetFree(event_set)
        except self._nvml.NVMLError as exc:
            logger.debug("freeing the NVML event set failed: {}", exc)

    # -- registration -----------------------------------------------------------

    def _register_all(self, event_set: Any, post: Post) -> set[str]:
        return self._register_some(event_set, set(self._uuids), post, first=True)

    def _register_some(
        self, event_set: Any, uuids: set[str], post: Post, *, first: bool = False
    ) -> set[str]:
        """Register `uuids`; returns those to retry later."""
        failed: set[str] = set()
        for uuid in sorted(uuids):
            try:
                self._register(event_set, uuid)
            except _Unwatchable as exc:
                if uuid not in self._unmonitored:  # the set may be rebuilt: say it once
                    logger.warning("Device {} is too old to support healthchecking.", uuid)
                self._unmonitored.add(uuid)
                post(HealthEvent(EventKind.UNMONITORED, uuid, detail=str(exc)))
                continue
            except _NotWatched as exc:
                failed.add(uuid)
                logger.warning("cannot watch {} for health events: {}", uuid, exc)
                detail = f"cannot watch for events: {exc}"
                self._unmonitored.add(uuid)
                post(HealthEvent(EventKind.LOST, uuid, detail=detail))
                post(HealthEvent(EventKind.UNMONITORED, uuid, detail=detail))
                continue
            if uuid in self._unmonitored:  # also when a rebuilt event set registers it
                self._unmonitored.discard(uuid)
                post(HealthEvent(EventKind.WATCHED, uuid))
            if not first:
                post(HealthEvent(EventKind.FOUND, uuid, detail="watching for events again"))
        return failed

    def _register(self, event_set: Any, uuid: str) -> None:
        """Register one GPU for the events it supports.

        Raises:
            _Unwatchable: NVML does not support those events on this GPU.
            _NotWatched: an NVML call failed otherwise (retried later).
        """
        nvml = self._nvml
        try:
            handle = nvml.nvmlDeviceGetHandleByUUID(uuid)
        except nvml.NVMLError as exc:
            raise _NotWatched(str(exc)) from exc
        try:
            supported = nvml.nvmlDeviceGetSupportedEventTypes(handle)
        except nvml.NVMLError as exc:
            if self._not_supported(exc):
                raise _Unwatchable(f"nvmlDeviceGetSupportedEventTypes: {exc}") from exc
            raise _NotWatched(str(exc)) from exc
        mask = int(supported) & self._mask
        if mask == 0:
            raise _Unwatchable("supports none of the XID and ECC events")
        try:
            nvml.nvmlDeviceRegisterEvents(handle, mask, event_set)
        except nvml.NVMLError as exc:
            if self._not_supported(exc):
                raise _Unwatchable(f"nvmlDeviceRegisterEvents: {exc}") from exc
            raise _NotWatched(f"nvmlDeviceRegisterEvents failed: {exc}") from exc

    def _not_supported(self, exc: Exception) -> bool:
        return bool(getattr(exc, "value", None) == self._nvml.NVML_ERROR_NOT_SUPPORTED)

    # -- events -------------------------------------------------------------------

    def _dispatch(self, data: Any, post: Post) -> None:
        nvml = self._nvml
        kind_bits = int(data.eventType)
        if kind_bits & nvml.nvmlEventTypeXidCriticalError:
            xid: int | None = int(data.eventData)
            if self._policy.is_disabled(int(data.eventData)):
                logger.debug("XID {} skipped: disabled for health checks", xid)
                return
            kind = EventKind.XID
        elif kind_bits & nvml.nvmlEventTypeDoubleBitEccError:
            kind, xid = EventKind.ECC, None
        else:
            return  # corrected (single-bit) ECC errors do not affect health
        try:
            uuid = nvml.nvmlDeviceGetUUID(data.device)
        except nvml.NVMLError as exc:
            logger.warning("dropped a {} event: cannot tell which GPU sent it: {}", kind, exc)
            return
        uuid = uuid.decode() if isinstance(uuid, bytes) else str(uuid)
        gi = int(data.gpuInstanceId)
        ci = int(data.computeInstanceId)
        event = HealthEvent(
            kind,
            uuid,
            xid=xid,
            gi=None if gi == NO_INSTANCE else gi,
            ci=None if ci == NO_INSTANCE else ci,
            detail="reported by NVML",
        )
        logger.debug("health event: {}", event.describe())
        post(event)
