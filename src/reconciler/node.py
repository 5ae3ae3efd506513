"""The node's device library, kept open between reconciles.

The library stays open between reconciles (NVML init is not free, and the
health source holds handles from it) and is reopened only when what selects
it changes: the simulated profile or the driver root.
"""

from __future__ import annotations

from collections.abc import Callable

from devices.library import DeviceLibrary
from devices.model import Inventory
from settings import EffectiveConfig


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
