"""What one container gets for an allocation, per device-list strategy.

The order of operations is the reference's, because it decides which value
wins when strategies overlap and in which order mounts and devices appear:

1. device IDs: the underlying UUIDs (replica suffix stripped) or the NVML
   indices, in request order, without repeats;
2. CDI (`cdi-annotations` / `cdi-cri`): the qualified names of the GPUs, then
   the IMEX channels, then gdrcopy/gds/mofed; one annotation
   `<prefix>nvidia-device-plugin_<fresh uuid4>` holding them comma-joined,
   and/or the CRI `cdi_devices` field;
3. MPS: `CUDA_MPS_PIPE_DIRECTORY` (and, for a container holding several
   replicas of one GPU, the sum of their limits: `resources.mps_share`), then
   the pipe and `/dev/shm` mounts;
4. `NVIDIA_GDRCOPY`, `NVIDIA_GDS`, `NVIDIA_MOFED` = `enabled`;
5. stop here when every strategy is a CDI one (or none is set);
6. `envvar`: `NVIDIA_VISIBLE_DEVICES` and `NVIDIA_IMEX_CHANNELS`;
7. `volume-mounts`: `NVIDIA_VISIBLE_DEVICES` becomes the marker directory
   (overriding `envvar`), one `/dev/null` mount per device then per channel;
8. `passDeviceSpecs`: the control nodes that exist in the plugin container,
   the nodes of every requested ID (replicas of one GPU repeat its node, as in
   the reference), then the IMEX channel nodes, host paths under the dev root.

The reference takes index-strategy IDs from a map, so their order is random;
here it is request order.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from resources.builder import Behaviour
from resources.cdi_names import (
    ANNOTATION_PLUGIN_NAME,
    GPU_CLASS,
    IMEX_CLASS,
    annotation_key,
    annotation_name_error,
    qualified_name,
    qualified_name_error,
)
from resources.devnodes import CONTROL_NODES, imex_channel_path
from resources.edits import ContainerEdits, DeviceNode, Mount
from resources.errors import AllocationError
from resources.ids import strip_replica, unique
from resources.model import PluginDevice
from resources.mps_share import container_limits
from resources.options import CDI_STRATEGIES, DeviceIdStrategy, DeviceListStrategy, join_root

VOLUME_MOUNT_ROOT = "/var/run/nvidia-container-devices"
VISIBLE_DEVICES = "NVIDIA_VISIBLE_DEVICES"
IMEX_CHANNELS = "NVIDIA_IMEX_CHANNELS"
MPS_PIPE_ENV = "CUDA_MPS_PIPE_DIRECTORY"


def device_ids(
    ids: Sequence[str], devices: Mapping[str, PluginDevice], strategy: DeviceIdStrategy
) -> list[str]:
    """What names the requested devices inside the container, in request order."""
    if strategy is DeviceIdStrategy.INDEX:
        return unique(devices[device_id].index for device_id in ids if device_id in devices)
    return unique(strip_replica(device_id) for device_id in ids)


def cdi_device_names(ids: Sequence[str], behaviour: Behaviour) -> list[str]:
    names = [qualified_name(GPU_CLASS, device_id) for device_id in ids]
    names += [qualified_name(IMEX_CLASS, channel) for channel in behaviour.imex_channels]
    names += [qualified_name(extra, "all") for extra in behaviour.cdi_extra_classes]
    return names


def container_edits(
    *,
    resource: str,
    behaviour: Behaviour,
    devices: Mapping[str, PluginDevice],
    ids: Sequence[str],
    new_response_id: Callable[[], str],
    node_exists: Callable[[str], bool],
    mps_thread_percentage: int | None = None,
) -> ContainerEdits:
    """Edits for one container request whose IDs were already validated.

    Args:
        resource: full resource name (it names the MPS directories).
        devices: the resource's devices by kubelet ID.
        ids: the requested kubelet IDs, as the kubelet sent them.
        new_response_id: a fresh UUIDv4 string per call (CDI annotation key).
        node_exists: whether a control node exists in the plugin container.
        mps_thread_percentage: one MPS replica's active thread percentage.

    Raises:
        AllocationError: a CDI name or annotation key breaks the CDI rules.
    """
    strategies = behaviour.strategies
    visible = device_ids(ids, devices, behaviour.device_id_strategy)
    envs: dict[str, str] = {}
    mounts: list[Mount] = []
    nodes: list[DeviceNode] = []
    annotations: dict[str, str] = {}
    cdi_devices: tuple[str, ...] = ()

    if strategies & CDI_STRATEGIES:
        response_id = new_response_id()
        names = cdi_device_names(visible, behaviour)
        if names and DeviceListStrategy.CDI_ANNOTATIONS in strategies:
            key = annotation_key(behaviour.cdi_annotation_prefix, response_id)
            _check_annotation(f"{ANNOTATION_PLUGIN_NAME}_{response_id}", names)
            annotations[key] = ",".join(names)
        if names and DeviceListStrategy.CDI_CRI in strategies:
            cdi_devices = tuple(names)

    if behaviour.mps is not None:
        envs[MPS_PIPE_ENV] = behaviour.mps.pipe_dir
        envs.update(container_limits(ids, devices, mps_thread_percentage))
        mounts.append(Mount(behaviour.mps.pipe_dir, behaviour.mps.host_pipe_dir))
        mounts.append(Mount("/dev/shm", behaviour.mps.host_shm))

    for enabled, variable in (
        (behaviour.gdrcopy, "NVIDIA_GDRCOPY"),
        (behaviour.gds, "NVIDIA_GDS"),
        (behaviour.mofed, "NVIDIA_MOFED"),
    ):
        if enabled:
            envs[variable] = "enabled"

    if strategies <= CDI_STRATEGIES:
        return ContainerEdits(envs, tuple(mounts), (), annotations, cdi_devices)

    channels = behaviour.imex_channels
    if DeviceListStrategy.ENVVAR in strategies:
        envs[VISIBLE_DEVICES] = ",".join(visible)
        if channels:
            envs[IMEX_CHANNELS] = ",".join(channels)
    if DeviceListStrategy.VOLUME_MOUNTS in strategies:
        envs[VISIBLE_DEVICES] = VOLUME_MOUNT_ROOT
        mounts += [Mount(join_root(VOLUME_MOUNT_ROOT, v), "/dev/null") for v in visible]
        mounts += [Mount(join_root(VOLUME_MOUNT_ROOT, f"imex/{c}"), "/dev/null") for c in channels]
    if behaviour.pass_device_specs:
        paths = [path for path in CONTROL_NODES if node_exists(path)]
        paths += [path for device_id in ids for path in devices[device_id].paths]
        paths += [imex_channel_path(channel) for channel in channels]
        nodes = [DeviceNode(p, join_root(behaviour.host_dev_root, p)) for p in paths]
    return ContainerEdits(envs, tuple(mounts), tuple(nodes), annotations, cdi_devices)


def _check_annotation(name: str, values: Sequence[str]) -> None:
    problems = [annotation_name_error(name)] + [qualified_name_error(v) for v in values]
    problem = next((p for p in problems if p), None)
    if problem:
        raise AllocationError(
            "failed to get allocate response: failed to get allocate response for CDI: "
            f"failed to add CDI annotations: CDI annotation failed: {problem}"
        )


def referenced_cdi_names(devices: Sequence[PluginDevice], behaviour: Behaviour) -> frozenset[str]:
    """Every qualified CDI name an Allocate answer of this resource can contain.

    Empty when no CDI strategy is on. The reconciler publishes a device list
    only once all of these are defined by a spec on disk.
    """
    if not behaviour.strategies & CDI_STRATEGIES:
        return frozenset()
    by_id = {device.id: device for device in devices}
    ids = device_ids(list(by_id), by_id, behaviour.device_id_strategy)
    return frozenset(cdi_device_names(ids, behaviour))
