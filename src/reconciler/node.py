"""The node's side of a reconcile: the device library and the CDI spec files.

The library stays open between reconciles (NVML init is not free, and the
health source holds handles from it) and is reopened only when what selects
it changes: the simulated profile or the driver root. CDI specs are written
only when their content changes, atomically, so a runtime never reads half a
file.
"""

from __future__ import annotations

from collections.abc import Callable

from devices.library import DeviceLibrary
from devices.model import Inventory
from foundation.errors import TransientError
from reconciler.plan import Plan
from resources.cdi_spec import write_spec
from settings import EffectiveConfig


class CdiWriteError(TransientError):
    """The CDI spec directory is not writable (yet)."""


class NodeDevices:
    def __init__(self, open_library: Callable[[EffectiveConfig], DeviceLibrary]) -> None:
        self._open = open_library
        self.library: DeviceLibrary | None = None
        self._key: tuple[object, ...] | None = None
        self._initialized = False

    def inventory(self, config: EffectiveConfig) -> Inventory:
        """Discover the devices, initialising the library the first time it works.

        NVML's init is reference-counted: it is called once per opened
        library (again only after it failed), and matched by one shutdown.

        Raises:
            NvmlUnavailable, DiscoveryError, ProfileError: from the backend.
        """
        key = (config.flags.mock_nvml, config.flags.driver_root_ctr_path)
        if self.library is None or key != self._key:
            self.shutdown()
            self.library = self._open(config)
            self._key = key
        if not self._initialized:
            self.library.init()
            self._initialized = True
        return self.library.inventory()

    def shutdown(self) -> None:
        if self.library is not None:
            if self._initialized:
                self.library.shutdown()
            self.library = None
            self._initialized = False

    @staticmethod
    def write_cdi(plan: Plan, previous: Plan | None) -> None:
        """Write the plan's CDI specs unless the applied plan has the same ones.

        Raises:
            CdiWriteError: the directory is missing or not writable.
        """
        if not plan.cdi or (previous is not None and previous.cdi == plan.cdi):
            return
        directory = plan.config.flags.cdi_spec_dir
        try:
            for spec in plan.cdi:
                write_spec(directory, spec)
        except OSError as err:
            raise CdiWriteError(f"cannot write CDI specs to {directory}: {err.strerror}") from err
