"""Which devices no health event can reach: the "unmonitored" marks of the health book.

A GPU the health source cannot register for events (NVML answers Not
Supported, or the registration fails and is being retried) is not unhealthy:
nothing says it is broken, and withdrawing a working GPU because it is too
old for events is what the reference stopped doing in v0.19. But an operator
must be able to tell "healthy and watched" from "healthy because nobody can
hear it", so the book keeps a mark per device, with the reason, beside its
health machine: set by an `unmonitored` event, cleared by a `watched` one.

The marks never move a device's health, never reach the kubelet and take no
part in the health machine's moves; they are shown on `/state`
(`unmonitored`) and as the `device_unmonitored` metric. A GPU-wide mark
covers the GPU's MIG devices, whose events arrive through their parent.
"""

from __future__ import annotations

from collections.abc import Iterable

from loguru import logger

from devices.health import EventKind

WATCH_KINDS = frozenset({EventKind.UNMONITORED, EventKind.WATCHED})


class Unwatched:
    """Device UUID -> why no health event can reach it; only devices that have a mark."""

    def __init__(self) -> None:
        self._reasons: dict[str, str] = {}

    def apply(self, kind: EventKind, uuids: Iterable[str], detail: str) -> list[str]:
        """Mark (`unmonitored`) or clear (`watched`) the devices; returns those that changed."""
        changed: list[str] = []
        for uuid in uuids:
            if kind is EventKind.UNMONITORED:
                reason = detail or "cannot be watched for health events"
                if self._reasons.get(uuid) != reason:
                    self._reasons[uuid] = reason
                    changed.append(uuid)
            elif self._reasons.pop(uuid, None) is not None:
                changed.append(uuid)
        if changed:
            logger.debug("health events {} for {}", kind, ", ".join(changed))
        return changed

    def reason(self, uuid: str) -> str | None:
        """Why no event reaches the device; None when it is watched."""
        return self._reasons.get(uuid)

    def clear(self) -> None:
        """Forget every mark: a new health source is about to report its own."""
        self._reasons = {}
