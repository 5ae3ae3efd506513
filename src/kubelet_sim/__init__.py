"""A kubelet simulator: the device manager side of the device-plugin API.

Used by the demo and the integration tests in place of a real kubelet. It serves
registrations on `kubelet.sock`, follows each plugin's ListAndWatch stream, makes
the kubelet's calls (Allocate, GetPreferredAllocation, ...) on request, and can
simulate a kubelet restart. Given a plugins_registry directory it also plays the
kubelet's DRA side: it registers the DRA kubelet plugins found there and calls
NodePrepareResources/NodeUnprepareResources on request. `KubeletSimulator` is the
async API; `kubelet-sim` (`kubelet_sim.cli`) is the command line around it.
"""

from __future__ import annotations

from kubelet_sim.client import PluginCallError, PluginClient
from kubelet_sim.dra import DriverNotRegistered
from kubelet_sim.engine import (
    DEFAULT_DIRECTORY,
    KUBELET_SOCKET,
    KubeletSimulator,
    ResourceNotRegistered,
    SimulatorError,
)
from kubelet_sim.model import (
    Counters,
    DeviceInfo,
    DraDeviceHealth,
    DraDriverView,
    Event,
    EventKind,
    PluginOptions,
    ResourceView,
    Snapshot,
)
from kubelet_sim.snapshot_file import SNAPSHOT_NAME, read_snapshot

__all__ = [
    "DEFAULT_DIRECTORY",
    "KUBELET_SOCKET",
    "SNAPSHOT_NAME",
    "Counters",
    "DeviceInfo",
    "DraDeviceHealth",
    "DraDriverView",
    "DriverNotRegistered",
    "Event",
    "EventKind",
    "KubeletSimulator",
    "PluginCallError",
    "PluginClient",
    "PluginOptions",
    "ResourceNotRegistered",
    "ResourceView",
    "SimulatorError",
    "Snapshot",
    "read_snapshot",
]
