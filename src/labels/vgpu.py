"""Finding vGPUs, and the host driver behind them, in PCI configuration space.

Inside a virtual machine NVML cannot tell the hypervisor's driver version,
but the vGPU's PCI function carries it: NVIDIA's vendor-specific capability
(id 0x09) starts with the signature ``VF`` and holds records, one of which
(id 0) gives the host driver version and branch as NUL-padded text. Reading
full configuration space needs a privileged container (an unprivileged one
sees only the first 64 bytes), so a failed scan is not an error: the vGPU
labels are just left out. A vGPU whose well-formed record list has no
host-driver record is an error, as in the reference.

The records come from a hypervisor, and some are malformed: a record too
short for its own header (a zero length would revisit it forever), one that
runs past the end of the capability, a host-driver record too short for its
fields. Such a vGPU is still labelled, without the host driver, and its
scan says why in one warning: a bad record never hangs or fails the pass.
"""

from __future__ import annotations

from pathlib import Path

from loguru import logger

from devices.model import VgpuDevice
from labels.errors import LabelError

__all__ = [
    "MalformedRecords",
    "VgpuScanError",
    "host_driver",
    "scan_vgpus",
    "vendor_capability",
]

NVIDIA_VENDOR = "0x10de"
_CONFIG_SIZE = 256
_STATUS = 0x06
_STATUS_HAS_CAPABILITIES = 0x10
_CAPABILITIES_POINTER = 0x34
_VENDOR_SPECIFIC = 0x09
_END = 0xFF
_SIGNATURE = b"VF"
_RECORDS_START = 5
_HOST_DRIVER_RECORD = 0
_HEADER = 2  # a record's id, then its length (header included)
_FIELD = 10  # bytes of the version, then of the branch
_HOST_DRIVER_LENGTH = _HEADER + 2 * _FIELD


class VgpuScanError(Exception):
    """The PCI devices could not be read (typically: not privileged); no vGPU labels."""


class MalformedRecords(Exception):
    """A vGPU capability whose records cannot be walked; its host driver is unknown."""


def vendor_capability(config: bytes) -> bytes | None:
    """The bytes of the first vendor-specific capability, or None."""
    if len(config) <= _CAPABILITIES_POINTER or not config[_STATUS] & _STATUS_HAS_CAPABILITIES:
        return None
    seen: set[int] = set()
    position = config[_CAPABILITIES_POINTER]
    # Pointer 0 ends the list; a loop in a corrupt list ends at the first revisit.
    while position and position not in seen and position + 2 < len(config):
        seen.add(position)
        cap_id = config[position]
        if cap_id == _END:
            return None
        if cap_id == _VENDOR_SPECIFIC:
            return config[position : position + config[position + 2]]
        position = config[position + 1]
    return None


def is_vgpu(capability: bytes | None) -> bool:
    return capability is not None and len(capability) >= 5 and capability[3:5] == _SIGNATURE


def _text(raw: bytes) -> str:
    return raw.strip(b"\0").decode("utf-8", errors="replace")


def host_driver(capability: bytes, *, where: str) -> tuple[str, str]:
    """(version, branch) from a vGPU capability's host-driver record.

    Every step is bounded by the capability's length, and every record moves
    the walk forward by at least its header, so the walk ends.

    Raises:
        MalformedRecords: a record is truncated, too short, or runs past the end.
        LabelError: the records are well formed but none is the host driver's.
    """
    size = len(capability)
    position = _RECORDS_START
    while position < size:
        if position + _HEADER > size:
            raise MalformedRecords(f"record at offset {position} is cut off by the end at {size}")
        record, length = capability[position], capability[position + 1]
        if record == _HOST_DRIVER_RECORD:
            if length < _HOST_DRIVER_LENGTH or position + _HOST_DRIVER_LENGTH > size:
                raise MalformedRecords(
                    f"host driver record at offset {position} has {min(length, size - position)} "
                    f"bytes; it needs {_HOST_DRIVER_LENGTH}"
                )
            fields = capability[position + _HEADER : position + _HOST_DRIVER_LENGTH]
            return _text(fields[:_FIELD]), _text(fields[_FIELD:])
        if length < _HEADER:
            raise MalformedRecords(
                f"record at offset {position} has length {length}, shorter than its header"
            )
        if position + length > size:
            raise MalformedRecords(
                f"record at offset {position} has length {length}, past the end at {size}"
            )
        position += length
    raise LabelError(f"vGPU device {where}: no host driver information in its PCI capability")


def _vgpu(bus_id: str, capability: bytes) -> VgpuDevice:
    try:
        version, branch = host_driver(capability, where=bus_id)
    except MalformedRecords as error:
        logger.warning(
            "vGPU device {}: host driver labels left out, its PCI capability is malformed: {}",
            bus_id,
            error,
        )
        return VgpuDevice(bus_id, None, None)
    return VgpuDevice(bus_id, version, branch)


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as error:
        raise VgpuScanError(f"{path}: {error.strerror or error}") from error


def scan_vgpus(sysfs_root: Path) -> tuple[VgpuDevice, ...]:
    """Every NVIDIA vGPU function under ``<sysfs_root>/bus/pci/devices``, in bus order.

    Raises:
        VgpuScanError: the devices could not be listed or read.
        LabelError: a vGPU whose well-formed records have no host driver's.
    """
    directory = sysfs_root / "bus" / "pci" / "devices"
    try:
        entries = sorted(directory.iterdir())
    except OSError as error:
        raise VgpuScanError(f"{directory}: {error.strerror or error}") from error
    found: list[VgpuDevice] = []
    for entry in entries:
        if _read(entry / "vendor").decode("ascii", errors="replace").strip() != NVIDIA_VENDOR:
            continue
        _read(entry / "class")
        config = _read(entry / "config")
        if len(config) < _CONFIG_SIZE:
            raise VgpuScanError(
                f"{entry.name}: only {len(config)} bytes of PCI config space are readable; "
                "reading vGPU information needs a privileged container"
            )
        capability = vendor_capability(config)
        if capability is None or not is_vgpu(capability):
            continue
        found.append(_vgpu(entry.name, capability))
    return tuple(found)
