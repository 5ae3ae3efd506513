"""Loading the driver's NVML library from a driver root that is not `/`.

In a container the host driver is often mounted somewhere else (for example
`/driver-root`), where the dynamic loader does not look. pynvml always asks
for the soname `libnvidia-ml.so.1`; the loader answers that request with an
already loaded object of the same soname, so loading the file from the driver
root first, by full path, makes pynvml use it without touching pynvml's
internals. A root without the library falls back to the loader's own search.

When NVML does not start, the error alone (``NVML Shared Library Not
Found``) does not tell an operator what to do; `explain_start_failure` logs,
once per process, what usually causes that error and how to fix it, as the
reference plugin does: the container toolkit and runtime for a missing
library, a reboot for a version mismatch, and a node selector for nodes that
have no GPU at all.
"""

from __future__ import annotations

import ctypes
import os
import threading
from pathlib import Path

from loguru import logger

from devices.errors import NvmlUnavailable

LIBRARY_NAME = "libnvidia-ml.so.1"
LIBRARY_DIRS = (
    "usr/lib64",
    "usr/lib/x86_64-linux-gnu",
    "usr/lib/aarch64-linux-gnu",
    "lib64",
    "lib/x86_64-linux-gnu",
    "lib/aarch64-linux-gnu",
)
_MAX_LINKS = 16


def _inside(driver_root: Path, path: Path) -> Path:
    """Follow symlinks of `path` as if `driver_root` were `/`.

    A driver root mounted from the host carries the host's absolute symlinks
    (`/usr/lib/...`), which must be resolved relative to the root.
    """
    for _ in range(_MAX_LINKS):
        if not path.is_symlink():
            break
        target = os.readlink(path)
        path = driver_root / target.lstrip("/") if os.path.isabs(target) else path.parent / target
    return path


def find_nvml_library(driver_root: Path) -> Path | None:
    """The first `libnvidia-ml.so.1` found in the usual library directories of a driver root."""
    for directory in LIBRARY_DIRS:
        candidate = _inside(driver_root, driver_root / directory / LIBRARY_NAME)
        if candidate.is_file():
            return candidate
    return None


def preload_nvml(driver_root: Path) -> ctypes.CDLL | None:
    """Load NVML from `driver_root` if it holds one.

    Returns None, leaving the loader's own search to pynvml, when the root is
    `/` or holds no library (as the reference does: running outside the
    container, the default root `/driver-root` simply does not exist).

    Raises:
        NvmlUnavailable: the root holds a library that cannot be loaded.
    """
    if driver_root.resolve() == Path("/"):
        return None
    path = find_nvml_library(driver_root)
    if path is None:
        logger.debug(
            "{} not found under driver root {} (searched {}); using the system search path",
            LIBRARY_NAME,
            driver_root,
            ", ".join(LIBRARY_DIRS),
        )
        return None
    try:
        return ctypes.CDLL(str(path), mode=ctypes.RTLD_GLOBAL)
    except OSError as exc:
        raise NvmlUnavailable(f"cannot load {path}: {exc}") from exc


# NVML return codes (nvml.h); compared by value so this module needs no pynvml.
_NO_PERMISSION = 4
_DRIVER_NOT_LOADED = 9
_LIBRARY_NOT_FOUND = 12
_LIB_RM_VERSION_MISMATCH = 18

_NOT_A_GPU_NODE = (
    "If this node has no GPU, keep the plugin off it with a node selector or affinity "
    "(for example on the label nvidia.com/gpu.present=true), or set failOnInitError=false "
    "so it stays up and idle there."
)
_GUIDANCE = {
    _LIBRARY_NOT_FOUND: (
        f"{LIBRARY_NAME} is not visible in this container. If this is a GPU node, the NVIDIA "
        "driver must be installed and the NVIDIA Container Toolkit installed and configured as "
        "the container runtime (or the pod given runtimeClassName: nvidia) so that the "
        "driver's libraries are mounted into the container; with the driver mounted elsewhere, "
        "point --driver-root-ctr-path (DRIVER_ROOT_CTR_PATH) at it. "
    )
    + _NOT_A_GPU_NODE,
    _DRIVER_NOT_LOADED: (
        "The NVIDIA kernel driver is not loaded on this node (check nvidia-smi on the host; a "
        "driver container may still be installing it). "
    )
    + _NOT_A_GPU_NODE,
    _LIB_RM_VERSION_MISMATCH: (
        "The driver library and the loaded kernel module are different versions, which "
        "happens after a driver upgrade: reboot the node or reload the kernel module."
    ),
    _NO_PERMISSION: (
        "This container may not open the GPU device nodes: run it privileged, or give it "
        "the /dev/nvidia* devices."
    ),
}
_explained = threading.Event()


def start_failure_guidance(code: object) -> str:
    """What to do about NVML failing to start with return code ``code``."""
    guidance = _GUIDANCE.get(code) if isinstance(code, int) else None
    return guidance or (
        "Check that the NVIDIA driver works on the host (nvidia-smi) and that the NVIDIA "
        "Container Toolkit is the container runtime (or runtimeClassName: nvidia is set). "
        + _NOT_A_GPU_NODE
    )


def explain_start_failure(error: Exception) -> None:
    """Log, the first time NVML fails to start in this process, what to do about it."""
    if _explained.is_set():
        return
    _explained.set()
    guidance = start_failure_guidance(getattr(error, "value", None))
    logger.warning("NVML could not start ({}). {}", error, guidance)
