"""CDI spec files for the CDI device-list strategies.

One JSON spec per class, written to `/var/run/cdi/<vendor>-<class>.json`:

* `k8s.device-plugin.nvidia.com/gpu` -- one device per whole GPU (GPUs with
  MIG disabled, and every GPU under the `none` MIG strategy, which exposes
  MIG-enabled GPUs whole) and per MIG device, named by the device ID strategy
  (`GPU-...`/`MIG-...` or `0`/`1:0`), each carrying its device nodes;
* `.../imex-channel` -- one device per discovered channel, named by its ID;
* `.../gdrcopy`, `.../gds`, `.../mofed` -- a single device `all` with the
  feature's device nodes, only when enabled and some node was found (the
  reference drops a class whose device would have no edits).

Limitation: the reference also injects the driver's libraries, firmware and
binaries and a set of OCI hooks, which it discovers in the driver root. None
of that discovery is done here; the GPU spec carries the device nodes, the
control nodes that exist and `NVIDIA_VISIBLE_DEVICES=void` as common edits,
so a container runtime that adds the driver itself (or an image that ships
it) gets working devices.

Host paths follow the reference's root handling: nodes are looked up under
the container-side dev root (the driver root mount when it holds `/dev`,
otherwise `/`) and rewritten to the host's driver root or dev root.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from devices.model import Inventory
from resources.cdi_names import GPU_CLASS, IMEX_CLASS, kind, minimum_version
from resources.devicemap import visible_gpus
from resources.devnodes import (
    CDI_CONTROL_NODES,
    enabled_extras,
    extra_nodes,
    imex_channel_path,
    mig_device_paths,
)
from resources.errors import ResourceError
from resources.imex import discover_imex_channels
from resources.options import DeviceIdStrategy, MigStrategy, ResourceOptions, join_root

Spec = dict[str, Any]


def cdi_host_path(path: str, options: ResourceOptions) -> str:
    """Host side of a `/dev/...` node, after the reference's root transforms."""
    if options.container_dev_root == options.driver_root_ctr_path:
        return join_root(options.driver_root, path)
    return join_root(options.host_dev_root, path)


def _node(path: str, options: ResourceOptions) -> dict[str, str]:
    return {"path": path, "hostPath": cdi_host_path(path, options)}


def _spec(cdi_class: str, devices: list[dict[str, Any]], common: dict[str, Any] | None) -> Spec:
    spec: Spec = {"cdiVersion": "", "kind": kind(cdi_class), "devices": devices}
    if common:
        spec["containerEdits"] = common
    spec["cdiVersion"] = minimum_version(spec)
    return spec


def gpu_spec(inventory: Inventory, options: ResourceOptions) -> Spec:
    """The `gpu` class spec: every GPU and MIG device of the node.

    Raises:
        ResourceError: a MIG device that is served lacks its capability nodes.
    """
    by_index = options.device_id_strategy is DeviceIdStrategy.INDEX
    devices: list[dict[str, Any]] = []
    for gpu in visible_gpus(inventory):
        if not gpu.mig_enabled or options.mig_strategy is MigStrategy.NONE:
            devices.append(
                {
                    "name": str(gpu.index) if by_index else gpu.uuid,
                    "containerEdits": {"deviceNodes": [_node(gpu.device_path, options)]},
                }
            )
        if not gpu.mig_enabled:
            continue
        for mig in sorted(gpu.mig_devices, key=lambda m: m.slot):
            try:
                paths = mig_device_paths(gpu, mig)
            except ResourceError:
                if options.mig_strategy is MigStrategy.NONE:
                    continue  # not served under `none`; nothing to describe
                raise
            devices.append(
                {
                    "name": mig.index if by_index else mig.uuid,
                    "containerEdits": {"deviceNodes": [_node(p, options) for p in paths]},
                }
            )
    root = options.container_dev_root
    controls = [
        _node(path, options)
        for path in CDI_CONTROL_NODES
        if options.host_dev_exists(join_root(root, path))
    ]
    common: dict[str, Any] = {"env": ["NVIDIA_VISIBLE_DEVICES=void"]}
    if controls:
        common["deviceNodes"] = controls
    return _spec(GPU_CLASS, devices, common)


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
    edits = {"deviceNodes": [_node(path, options) for path in nodes]}
    return _spec(cdi_class, [{"name": "all", "containerEdits": edits}], None)


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


def spec_file_name(spec: Spec) -> str:
    """`<vendor>-<class>.json`, e.g. `k8s.device-plugin.nvidia.com-gpu.json`."""
    return str(spec["kind"]).replace("/", "-") + ".json"


def write_spec(directory: str | os.PathLike[str], spec: Spec) -> Path:
    """Write `spec` atomically (temp file + rename) with mode 0644; return its path.

    A runtime reading the directory at any moment sees either the old file or
    the complete new one, never a partial write.
    """
    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / spec_file_name(spec)
    fd, temp = tempfile.mkstemp(dir=folder, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(spec, handle, indent=2)
            handle.write("\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temp, 0o644)
        os.replace(temp, target)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
    return target
