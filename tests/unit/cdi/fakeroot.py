"""A fake NVIDIA driver install on disk, for the CDI tests and end-to-end tests.

`build_driver_root` lays out what a 550.54.15 driver puts on an Ubuntu-style
node (merged `/usr`: `/lib`, `/bin`, `/sbin` are links into `/usr`):

* real ELF shared objects under the driver's file names and SONAMEs, linked
  by gcc from one tiny C file (once per test session, see
  `compile_driver_libraries`), and an `etc/ld.so.cache` written by the
  system's `ldconfig -r`, which also creates the SONAME links;
* the five binaries, GSP firmware (and a stale driver's firmware and library
  that must not be listed), the persistenced socket (a real unix socket),
  the graphics configuration files and the Xorg modules;
* `dev/` with the GPU, control, capability and DRM nodes (made with mknod
  when running as root, regular files otherwise) and the udev by-path links;
* a sysfs tree beside the root with each GPU's `drm/` directory.

Everything it creates that a complete spec must mount is recorded in
`FakeDriverRoot.mounts` (container paths, in the order of the spec), so tests
compare a spec with what is on disk rather than with a copy of the code's
rules. Other tests can swap in their own library for any SONAME (for example
a fake `libnvidia-ml.so.1` serving NVML calls) through `replace`.
"""

from __future__ import annotations

import os
import shutil
import socket
import stat
import subprocess
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from devices.model import Gpu
from tests.layers import build_step

VERSION = "550.54.15"
STALE_VERSION = "535.104.05"
LIBDIR = "/usr/lib/x86_64-linux-gnu"

