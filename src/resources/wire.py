"""Encoded size of a ListAndWatch message, computed without protobuf.

The kubelet reads a plugin's ListAndWatch stream with gRPC's default 4 MiB
receive limit; a larger message is dropped and the resource silently stays
empty. Large time-slicing replica counts can reach that, so the builder checks
every device list up front, with every device counted as "Unhealthy" (the
longer health value) so a later health change can never push a list over.

Wire format (proto3; a field at its default value is not written):

    ListAndWatchResponse { repeated Device devices = 1; }
    Device      { string ID = 1; string health = 2; TopologyInfo topology = 3; }
    TopologyInfo { repeated NUMANode nodes = 1; }
    NUMANode    { int64 ID = 1; }

Every field number here is below 16, so each tag is one byte. The topology is
present exactly when the device has a NUMA node >= 0, as the kubelet package
encodes it.
"""

from __future__ import annotations

from collections.abc import Iterable

from resources.errors import ResourceError
from resources.model import Health, PluginDevice

KUBELET_MAX_MESSAGE = 4 * 1024 * 1024
_TAG = 1


def varint_size(value: int) -> int:
    """Bytes of a base-128 varint; negative int64 values take the full 10 bytes."""
    if value < 0:
        return 10
    size = 1
    while value >= 0x80:
        value >>= 7
        size += 1
    return size


def _length_delimited(payload: int) -> int:
    return _TAG + varint_size(payload) + payload


def _string_field(text: str) -> int:
    encoded = len(text.encode())
    return _length_delimited(encoded) if encoded else 0


def device_size(device: PluginDevice, *, health: Health | None = None) -> int:
    """Encoded size of one `Device` message (without its own tag and length)."""
    size = _string_field(device.id) + _string_field(str(health or device.health))
    if device.numa_node is not None and device.numa_node >= 0:
        node = _TAG + varint_size(device.numa_node) if device.numa_node else 0
        topology = _length_delimited(node)
        size += _length_delimited(topology)
    return size


def list_and_watch_size(devices: Iterable[PluginDevice], *, health: Health | None = None) -> int:
    """Encoded size of the `ListAndWatchResponse` listing `devices`.

    Args:
        health: count every device with this health instead of its own.
    """
    return sum(_length_delimited(device_size(device, health=health)) for device in devices)


def check_list_size(
    resource: str, devices: Iterable[PluginDevice], *, limit: int = KUBELET_MAX_MESSAGE
) -> int:
    """The worst-case size of the resource's device list; raise when over `limit`.

    Raises:
        ResourceError: naming the resource, the size and the limit.
    """
    listed = list(devices)
    size = list_and_watch_size(listed, health=Health.UNHEALTHY)
    if size > limit:
        raise ResourceError(
            f"the device list of resource '{resource}' ({len(listed)} devices) encodes to "
            f"{size} bytes, over the kubelet's {limit}-byte message limit; "
            "reduce the number of replicas"
        )
    return size
