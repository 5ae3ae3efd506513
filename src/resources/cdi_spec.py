"""CDI spec files for the CDI device-list strategies.

One JSON spec per class, written to `/var/run/cdi/<vendor>-<class>.json`:

* `k8s.device-plugin.nvidia.com/gpu` -- one device per GPU (MIG-enabled
  parents included, as the reference lists them) and per MIG device, named by
  the device ID strategy (`GPU-...`/`MIG-...` or `0`/`1:0`) and sorted by
  name. A GPU carries its `/dev/nvidiaN` and its DRM nodes with their hooks, a
  MIG device its parent's node and its two capability nodes (a graphics
  profile, `+gfx`, also its parent's DRM nodes with their hooks). The common edits
  carry the driver (`cdi.driver`): control nodes, libraries, binaries,
  firmware, IPC sockets, graphics files, the hooks, and
  `NVIDIA_VISIBLE_DEVICES=void`. The spec must be complete: nvidia-container-
  runtime reads `void` as "inject nothing", so a spec without the driver
  leaves every CUDA workload without `libcuda.so.1`.
* `.../imex-channel` -- one device per discovered channel, named by its ID;
* `.../gdrcopy`, `.../gds`, `.../mofed` -- a single device `all` with the
  feature's device nodes (and, for GDS, the cuFile config and udev state),
  only when enabled and some node was found (the reference drops a class
  whose device would have no edits).

Files are looked up where this container sees them (`--driver-root-ctr-path`,
and the container-side dev root: the driver root mount when it holds `/dev`,
otherwise `/`) and written for the host: under `--nvidia-driver-root` for
driver files, and under the driver root or `--dev-root` for device nodes.
"""

from __future__ import annotations

from typing import Any

from cdi.driver import VOID_ENV, common_edits, gds_edits, gpu_edits, mig_edits
from cdi.edits import Edits
from cdi.hooks import HookMaker
from cdi.layout import Layout
from devices.migprofile import is_graphics_profile
from devices.model import Inventory
from resources.cdi_files import Spec
from resources.cdi_names import GPU_CLASS, IMEX_CLASS, kind, minimum_version
from resources.devicemap import visible_gpus
from resources.devnodes import (
    enabled_extras,
    extra_nodes,
    imex_channel_path,
    mig_device_paths,
)
from resources.errors import ResourceError
from resources.imex import discover_imex_channels
from resources.options import DeviceIdStrategy, MigStrategy, ResourceOptions, join_root


def cdi_host_path(path: str, options: ResourceOptions) -> str:
    """Host side of a `/dev/...` node, after the reference's root transforms."""
    return join_root(_dev_host_root(options), path)


def _dev_host_root(options: ResourceOptions) -> str:
    if options.container_dev_root == options.driver_root_ctr_path:
        return options.driver_root
    return options.host_dev_root


def cdi_layout(options: ResourceOptions) -> Layout:
    """The roots of `options` as the driver discovery takes them."""
    return Layout(
        driver_root=options.driver_root,
        driver_root_ctr=options.driver_root_ctr_path,
        dev_root=_dev_host_root(options),
        dev_root_ctr=options.container_dev_root,
        sysfs_root=options.sysfs_root,
        dev_exists=options.host_dev_exists,
    )


def cdi_hooks(options: ResourceOptions) -> HookMaker:
    return HookMaker.of(options.nvidia_cdi_hook_path, options.cdi_disable_hooks)


def _node(path: str, options: ResourceOptions) -> dict[str, str]:
    return {"path": path, "hostPath": cdi_host_path(path, options)}


def _spec(cdi_class: str, devices: list[dict[str, Any]], common: Edits | None) -> Spec:
    spec: Spec = {"cdiVersion": "", "kind": kind(cdi_class), "devices": devices}
    if common:
        spec["containerEdits"] = common.to_json()
    spec["cdiVersion"] = minimum_version(spec)
    return spec


def _device(name: str, edits: Edits) -> dict[str, Any]:
    return {"name": name, "containerEdits": edits.to_json()}


def gpu_spec(inventory: Inventory, options: ResourceOptions) -> Spec:
    """The `gpu` class spec: every GPU and MIG device of the node, and the driver.

    Raises:
        ResourceError: a MIG device that is served lacks its capability nodes.
    """
    by_index = options.device_id_strategy is DeviceIdStrategy.INDEX
    layout, hooks = cdi_layout(options), cdi_hooks(options)
    devices: list[dict[str, Any]] = []
    for gpu in visible_gpus(inventory):
        name = str(gpu.index) if by_index else gpu.uuid
        devices.append(_device(name, gpu_edits(gpu, layout, hooks)))
        if not gpu.mig_enabled:
            continue
        for mig in sorted(gpu.mig_devices, key=lambda m: m.slot):
            try:
                paths = mig_device_paths(gpu, mig)
            except ResourceError:
                if options.mig_strategy is MigStrategy.NONE:
                    continue  # not served under `none`; nothing to describe
                raise
            graphics = is_graphics_profile(mig.profile)
            edits = mig_edits(gpu, paths, graphics=graphics, layout=layout, hooks=hooks)
            devices.append(_device(mig.index if by_index else mig.uuid, edits))
    devices.sort(key=lambda device: str(device["name"]))
    return _spec(GPU_CLASS, devices, common_edits(inventory.driver_version, layout, hooks))


def imex_spec(channels: tuple[str, ...], options: ResourceOptions) -> Spec | None:
    """The `imex-channel` class spec, or None when no channel was found."""
    if not channels:
        return None
    devices = [
        {
            "name": channel,
            "containerEdits": {"deviceNodes": [_node(imex_channel_path(channel), options)]},
        }
        for channel in channels
    ]
    return _spec(IMEX_CLASS, devices, None)


def extra_spec(cdi_class: str, options: ResourceOptions) -> Spec | None:
    """The `gdrcopy` / `gds` / `mofed` spec with its single `all` device, or None."""
    nodes = extra_nodes(cdi_class, options)
    if not nodes:
        return None
    layout = cdi_layout(options)
    if cdi_class == "gds":
        edits = gds_edits(nodes, layout)
    else:
        edits = Edits(device_nodes=tuple(layout.device_node(path) for path in nodes))
    return _spec(cdi_class, [_device("all", edits)], Edits(env=(VOID_ENV,)))


def cdi_specs(inventory: Inventory, options: ResourceOptions) -> tuple[Spec, ...]:
    """Every spec to write when a CDI strategy is on (none otherwise).

    Raises:
        ResourceError: as `gpu_spec`, or a required IMEX channel is missing.
    """
    if not options.cdi_enabled:
        return ()
    specs = [gpu_spec(inventory, options)]
    channels = imex_spec(discover_imex_channels(options).channels, options)
    if channels is not None:
        specs.append(channels)
    for cdi_class in enabled_extras(options):
        extra = extra_spec(cdi_class, options)
        if extra is not None:
            specs.append(extra)
    return tuple(specs)