# (file name, SONAME) of every library the reference mounts from a 550 install.
DRIVER_LIBRARIES = (
    ("libcuda.so.{v}", "libcuda.so.1"),
    ("libcudadebugger.so.{v}", "libcudadebugger.so.1"),
    ("libnvidia-ml.so.{v}", "libnvidia-ml.so.1"),
    ("libnvidia-ptxjitcompiler.so.{v}", "libnvidia-ptxjitcompiler.so.1"),
    ("libnvidia-nvvm.so.{v}", "libnvidia-nvvm.so.4"),
    ("libnvidia-opencl.so.{v}", "libnvidia-opencl.so.1"),
    ("libnvidia-gpucomp.so.{v}", "libnvidia-gpucomp.so.{v}"),
    ("libnvidia-allocator.so.{v}", "libnvidia-allocator.so.1"),
    ("libnvidia-cfg.so.{v}", "libnvidia-cfg.so.1"),
    ("libnvidia-nscq.so.{v}", "libnvidia-nscq.so.2"),
    ("libnvidia-pkcs11.so.{v}", "libnvidia-pkcs11.so.{v}"),
    ("libnvidia-pkcs11-openssl3.so.{v}", "libnvidia-pkcs11-openssl3.so.{v}"),
    ("libnvcuvid.so.{v}", "libnvcuvid.so.1"),
    ("libnvidia-encode.so.{v}", "libnvidia-encode.so.1"),
    ("libnvidia-opticalflow.so.{v}", "libnvidia-opticalflow.so.1"),
    ("libnvidia-fbc.so.{v}", "libnvidia-fbc.so.1"),
    ("libnvidia-eglcore.so.{v}", "libnvidia-eglcore.so.{v}"),
    ("libnvidia-glcore.so.{v}", "libnvidia-glcore.so.{v}"),
    ("libnvidia-glsi.so.{v}", "libnvidia-glsi.so.{v}"),
    ("libnvidia-tls.so.{v}", "libnvidia-tls.so.{v}"),
    ("libnvidia-glvkspirv.so.{v}", "libnvidia-glvkspirv.so.{v}"),
    ("libnvidia-rtcore.so.{v}", "libnvidia-rtcore.so.{v}"),
    ("libnvoptix.so.{v}", "libnvoptix.so.1"),
    ("libnvidia-ngx.so.{v}", "libnvidia-ngx.so.1"),
    ("libGLX_nvidia.so.{v}", "libGLX_nvidia.so.0"),
    ("libEGL_nvidia.so.{v}", "libEGL_nvidia.so.0"),
    ("libGLESv2_nvidia.so.{v}", "libGLESv2_nvidia.so.2"),
    ("libGLESv1_CM_nvidia.so.{v}", "libGLESv1_CM_nvidia.so.1"),
    ("vdpau/libvdpau_nvidia.so.{v}", "libvdpau_nvidia.so.1"),
)
GRAPHICS_LIBRARIES = (
    ("libnvidia-egl-gbm.so.1.1.1", "libnvidia-egl-gbm.so.1"),
    ("libnvidia-egl-wayland.so.1.1.13", "libnvidia-egl-wayland.so.1"),
)
# In the cache but not the driver's (another package, an older driver).
OTHER_LIBRARIES = (
    ("libfoo.so.1.2.3", "libfoo.so.1"),
    ("libnvidia-stale.so." + STALE_VERSION, "libnvidia-stale.so." + STALE_VERSION),
)
BINARIES = (
    "nvidia-smi",
    "nvidia-debugdump",
    "nvidia-persistenced",
    "nvidia-cuda-mps-control",
    "nvidia-cuda-mps-server",
)
FIRMWARE = ("gsp_ga10x.bin", "gsp_tu10x.bin")
CONFIG_FILES = (
    "/etc/vulkan/icd.d/nvidia_icd.json",
    "/etc/vulkan/implicit_layer.d/nvidia_layers.json",
    "/usr/share/glvnd/egl_vendor.d/10_nvidia.json",
    "/usr/share/egl/egl_external_platform.d/10_nvidia_wayland.json",
    "/usr/share/egl/egl_external_platform.d/15_nvidia_gbm.json",
    "/usr/share/nvidia/nvoptix.bin",
    "/usr/share/X11/xorg.conf.d/10-nvidia.conf",
)
XORG_MODULES = (
    "/usr/lib/xorg/modules/drivers/nvidia_drv.so",
    "/usr/lib/xorg/modules/extensions/libglxserver_nvidia.so.{v}",
)
PERSISTENCED_SOCKET = "/run/nvidia-persistenced/socket"
CONTROL_NODES = {
    "/dev/nvidiactl": (195, 255),
    "/dev/nvidia-modeset": (195, 254),
    "/dev/nvidia-uvm": (509, 0),
    "/dev/nvidia-uvm-tools": (509, 1),
}
NVIDIA_MAJOR, CAPS_MAJOR, DRM_MAJOR = 195, 511, 226

_SOURCE = "int nvidia_fake_driver_entry(void) { return 550; }\n"


def require_tools() -> None:
    """Skip the calling test when the node cannot build a driver root."""
    for tool in ("gcc", "ldconfig"):
        if shutil.which(tool) is None and not Path(f"/sbin/{tool}").exists():
            pytest.skip(f"{tool} is not installed: cannot build a fake driver root")


def _ldconfig() -> str:
    return shutil.which("ldconfig") or "/sbin/ldconfig"


def ldconfig(root: Path, *options: str) -> None:
    """Run the system's `ldconfig -r ROOT OPTIONS`: the caches the tests read are its output."""
    command = [_ldconfig(), "-r", str(root), *options]
    with build_step():
        subprocess.run(command, check=True, capture_output=True, timeout=60)


def compile_driver_libraries(directory: Path, version: str = VERSION) -> Path:
    """Link one shared object per driver file name with its SONAME; return `directory`.

    One object file is compiled and linked many times in parallel, which is
    what keeps this to about a second.
    """
    require_tools()
    directory.mkdir(parents=True, exist_ok=True)
    with build_step():
        source = directory / "fake.c"
        source.write_text(_SOURCE)
        obj = directory / "fake.o"
        subprocess.run(
            ["gcc", "-c", "-fPIC", "-O0", "-o", str(obj), str(source)],
            check=True,
            capture_output=True,
            timeout=60,
        )
        jobs = []
        for name, soname in (*DRIVER_LIBRARIES, *GRAPHICS_LIBRARIES, *OTHER_LIBRARIES):
            out = directory / name.format(v=version).replace("/", "__")
            command = [
                "gcc",
                "-shared",
                "-o",
                str(out),
                str(obj),
                f"-Wl,-soname,{soname.format(v=version)}",
            ]
            jobs.append(subprocess.Popen(command, stderr=subprocess.PIPE))
        for job in jobs:
            _, err = job.communicate(timeout=60)
            if job.returncode != 0:
                raise RuntimeError(f"gcc failed: {err.decode(errors='replace')}")
    return directory


