"""The driver's other files: binaries, firmware, IPC sockets, graphics files, Xorg modules.

Each is looked for at fixed places in the driver root and listed only when
it exists with the right type: an executable regular file for a binary, a
socket for `nvidia-persistenced` and `nvidia-fabricmanager`, a directory for
the MPS pipe directory, a regular file for everything else. The path listed
is the one looked up, not its symlink target: `/lib/firmware/...` stays
`/lib/firmware/...` on a distribution where `/lib` links to `/usr/lib`, which
is where a workload expects it. Lists come back in a fixed order.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Iterable

from cdi.rootfs import RootView

BINARY_DIRS = ("/usr/bin", "/usr/sbin", "/bin", "/sbin")
BINARIES = (
    "nvidia-smi",
    "nvidia-debugdump",
    "nvidia-persistenced",
    "nvidia-cuda-mps-control",
    "nvidia-cuda-mps-server",
)
FIRMWARE_DIR = "/lib/firmware/nvidia"
FIRMWARE_PATTERN = "gsp*.bin"
RUN_DIRS = ("/run", "/var/run")
SOCKETS = ("nvidia-persistenced/socket", "nvidia-fabricmanager/socket")
MPS_PIPE_DIR = "/tmp/nvidia-mps"
# Looked for under /etc first, then /usr/share, in this order.
CONFIG_DIRS = ("/etc", "/usr/share")
CONFIG_FILES = (
    "vulkan/icd.d/nvidia_icd.json",
    "vulkan/implicit_layer.d/nvidia_layers.json",
    "glvnd/egl_vendor.d/10_nvidia.json",
    "egl/egl_external_platform.d/10_nvidia_wayland.json",
    "egl/egl_external_platform.d/15_nvidia_gbm.json",
    "nvidia/nvoptix.bin",
    "X11/xorg.conf.d/10-nvidia.conf",
)
XORG_DIRS = ("/usr/lib/xorg/modules", "/usr/lib64/xorg/modules")
XORG_DRIVER = "drivers/nvidia_drv.so"
XORG_GLX = "extensions/libglxserver_nvidia.so.{version}"
GDS_MOUNTS = (("/etc/cufile.json", False), ("/run/udev", True))  # (path, is a directory)


def _first_of_each(
    names: Iterable[str], folders: Iterable[str], exists: Callable[[str], bool]
) -> list[str]:
    """For each name in turn, `<folder>/<name>` in the first folder where it `exists`."""
    found = []
    for name in names:
        path = next((f"{d}/{name}" for d in folders if exists(f"{d}/{name}")), None)
        if path is not None:
            found.append(path)
    return found


def binaries(root: RootView) -> tuple[str, ...]:
    """The first executable of each name on the driver root's bin directories."""
    return tuple(_first_of_each(BINARIES, BINARY_DIRS, root.is_executable))


def firmware(root: RootView, version: str) -> tuple[str, ...]:
    """GSP firmware files of this driver version."""
    if not version or "/" in version or version in (".", ".."):
        return ()
    folder = f"{FIRMWARE_DIR}/{version}"
    names = [name for name in root.listdir(folder) if fnmatch.fnmatchcase(name, FIRMWARE_PATTERN)]
    return tuple(f"{folder}/{name}" for name in names if root.is_file(f"{folder}/{name}"))


def ipc_paths(root: RootView) -> tuple[str, ...]:
    """The persistenced and fabric manager sockets and the MPS pipe directory that exist."""
    found = _first_of_each(SOCKETS, RUN_DIRS, root.is_socket)
    if root.is_dir(MPS_PIPE_DIR):
        found.append(MPS_PIPE_DIR)
    return tuple(found)


def config_files(root: RootView) -> tuple[str, ...]:
    """Vulkan, EGL, GLVND, OptiX and Xorg configuration the driver installed."""
    return tuple(_first_of_each(CONFIG_FILES, CONFIG_DIRS, root.is_file))


def xorg_modules(root: RootView, version: str) -> tuple[str, ...]:
    """The Xorg driver and GLX server extension, from the first modules directory holding them."""
    names = [XORG_DRIVER] + ([XORG_GLX.format(version=version)] if version else [])
    return tuple(_first_of_each(names, XORG_DIRS, root.is_file))


def gds_mounts(root: RootView) -> tuple[str, ...]:
    """`/etc/cufile.json` and `/run/udev`, where they exist, for GPUDirect Storage."""
    return tuple(
        path for path, is_dir in GDS_MOUNTS if (root.is_dir(path) if is_dir else root.is_file(path))
    )
