"""The one interface the rest of the plugin uses to learn about the node's GPUs.

Two backends implement it: `nvml.NvmlLibrary` reads a real driver and
`simulated.SimulatedLibrary` reads a YAML node profile, so the whole plugin
(demo, tests, local development) runs unchanged on a machine with no GPU.
Discovery is a single call returning a frozen `Inventory`: callers compare
inventories instead of holding device handles, which keeps NVML state inside
the backend and makes "did the hardware change?" an equality test.

`probe` is the health machine's second opinion: after an error it asks the
backend whether one device answers again, so a GPU can return to service
without a plugin restart, and a failing device never fails the others.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from devices.model import Inventory
from foundation.errors import PermanentError


@dataclass(frozen=True)
class ProbeResult:
    """What a fresh look at one GPU or MIG device found.

    `generation` counts the resets the backend has observed for the device
    (the simulated backend counts injected resets; NVML counts a device seen
    failing or with a reset pending and later answering cleanly). A sticky
    error clears only once the generation has moved past the one seen when
    the error arrived.
    """

    ok: bool
    detail: str = ""  # why not ok (one line), or what was checked
    generation: int = 0


@runtime_checkable
class DeviceLibrary(Protocol):
    """A source of device inventories. `init` before `inventory`, `shutdown` when done."""

    @property
    def name(self) -> str:
        """Short description for logs and `/state`, e.g. `nvml` or `simulated:dgx-a100`."""
        ...

    def init(self) -> None:
        """Start the library.

        Raises:
            NvmlUnavailable: the library cannot start; the message is one line.
            ProfileError: (simulated backend) the node profile is missing or invalid.
        """
        ...

    def shutdown(self) -> None:
        """Release what `init` acquired. Never raises; safe to call more than once."""
        ...

    def inventory(self) -> Inventory:
        """Discover every GPU of the node in one pass.

        Raises:
            DiscoveryError: a device could not be read (the message names it), or the
                library is not initialised.
            NvmlUnavailable: (simulated backend) the profile now says NVML fails.
            ProfileError: (simulated backend) the profile was edited into an invalid state.
        """
        ...

    def probe(self, uuid: str) -> ProbeResult:
        """Look at one GPU or MIG device afresh (new handle, pending retirements or remaps).

        Never raises: a failing call is a result with `ok` false naming the call.
        """
        ...


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


def open_library(
    mock: str | None, *, driver_root: str = "/", strategy: str = "auto"
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
    """
    if mock is None:
        if strategy not in ("auto", "nvml"):
            return _Unsupported(strategy)
        from devices.nvml import NvmlLibrary

        return NvmlLibrary(driver_root=driver_root)
    from devices.simulated import SimulatedLibrary

    return SimulatedLibrary.from_argument(mock)
