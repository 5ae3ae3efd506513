"""The node's device library, kept open between reconciles, as a value.

The library stays open between reconciles (NVML init is not free, and the
health source holds handles from it) and is reopened only when what selects
it changes: the simulated profile or the driver root. `discover()` runs on
the NVML worker and returns the library to use from now on beside the
inventory; only the loop installs it (and shuts the one it replaces down), so
a discovery abandoned after its deadline never swaps the library that the
health source and `/state` are using.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from devices.library import DeviceLibrary
from devices.model import Inventory
from settings import EffectiveConfig

OpenLibrary = Callable[[EffectiveConfig], DeviceLibrary]


@dataclass(frozen=True)
class NodeLibrary:
    """An opened device library, what selected it, and whether its init has succeeded.

    NVML's init is reference-counted: it is called once per opened library
    (again only after it failed), and matched by one shutdown.
    """

    library: DeviceLibrary
    key: tuple[object, ...]
    initialized: bool = False

    def shutdown(self) -> None:
        if self.initialized:
            self.library.shutdown()


def library_key(config: EffectiveConfig) -> tuple[object, ...]:
    return (config.flags.mock_nvml, config.flags.driver_root_ctr_path)


def discover(
    held: NodeLibrary | None, config: EffectiveConfig, open_library: OpenLibrary
) -> tuple[NodeLibrary, Inventory]:
    """The library to use for `config` (`held`, or a new one) and the devices it finds.

    Blocking (NVML). A new library is returned, never installed here; a
    library whose init succeeded is returned as initialized even when the
    inventory then fails, so the caller can shut it down.

    Raises:
        DiscoveryFailed: carrying the library (to install or shut down) and the error.
    """
    key = library_key(config)
    node = held if held is not None and held.key == key else None
    if node is None:
        node = NodeLibrary(open_library(config), key)
    try:
        if not node.initialized:
            node.library.init()
            node = NodeLibrary(node.library, key, initialized=True)
        return node, node.library.inventory()
    except Exception as err:
        raise DiscoveryFailed(node, err) from err


class DiscoveryFailed(Exception):
    """Discovery failed; `node` is the library as it stands, `error` why."""

    def __init__(self, node: NodeLibrary, error: Exception) -> None:
        super().__init__(str(error))
        self.node = node
        self.error = error
