"""The one interface the rest of the plugin uses to learn about the node's GPUs.

Two backends implement it: `nvml.NvmlLibrary` reads a real driver and
`simulated.SimulatedLibrary` reads a YAML node profile, so the whole plugin
(demo, tests, local development) runs unchanged on a machine with no GPU;
`backends.open_library` chooses one. Discovery is a single call returning a
frozen `Inventory`: callers compare inventories instead of holding device
handles, which keeps NVML state inside the backend and makes "did the
hardware change?" an equality test.

`probe` is the health machine's second opinion: after an error it asks the
backend whether one device answers again, so a GPU can return to service
without a plugin restart, and a failing device never fails the others.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from devices.model import Inventory, MigDevice


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

    def create_mig(self, gpu_uuid: str, profile_id: int, start: int) -> MigDevice:
        """Create a GPU instance of `profile_id` at memory slice `start`, and a compute
        instance spanning it; the new MIG device as discovery would report it.

        Changes the GPU: only DRA's dynamic MIG calls it, for a claim it prepares.

        Raises:
            MigError: the GPU is unknown, MIG mode is off, the placement is taken or
                invalid, or NVML refused; nothing is left half made (one line).
        """
        ...

    def destroy_mig(self, gpu_uuid: str, gi: int, ci: int) -> None:
        """Destroy compute instance `ci` of GPU instance `gi`, then the GPU instance.

        An instance that is already gone is not an error (a retry after a crash).

        Raises:
            MigError: NVML refused (the instance is in use, for example); one line.
        """
        ...
