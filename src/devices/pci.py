"""PCI bus ids and the NUMA node the kernel reports for each GPU.

NVML writes bus ids with an 8-hex-digit domain in upper case
(`00000000:3B:00.0`); sysfs names the same function `0000:3b:00.0`. The NUMA
node is whatever `/sys/bus/pci/devices/<id>/numa_node` says; a file that
cannot be read or a negative value (`-1` on single-node machines) means "no
NUMA affinity", which is normal and not an error.
"""

from __future__ import annotations

from pathlib import Path

from devices.errors import DiscoveryError

SYSFS_ROOT = Path("/sys")


def sysfs_bus_id(bus_id: str) -> str:
    """Kernel form of an NVML bus id: one leading `0000` of the domain dropped, lower case.

    Also the canonical form for comparing bus ids from different NVML calls.
    """
    bus_id = bus_id.strip().lower()
    domain, sep, rest = bus_id.partition(":")
    if sep and len(domain) == 8 and domain.startswith("0000"):
        return f"{domain[4:]}:{rest}"
    return bus_id


def numa_node_path(bus_id: str, *, sysfs_root: Path = SYSFS_ROOT) -> Path:
    """Sysfs file holding the NUMA node of the PCI function `bus_id` (NVML form)."""
    return sysfs_root / "bus" / "pci" / "devices" / sysfs_bus_id(bus_id) / "numa_node"


def read_numa_node(bus_id: str, *, sysfs_root: Path = SYSFS_ROOT) -> int | None:
    """NUMA node of a GPU, or None when the kernel reports none.

    Raises:
        DiscoveryError: the file holds something other than an integer.
    """
    path = numa_node_path(bus_id, sysfs_root=sysfs_root)
    try:
        text = path.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None
    try:
        node = int(text)
    except ValueError as exc:
        raise DiscoveryError(f"cannot parse NUMA node {text!r} in {path}") from exc
    return node if node >= 0 else None
