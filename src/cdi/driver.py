"""The driver as CDI edits: the spec's common edits, and each GPU's own.

Common edits give every container that names any NVIDIA device the driver
itself: `NVIDIA_VISIBLE_DEVICES=void` (so nvidia-container-runtime adds
nothing on top), the control nodes, one read-only bind mount per driver file,
and three hooks: `create-symlinks` for the development and GLX links the
driver's packages create (`libcuda.so`, `libGLX_indirect.so.0`,
`libnvidia-opticalflow.so`), `create-symlinks` for the GBM and Xorg module
links, and `update-ldcache` over the folders holding mounted libraries so the
SONAME links exist in the workload. Mounts come in a fixed order: driver
libraries, graphics libraries, binaries, firmware, IPC sockets, graphics
configuration, Xorg modules; within each, sorted or in the listed order.

A whole GPU's edits are its `/dev/nvidiaN` and, with `nvidia-drm` loaded, its
DRM nodes, their by-path links and a `chmod 755 /dev/dri` hook (runtimes
create `/dev/dri` with mode 0700, which hides the nodes from a non-root user).
A MIG device's are its parent's node and its two capability nodes, and for a
graphics profile (`+gfx`) also the parent's DRM nodes, links and hook.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass

from cdi.driverfiles import (
    binaries,
    config_files,
    firmware,
    gds_mounts,
    ipc_paths,
    xorg_modules,
)
from cdi.drm import DRI_DIR, by_path_links, drm_nodes
from cdi.edits import SOCKET_OPTIONS, DeviceNode, Edits, Hook, Mount
from cdi.hooks import HookMaker
from cdi.layout import Layout
from cdi.libraries import DriverLibraries, find_libraries
from devices.model import Gpu

VOID_ENV = "NVIDIA_VISIBLE_DEVICES=void"
# In the order the reference lists them in common edits.
CONTROL_NODES = (
    "/dev/nvidia-modeset",
    "/dev/nvidia-uvm-tools",
    "/dev/nvidia-uvm",
    "/dev/nvidiactl",
)


@dataclass(frozen=True)
class DriverFiles:
    """Host paths (below the driver root) of everything a workload needs from the driver."""

    version: str
    libraries: DriverLibraries
    binaries: tuple[str, ...] = ()
    firmware: tuple[str, ...] = ()
    ipc: tuple[str, ...] = ()
    configs: tuple[str, ...] = ()
    xorg: tuple[str, ...] = ()


def discover_driver(version: str, layout: Layout) -> DriverFiles:
    """Every driver file of `version` that exists in the layout's driver root."""
    root = layout.driver
    return DriverFiles(
        version=version,
        libraries=find_libraries(root, version),
        binaries=binaries(root),
        firmware=firmware(root, version),
        ipc=ipc_paths(root),
        configs=config_files(root),
        xorg=xorg_modules(root, version),
    )


def _folder(path: str) -> str:
    return posixpath.dirname(path) or "/"


# Links the driver's packages create and ldconfig does not, in the spec's order:
# (library file name, link target, link name in the library's folder).
LIBRARY_LINKS = (
    ("libcuda.so.{v}", "libcuda.so.1", "libcuda.so"),
    ("libGLX_nvidia.so.{v}", "libGLX_nvidia.so.{v}", "libGLX_indirect.so.0"),
    ("libnvidia-opticalflow.so.{v}", "libnvidia-opticalflow.so.1", "libnvidia-opticalflow.so"),
)


def _library_links(files: DriverFiles) -> list[tuple[str, str]]:
    version = files.version
    links = []
    for name, target, link in LIBRARY_LINKS:
        wanted = name.format(v=version)
        for path in files.libraries.driver:
            if posixpath.basename(path) == wanted:
                links.append((target.format(v=version), f"{_folder(path)}/{link}"))
    return links


def _graphics_links(files: DriverFiles) -> list[tuple[str, str]]:
    links = []
    for path in files.libraries.driver:
        if posixpath.basename(path) == f"libnvidia-allocator.so.{files.version}":
            links.append(("../libnvidia-allocator.so.1", f"{_folder(path)}/gbm/nvidia-drm_gbm.so"))
    suffix = f".so.{files.version}"
    for path in files.xorg:
        name = posixpath.basename(path)
        if name.startswith("libglxserver_nvidia") and name.endswith(suffix):
            links.append((name, path[: -len(files.version) - 1]))
    return links


def driver_mounts(files: DriverFiles, layout: Layout) -> tuple[Mount, ...]:
    plain = (
        *files.libraries.driver,
        *files.libraries.graphics,
        *files.binaries,
        *files.firmware,
    )
    mounts = [layout.mount(path) for path in plain]
    mounts += [layout.mount(path, SOCKET_OPTIONS) for path in files.ipc]
    mounts += [layout.mount(path) for path in (*files.configs, *files.xorg)]
    return tuple(mounts)


def driver_hooks(files: DriverFiles, hooks: HookMaker) -> tuple[Hook, ...]:
    folders = sorted({_folder(path) for path in files.libraries.files})
    made = (
        hooks.symlinks(_library_links(files)),
        hooks.symlinks(_graphics_links(files)),
        hooks.update_ldcache(folders),
    )
    return tuple(hook for hook in made if hook is not None)


def common_edits(version: str, layout: Layout, hooks: HookMaker) -> Edits:
    """The GPU spec's common edits: env, control nodes, driver mounts and hooks."""
    files = discover_driver(version, layout)
    nodes = tuple(layout.device_node(p) for p in CONTROL_NODES if layout.has_device_node(p))
    return Edits(
        env=(VOID_ENV,),
        device_nodes=nodes,
        mounts=driver_mounts(files, layout),
        hooks=driver_hooks(files, hooks),
    )


def gpu_edits(gpu: Gpu, layout: Layout, hooks: HookMaker) -> Edits:
    """A whole GPU: its device node, and its DRM nodes with their links when present."""
    return _with_drm(gpu, (gpu.device_path,), layout, hooks)


def mig_edits(
    parent: Gpu, paths: tuple[str, ...], *, graphics: bool, layout: Layout, hooks: HookMaker
) -> Edits:
    """A MIG device: `paths` (its parent's node, its GI and CI capability nodes).

    A graphics MIG device (`+gfx` profile) also gets its parent GPU's DRM
    nodes, links and hook, as the reference gives it from v0.19.3 on (through
    nvidia-container-toolkit): OpenGL and Vulkan reach the GPU instance
    through them.
    """
    if graphics:
        return _with_drm(parent, paths, layout, hooks)
    return Edits(device_nodes=tuple(layout.device_node(p) for p in paths))


def _with_drm(gpu: Gpu, paths: tuple[str, ...], layout: Layout, hooks: HookMaker) -> Edits:
    drm = drm_nodes(gpu.pci_bus_id, layout)
    nodes: tuple[DeviceNode, ...] = tuple(layout.device_node(path) for path in (*paths, *drm))
    if not drm:
        return Edits(device_nodes=nodes)
    made = (
        hooks.symlinks(by_path_links(gpu.pci_bus_id, drm, layout)),
        hooks.chmod("755", [DRI_DIR]),
    )
    return Edits(device_nodes=nodes, hooks=tuple(hook for hook in made if hook is not None))


def gds_edits(nodes: tuple[str, ...], layout: Layout) -> Edits:
    """GPUDirect Storage's `all` device: its nodes, and the cuFile config and udev state."""
    if not nodes:
        return Edits()
    mounts = tuple(layout.mount(path) for path in gds_mounts(layout.driver))
    return Edits(device_nodes=tuple(layout.device_node(p) for p in nodes), mounts=mounts)