def _node(path: Path, major: int, minor: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if os.geteuid() == 0:
        try:
            os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(major, minor))
            return
        except OSError:
            pass  # no CAP_MKNOD in this container: a regular file stands in
    path.write_text(f"{major}:{minor}\n")


def _socket(path: Path) -> None:
    """A real unix socket at `path`, which may be longer than AF_UNIX allows."""
    path.parent.mkdir(parents=True, exist_ok=True)
    short = tempfile.mkdtemp(prefix="sock-", dir="/tmp")
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
            server.bind(f"{short}/s")
        os.replace(f"{short}/s", path)
    finally:
        shutil.rmtree(short, ignore_errors=True)


def _file(path: Path, text: str = "{}\n", mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)


def sysfs_bus_id(nvml_bus_id: str) -> str:
    domain, _, rest = nvml_bus_id.lower().partition(":")
    return f"{domain[-4:]}:{rest}"


@dataclass
class FakeDriverRoot:
    """What `build_driver_root` made.

    Attributes:
        root: the driver root as the plugin container sees it.
        sysfs: the fake sysfs root.
        mounts: container paths a complete spec mounts, in the spec's order.
        library_dirs: folders of the `update-ldcache` hook.
        drm: GPU minor -> (card node, render node).
    """

    root: Path
    sysfs: Path
    version: str
    gpus: tuple[Gpu, ...]
    mounts: list[str] = field(default_factory=list)
    library_dirs: list[str] = field(default_factory=list)
    drm: dict[int, tuple[str, str]] = field(default_factory=dict)

    def path(self, container_path: str) -> Path:
        return self.root / container_path.lstrip("/")

    def remove(self, container_path: str) -> None:
        """Delete a file or directory of the install (and forget it was expected)."""
        target = self.path(container_path)
        if target.is_dir() and not target.is_symlink():
            shutil.rmtree(target)
        else:
            target.unlink()
        self.mounts = [m for m in self.mounts if m != container_path]

    def rebuild_cache(self) -> None:
        ldconfig(self.root)


