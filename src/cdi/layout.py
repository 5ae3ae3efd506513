"""Where the driver is, here and on the host.

The plugin looks for files through its own mounts and writes a spec for the
runtime, which reads host paths. Three layouts are common:

* host driver: `--nvidia-driver-root=/`, the host's `/` mounted at
  `/driver-root`; host paths are the paths below the root;
* driver container: `--nvidia-driver-root=/run/nvidia/driver` mounted at
  `/driver-root`, whose `dev` directory holds the device nodes; host paths
  are rewritten under `/run/nvidia/driver`;
* split dev root: a driver container's files with the host's own `/dev`
  (`--dev-root=/`): libraries under the driver root, nodes under the dev root.

Container paths never change: a library the host has at
`/run/nvidia/driver/usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15` is
mounted at `/usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15` in the workload.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field

from cdi.edits import DeviceNode, Mount
from cdi.rootfs import RootView


def host_join(root: str, path: str) -> str:
    """`root` + absolute `path`, normalised (`/` + `/dev/x` is `/dev/x`)."""
    joined = os.path.normpath(root.rstrip("/") + "/" + path.lstrip("/"))
    return "/" + joined.lstrip("/")


@dataclass(frozen=True, kw_only=True)
class Layout:
    """The roots of one node, for the container looking and the host reading.

    Attributes:
        driver_root: the driver root on the host (`--nvidia-driver-root`).
        driver_root_ctr: where that root is mounted here (`--driver-root-ctr-path`).
        dev_root: the host root that `dev_root_ctr` shows (the driver root
            when the driver root carries `/dev`, else `--dev-root`).
        dev_root_ctr: the root of `/dev` here.
        sysfs_root: sysfs here (`/sys`; a temp tree in tests).
        dev_exists: probe for a device node at a path here; injected so
            tests can describe `/dev` without mknod.
    """

    driver_root: str = "/"
    driver_root_ctr: str = "/driver-root"
    dev_root: str = "/"
    dev_root_ctr: str = "/"
    sysfs_root: str = "/sys"
    dev_exists: Callable[[str], bool] = field(
        default=os.path.exists, compare=False, hash=False, repr=False
    )

    @property
    def driver(self) -> RootView:
        return RootView(self.driver_root_ctr)

    @property
    def dev(self) -> RootView:
        return RootView(self.dev_root_ctr)

    def mount(self, path: str, options: tuple[str, ...] | None = None) -> Mount:
        """A bind mount of driver-root file `path` at the same path in the workload."""
        host = host_join(self.driver_root, path)
        return Mount(path, host) if options is None else Mount(path, host, options)

    def device_node(self, path: str) -> DeviceNode:
        return DeviceNode(path, host_join(self.dev_root, path))

    def has_device_node(self, path: str) -> bool:
        try:
            return bool(self.dev_exists(host_join(self.dev_root_ctr, path)))
        except (OSError, ValueError):
            return False
