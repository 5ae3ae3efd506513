"""Loading the driver's NVML library from a driver root that is not `/`.

In a container the host driver is often mounted somewhere else (for example
`/driver-root`), where the dynamic loader does not look. pynvml always asks
for the soname `libnvidia-ml.so.1`; the loader answers that request with an
already loaded object of the same soname, so loading the file from the driver
root first, by full path, makes pynvml use it without touching pynvml's
internals. A root without the library falls back to the loader's own search.
"""

from __future__ import annotations

import ctypes
import os
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