def build_driver_root(
    base: Path,
    libraries: Path,
    gpus: Iterable[Gpu],
    *,
    version: str = VERSION,
    dev: bool = True,
    drm: bool = True,
    replace: Mapping[str, Path] | None = None,
) -> FakeDriverRoot:
    """Lay out a driver install under `base/root` (and sysfs under `base/sys`).

    Args:
        libraries: output of `compile_driver_libraries`.
        gpus: the GPUs whose nodes (and DRM nodes) to create.
        dev: create `dev/` in the root (a driver container's layout); False
            leaves the nodes to the host's own `/dev`.
        drm: create DRM nodes, by-path links and sysfs `drm/` directories.
        replace: SONAME -> a library file to install instead of the stand-in.
    """
    require_tools()
    root, sysfs = base / "root", base / "sys"
    fake = FakeDriverRoot(root=root, sysfs=sysfs, version=version, gpus=tuple(gpus))
    for folder in ("usr/lib", "usr/bin", "usr/sbin", "etc", "run", "tmp"):
        (root / folder).mkdir(parents=True, exist_ok=True)
    for link, target in (("lib", "usr/lib"), ("bin", "usr/bin"), ("sbin", "usr/sbin")):
        (root / link).symlink_to(target)
    (root / "etc/ld.so.conf").write_text(f"{LIBDIR}\n")

    driver_paths = []
    for name, soname in (*DRIVER_LIBRARIES, *GRAPHICS_LIBRARIES, *OTHER_LIBRARIES):
        file_name = name.format(v=version)
        source = (replace or {}).get(soname.format(v=version))
        target = root / LIBDIR.lstrip("/") / file_name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source or libraries / file_name.replace("/", "__"), target)
        target.chmod(0o755)
        driver_paths.append(f"{LIBDIR}/{file_name}")
    driver = sorted(p for p in driver_paths if p.endswith(f".so.{version}"))
    graphics = sorted(f"{LIBDIR}/{name}" for name, _ in GRAPHICS_LIBRARIES)
    fake.mounts += [*driver, *graphics]
    fake.library_dirs = sorted({p.rsplit("/", 1)[0] for p in (*driver, *graphics)})

    for name in BINARIES:
        _file(root / "usr/bin" / name, "#!/bin/sh\nexit 0\n", 0o755)
        fake.mounts.append(f"/usr/bin/{name}")
    for firmware_version, names in ((version, FIRMWARE), (STALE_VERSION, FIRMWARE[:1])):
        for name in names:
            _file(root / f"usr/lib/firmware/nvidia/{firmware_version}/{name}", "gsp\n")
    fake.mounts += [f"/lib/firmware/nvidia/{version}/{name}" for name in FIRMWARE]
    _socket(root / PERSISTENCED_SOCKET.lstrip("/"))
    fake.mounts.append(PERSISTENCED_SOCKET)
    for path in CONFIG_FILES:
        _file(root / path.lstrip("/"))
        fake.mounts.append(path)
    for path in XORG_MODULES:
        _file(root / path.format(v=version).lstrip("/"), "module\n", 0o755)
        fake.mounts.append(path.format(v=version))

    if dev:
        make_dev_nodes(root, fake.gpus, drm=drm)
    if drm:
        fake.drm = make_sysfs(sysfs, fake.gpus)
    fake.rebuild_cache()
    return fake


def drm_names(gpu: Gpu) -> tuple[str, str]:
    return f"card{gpu.minor + 1}", f"renderD{128 + gpu.minor}"


def make_dev_nodes(root: Path, gpus: Iterable[Gpu], *, drm: bool = True) -> None:
    """GPU, control, MIG capability and (optionally) DRM nodes under `root/dev`."""
    dev = root / "dev"
    for path, (major, minor) in CONTROL_NODES.items():
        _node(root / path.lstrip("/"), major, minor)
    for gpu in gpus:
        _node(dev / f"nvidia{gpu.minor}", NVIDIA_MAJOR, gpu.minor)
        for mig in gpu.mig_devices:
            for cap in (mig.gi_cap_minor, mig.ci_cap_minor):
                if cap is not None:
                    _node(dev / f"nvidia-caps/nvidia-cap{cap}", CAPS_MAJOR, cap)
        if not drm:
            continue
        card, render = drm_names(gpu)
        _node(dev / "dri" / card, DRM_MAJOR, gpu.minor + 1)
        _node(dev / "dri" / render, DRM_MAJOR, 128 + gpu.minor)
        by_path = dev / "dri/by-path"
        by_path.mkdir(parents=True, exist_ok=True)
        bus = sysfs_bus_id(gpu.pci_bus_id)
        (by_path / f"pci-{bus}-card").symlink_to(f"../{card}")
        (by_path / f"pci-{bus}-render").symlink_to(f"../{render}")


def make_sysfs(sysfs: Path, gpus: Iterable[Gpu]) -> dict[int, tuple[str, str]]:
    found = {}
    for gpu in gpus:
        card, render = drm_names(gpu)
        drm = sysfs / "bus/pci/devices" / sysfs_bus_id(gpu.pci_bus_id) / "drm"
        for name in (card, render):
            (drm / name).mkdir(parents=True, exist_ok=True)
        found[gpu.minor] = (f"/dev/dri/{card}", f"/dev/dri/{render}")
    return found
