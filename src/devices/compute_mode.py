"""Changing a GPU's compute mode: the one write the device layer offers.

MPS needs each shared GPU in ``EXCLUSIVE_PROCESS`` mode while its control
daemon runs (only the MPS server then runs work on it) and back in
``DEFAULT`` afterwards. The reference runs ``nvidia-smi -c`` for that; here
it is one NVML call (``nvmlDeviceSetComputeMode``) behind this small
interface, so no extra binary has to be shipped, found on ``PATH`` or
stood in for in tests. Both backends implement it: the NVML one calls the
driver, the simulated one records the mode on the simulated device (and can
be told to refuse, to test the failure path).

It is a separate protocol rather than a method of `DeviceLibrary` because
only the MPS daemon writes; the plugin and the labeller only read.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Protocol, runtime_checkable

from foundation.errors import TransientError

__all__ = ["ComputeMode", "ComputeModeControl", "ComputeModeError"]


class ComputeMode(StrEnum):
    """NVML's compute modes, named as ``nvidia-smi -c`` names them."""

    DEFAULT = "DEFAULT"
    PROHIBITED = "PROHIBITED"
    EXCLUSIVE_PROCESS = "EXCLUSIVE_PROCESS"


class ComputeModeError(TransientError):
    """The driver refused a compute-mode change (or read); one line naming the GPU."""


@runtime_checkable
class ComputeModeControl(Protocol):
    """Read and set the compute mode of a GPU, by UUID. The library must be initialised."""

    def compute_mode(self, uuid: str) -> ComputeMode:
        """The GPU's current compute mode. Raises `ComputeModeError`."""
        ...

    def set_compute_mode(self, uuid: str, mode: ComputeMode) -> None:
        """Put the GPU in ``mode`` (needs root on a real node). Raises `ComputeModeError`."""
        ...
