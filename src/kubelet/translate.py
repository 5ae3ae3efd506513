"""Plain resource objects <-> v1beta1 protobuf messages.

Kept apart from the servicer so the mapping (field by field, order preserved)
is tested on its own and the servicer stays a thin dispatcher.
"""

from __future__ import annotations

from collections.abc import Iterable

from kubelet.api import api_pb2
from resources.edits import ContainerEdits
from resources.model import PluginDevice


def device_message(device: PluginDevice) -> api_pb2.Device:
    message = api_pb2.Device(ID=device.id, health=str(device.health))
    if device.numa_node is not None and device.numa_node >= 0:
        message.topology.nodes.append(api_pb2.NUMANode(ID=device.numa_node))
    return message


def list_and_watch_response(devices: Iterable[PluginDevice]) -> api_pb2.ListAndWatchResponse:
    return api_pb2.ListAndWatchResponse(devices=[device_message(d) for d in devices])


def container_response(edits: ContainerEdits) -> api_pb2.ContainerAllocateResponse:
    response = api_pb2.ContainerAllocateResponse()
    response.envs.update(edits.envs)
    response.annotations.update(edits.annotations)
    response.mounts.extend(
        api_pb2.Mount(
            container_path=mount.container_path,
            host_path=mount.host_path,
            read_only=mount.read_only,
        )
        for mount in edits.mounts
    )
    response.devices.extend(
        api_pb2.DeviceSpec(
            container_path=node.container_path,
            host_path=node.host_path,
            permissions=node.permissions,
        )
        for node in edits.devices
    )
    response.cdi_devices.extend(api_pb2.CDIDevice(name=name) for name in edits.cdi_devices)
    return response
