"""The driver's shared libraries, found through the driver root's ld cache.

A library belongs to the driver when the file its cache entry resolves to is
named `*.so.<driver version>` (`libcuda.so.1` -> `libcuda.so.550.54.15`).
The mount is of that file; the workload's `update-ldcache` hook recreates the
SONAME links. Two graphics libraries carry versions of their own
(`libnvidia-egl-gbm.so.1.1.1`, `libnvidia-egl-wayland.so.1.1.13`) and are
found by SONAME. `vdpau/libvdpau_nvidia.so.<version>` sits in a subdirectory
that ld.so.conf rarely lists, so it is looked for beside the other libraries.

Without a usable cache (none, unreadable, not a cache) the standard library
directories are listed instead: slower and less exact, but a driver root
without a cache is still a driver root.

Resolving several hundred cache entries costs milliseconds, and plans are
rebuilt on every reconcile, so the result is memoised on the driver root,
the version and the identity of the cache file (or of the directories
listed). A memoised answer is used only while every file it names is still a
regular file, so a removed library is noticed at once.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from loguru import logger

from cdi.ldcache import CacheEntry, LdCacheError, read_ld_cache
from cdi.rootfs import RootView

LD_CACHE = "/etc/ld.so.cache"
STANDARD_LIBRARY_DIRS = (
    "/usr/lib64",
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/usr/lib/x86_64-linux-gnu/nvidia/current",
    "/usr/lib/aarch64-linux-gnu/nvidia/current",
    "/lib64",
    "/lib/x86_64-linux-gnu",
    "/lib/aarch64-linux-gnu",
    "/usr/lib",
    "/lib",
)
GRAPHICS_SONAMES = ("libnvidia-egl-gbm.so.1", "libnvidia-egl-wayland.so.1")
VDPAU_DIR = "vdpau"


@dataclass(frozen=True)
class DriverLibraries:
    """Host paths (below the driver root) of the driver's library files, sorted.

    Attributes:
        driver: files named `*.so.<version>`.
        graphics: the EGL platform libraries with their own versions.
        source: `ld.so.cache` or `library directories`.
        problem: why the cache was not used, when it was not.
    """

    driver: tuple[str, ...] = ()
    graphics: tuple[str, ...] = ()
    source: str = "ld.so.cache"
    problem: str | None = None

    @property
    def files(self) -> tuple[str, ...]:
        return self.driver + self.graphics


def _is_versioned(name: str, version: str) -> bool:
    return bool(version) and name.endswith(".so." + version)


def _is_graphics(name: str) -> bool:
    return any(name == soname or name.startswith(soname + ".") for soname in GRAPHICS_SONAMES)


def _basename(path: str) -> str:
    return path.rsplit("/", 1)[-1]


def _dirname(path: str) -> str:
    return path.rsplit("/", 1)[0] or "/"


def _collect(root: RootView, candidates: list[str], version: str) -> DriverLibraries:
    driver: set[str] = set()
    graphics: set[str] = set()
    for candidate in candidates:
        resolved = root.resolve(candidate)
        if resolved is None or not root.is_file(resolved):
            continue  # dangling link, directory, device node...
        name = _basename(resolved)
        if _is_versioned(name, version):
            driver.add(resolved)
        elif _is_graphics(_basename(candidate)) and _is_graphics(name):
            graphics.add(resolved)
    for folder in sorted({_dirname(path) for path in driver}):
        vdpau = f"{folder}/{VDPAU_DIR}/libvdpau_nvidia.so.{version}"
        resolved = root.resolve(vdpau)
        if resolved is not None and root.is_file(resolved):
            driver.add(resolved)
    return DriverLibraries(driver=tuple(sorted(driver)), graphics=tuple(sorted(graphics)))


def _from_cache(root: RootView, entries: tuple[CacheEntry, ...], version: str) -> DriverLibraries:
    # 64-bit and 32-bit alike, as the reference mounts both; other ABIs
    # (x32, soft-float) are never the driver's.
    paths = [e.path for e in entries if (e.is_64bit or e.is_32bit) and e.path.startswith("/")]
    return _collect(root, paths, version)


def _from_directories(root: RootView, version: str) -> DriverLibraries:
    candidates = []
    for folder in STANDARD_LIBRARY_DIRS:
        for name in root.listdir(folder):
            if _is_versioned(name, version) or _is_graphics(name):
                candidates.append(f"{folder}/{name}")
    return _collect(root, candidates, version)


Signature = tuple[object, ...]


def _signature(root: RootView) -> tuple[str | None, Signature]:
    """What the answer depends on: the cache file's identity, or the directories'."""
    cache = root.resolve(LD_CACHE)
    info = root.stat(LD_CACHE) if cache is not None else None
    if cache is not None and info is not None:
        return cache, (cache, info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns)
    dirs = []
    for folder in STANDARD_LIBRARY_DIRS:
        folder_info = root.stat(folder)
        if folder_info is not None:
            dirs.append((folder, folder_info.st_ino, folder_info.st_mtime_ns))
    return None, tuple(dirs)


def _discover(root: RootView, version: str, cache: str | None) -> DriverLibraries:
    problem = f"no {LD_CACHE} in the driver root"
    if cache is not None:
        try:
            entries = read_ld_cache(root.local(cache))
        except LdCacheError as error:
            problem = f"{LD_CACHE} in the driver root is unusable: {error}"
        else:
            return _from_cache(root, entries, version)
    found = _from_directories(root, version)
    return DriverLibraries(
        driver=found.driver,
        graphics=found.graphics,
        source="library directories",
        problem=problem,
    )


_lock = threading.Lock()
_memo: dict[tuple[str, str, Signature], DriverLibraries] = {}
_MEMO_SIZE = 8


def find_libraries(root: RootView, version: str) -> DriverLibraries:
    """The driver's libraries in `root` for driver `version` (memoised; see module doc)."""
    cache, signature = _signature(root)
    key = (root.mount, version, signature)
    with _lock:
        known = _memo.get(key)
    if known is not None and all(root.is_resolved_file(path) for path in known.files):
        return known
    found = _discover(root, version, cache)
    if not found.driver:
        # Logged once per change of the answer, not on every reconcile.
        logger.warning(
            "CDI specs carry no driver libraries: none of driver version {!r} in {} ({}); "
            "is the driver root mounted there (--driver-root-ctr-path)?",
            version,
            root.mount,
            found.problem or "not in its ld.so.cache",
        )
    elif found.problem:
        logger.info(
            "CDI driver libraries in {}: {}; listed the library directories instead ({} found)",
            root.mount,
            found.problem,
            len(found.files),
        )
    with _lock:
        if len(_memo) >= _MEMO_SIZE:
            _memo.clear()
        _memo[key] = found
    return found
