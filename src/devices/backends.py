"""Which backend serves this node, and which health source watches it.

The one place that knows both backends: NVML (`nvml`, with its event loop in
`health_nvml`) for a real node, and the simulated one (`simulated`, its
fault file followed by `simulated_events`) for a node profile. The rest of
the plugin sees only the interfaces (`library.DeviceLibrary`,
`health.HealthSource`), which the backends implement; keeping the choice
here, above both, is what lets them import those interfaces without an
import circle.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from loguru import logger

from devices.errors import MigError
from devices.health import HealthSource, NullSource
from devices.health_nvml import NvmlHealthSource
from devices.library import DeviceLibrary, ProbeResult
from devices.model import Inventory, MigDevice
from devices.nvml import NvmlLibrary
from devices.simulated import SimulatedLibrary
from devices.simulated_events import SimulatedEventSource
from devices.xids import XidPolicy
from foundation.errors import PermanentError

__all__ = ["MIG_STATE_ENV", "UnsupportedDiscovery", "open_health_source", "open_library"]

# Where a simulated node keeps the MIG instances DRA's dynamic MIG created
# (`simulated_mig`): set, they survive a restart of the plugin; unset, they live
# in the process's memory.
MIG_STATE_ENV = "MOCK_NVML_STATE"


class UnsupportedDiscovery(PermanentError):
    """The configured discovery strategy has no backend here; the message says what does."""


class _Unsupported:
    """Stands in for a backend this plugin does not have: every start fails, naming why."""

    def __init__(self, strategy: str) -> None:
        self._strategy = strategy

    @property
    def name(self) -> str:
        return f"unsupported:{self._strategy}"

    def init(self) -> None:
        raise UnsupportedDiscovery(
            f"--device-discovery-strategy={self._strategy} is not supported: this plugin "
            "discovers GPUs through NVML only; use auto or nvml (or --mock-nvml to simulate "
            "a node)"
        )

    def shutdown(self) -> None:
        pass

    def inventory(self) -> Inventory:
        self.init()
        raise AssertionError("unreachable")

    def probe(self, uuid: str) -> ProbeResult:
        return ProbeResult(ok=False, detail=f"{self.name}: no device library")

    def create_mig(self, gpu_uuid: str, profile_id: int, start: int) -> MigDevice:
        raise MigError(f"GPU {gpu_uuid}: {self.name}: no device library")

    def destroy_mig(self, gpu_uuid: str, gi: int, ci: int) -> None:
        raise MigError(f"GPU {gpu_uuid}: {self.name}: no device library")


def open_library(
    mock: str | None,
    *,
    driver_root: str = "/",
    strategy: str = "auto",
    environ: Mapping[str, str] | None = None,
) -> DeviceLibrary:
    """Choose the backend. Nothing is read or loaded until `init()`.

    Args:
        mock: None for the real NVML backend; otherwise a node profile name
            (`config/nodes/<name>.yaml`, e.g. `dgx-a100`) or a path to a YAML profile.
        driver_root: where the driver's files are visible to this process (the
            container-side driver root, e.g. `/driver-root`). `libnvidia-ml.so.1`
            is loaded from there when present; otherwise, and for `/`, the
            system library search path applies.
        strategy: ``--device-discovery-strategy``. ``auto`` and ``nvml`` use
            NVML; the reference's ``tegra`` (and anything else) gets a backend
            whose `init` fails with a permanent error saying what is supported,
            rather than an NVML error on a system without NVML.
        environ: where `MOCK_NVML_STATE` is read (default: this process's
            environment): the simulated node's MIG state file, which every
            process opening the node (plugin, labeller, MPS daemon) shares.
    """
    if mock is None:
        if strategy not in ("auto", "nvml"):
            return _Unsupported(strategy)
        return NvmlLibrary(driver_root=driver_root)
    state = (os.environ if environ is None else environ).get(MIG_STATE_ENV, "")
    return SimulatedLibrary.from_argument(mock, state=Path(state) if state else None)


def open_health_source(
    library: DeviceLibrary,
    inventory: Inventory,
    *,
    events_file: str | None,
    policy: XidPolicy,
) -> HealthSource:
    """The watcher for this backend and inventory (not started).

    A source watches the inventory it was opened with; open a new one when
    the inventory changes. The simulated backend is watched through
    `events_file` (`--mock-nvml-events`); the real one through NVML events.
    """
    if policy.all_disabled:
        return NullSource("disabled by DP_DISABLE_HEALTHCHECKS")
    if isinstance(library, SimulatedLibrary):
        if not events_file:
            return NullSource("simulated devices and no --mock-nvml-events file")
        return SimulatedEventSource(
            events_file, faults=library.faults, inventory=inventory, policy=policy
        )
    if events_file:
        logger.warning("--mock-nvml-events applies to the simulated backend only; ignored")
    if not inventory.gpus:
        return NullSource("no GPUs on this node")
    return NvmlHealthSource(library, inventory, policy=policy)
