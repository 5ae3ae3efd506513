"""What the simulated backend's `probe` answers while faults are injected.

Injected health events (`simulated_events`) say that a device is lost, found
again, or reset; the simulated library's `probe` must then answer as NVML
would, so recovery runs the same re-probe path as on real GPUs: a lost device
fails its probe, a reset moves its generation on. A lost GPU takes its MIG
devices with it, and a reset of a GPU counts for them too. It also holds which
GPUs the profile says cannot be registered for events (`healthEvents: false`),
for the follower to report when it starts.

This state is shared between the thread that follows the events file (the
writer) and whoever probes (the health machine), so it is guarded by a lock.
It lives on its own, apart from the event follower, because the library owns
it from the start while the follower exists only when an events file is
given.
"""

from __future__ import annotations

import threading

from devices.library import ProbeResult
from devices.model import Inventory


class DeviceFaults:
    """Injected faults of simulated devices: written by the follower, read by `probe`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._parents: dict[str, str | None] = {}  # every known UUID -> its GPU (None for GPUs)
        self._lost: set[str] = set()
        self._resets: dict[str, int] = {}
        self._unwatchable: frozenset[str] = frozenset()

    def bind(self, inventory: Inventory) -> None:
        """Learn which devices exist and which GPU each MIG device lives on."""
        parents: dict[str, str | None] = {}
        for gpu in inventory.gpus:
            parents[gpu.uuid] = None
            parents.update(dict.fromkeys((mig.uuid for mig in gpu.mig_devices), gpu.uuid))
        with self._lock:
            self._parents = parents

    def set_unwatchable(self, uuids: frozenset[str]) -> None:
        """The GPUs whose profile says they cannot be registered for health events."""
        with self._lock:
            self._unwatchable = uuids

    def unwatchable(self) -> frozenset[str]:
        with self._lock:
            return self._unwatchable

    def set_lost(self, uuid: str, lost: bool) -> None:
        with self._lock:
            if lost:
                self._lost.add(uuid)
            else:
                self._lost.discard(uuid)

    def reset(self, uuid: str) -> None:
        with self._lock:
            self._resets[uuid] = self._resets.get(uuid, 0) + 1

    def probe(self, uuid: str) -> ProbeResult:
        with self._lock:
            if uuid not in self._parents:
                return ProbeResult(ok=False, detail=f"no device {uuid} on this node")
            parent = self._parents[uuid]
            generation = self._resets.get(uuid, 0) + (self._resets.get(parent, 0) if parent else 0)
            if uuid in self._lost or parent in self._lost:
                lost = uuid if uuid in self._lost else parent
                return ProbeResult(ok=False, detail=f"{lost} is lost", generation=generation)
        return ProbeResult(ok=True, detail="simulated device answers", generation=generation)
