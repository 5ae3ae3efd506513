"""vGPU detection from PCI configuration space, on a fake sysfs tree."""

from __future__ import annotations

from pathlib import Path

import pytest

from devices.model import VgpuDevice
from labels.errors import LabelError
from labels.vgpu import (
    MalformedRecords,
    VgpuScanError,
    host_driver,
    is_vgpu,
    scan_vgpus,
    vendor_capability,
)

# The reference's own mock: a 27-byte vendor capability at 0xd0 holding "VF",
# then record 0 (22 bytes) with version "460.16" and branch "r460_00".
VGPU_CAPABILITY = (
    bytes([0x09, 0x68, 0x1B, 0x56, 0x46, 0x00, 0x16])
    + b"460.16"
    + b"\0" * 4
    + b"r460_00"
    + b"\0" * 3
)
# A 20-byte vendor capability without the signature: GPU passthrough, not a vGPU.
PASSTHROUGH_CAPABILITY = bytes([0x09, 0x00, 0x14]) + bytes(17)
POWER_MANAGEMENT = bytes([0x01, 0xD0, 0x03, 0x00])


def config_space(*capabilities: tuple[int, bytes], first: int | None = None) -> bytes:
    config = bytearray(256)
    config[0:2] = b"\xde\x10"
    if capabilities:
        config[0x06] = 0x10
        config[0x34] = capabilities[0][0] if first is None else first
    for offset, capability in capabilities:
        config[offset : offset + len(capability)] = capability
    return bytes(config)


def add_device(
    sysfs: Path, bus_id: str, config: bytes, *, vendor: str = "0x10de", pci_class: str = "0x030000"
) -> Path:
    directory = sysfs / "bus" / "pci" / "devices" / bus_id
    directory.mkdir(parents=True)
    (directory / "vendor").write_text(vendor + "\n")
    (directory / "class").write_text(pci_class + "\n")
    (directory / "config").write_bytes(config)
    return directory


def test_reference_vectors() -> None:
    vgpu = vendor_capability(config_space((0xD0, VGPU_CAPABILITY)))
    assert vgpu == VGPU_CAPABILITY
    assert is_vgpu(vgpu)
    assert host_driver(VGPU_CAPABILITY, where="x") == ("460.16", "r460_00")
    passthrough = vendor_capability(config_space((0xD0, PASSTHROUGH_CAPABILITY)))
    assert passthrough == PASSTHROUGH_CAPABILITY
    assert not is_vgpu(passthrough)


@pytest.mark.parametrize(
    ("config", "found"),
    [
        pytest.param(config_space(), None, id="no-capabilities"),
        pytest.param(
            config_space((0x40, POWER_MANAGEMENT), (0xD0, VGPU_CAPABILITY)),
            VGPU_CAPABILITY,
            id="second-in-list",
        ),
        pytest.param(config_space((0x40, bytes([0x01, 0x40, 0x00, 0x00]))), None, id="loop-stops"),
        pytest.param(config_space((0x40, bytes([0xFF, 0xD0, 0x00]))), None, id="end-marker"),
    ],
)
def test_capability_walk(config: bytes, found: bytes | None) -> None:
    assert vendor_capability(config) == found


def test_missing_host_driver_record_is_an_error() -> None:
    # The signature, then only a record with a non-zero id.
    capability = bytes([0x09, 0x00, 0x0A, 0x56, 0x46, 0x01, 0x05, 0, 0, 0])
    with pytest.raises(LabelError, match=r"^vGPU device 0000:06:00.0: no host driver"):
        host_driver(capability, where="0000:06:00.0")


SIGNATURE = bytes([0x09, 0x00, 0x00, 0x56, 0x46])


def capability_of(records: bytes) -> bytes:
    """A vendor capability: the signature, then ``records``, its length byte set."""
    body = SIGNATURE + records
    return body[:2] + bytes([len(body)]) + body[3:]


# Upstream v0.20.1 (#1891, #1994): each of these hung GFD or read past the capability.
MALFORMED = {
    # A record of length 0 before the host driver's: the walk would revisit it forever.
    "zero-length-record": capability_of(bytes([0x01, 0x00]) + VGPU_CAPABILITY[5:]),
    # Length 1: shorter than the record's own two-byte header.
    "length-shorter-than-header": capability_of(bytes([0x01, 0x01, 0x00])),
    # The list ends in the middle of a record header.
    "truncated-header": capability_of(bytes([0x01])),
    # A record whose length points past the end of the capability.
    "length-past-the-end": capability_of(bytes([0x01, 0xF0, 0, 0, 0])),
    # The host-driver record, cut off before its branch.
    "truncated-host-driver-record": capability_of(VGPU_CAPABILITY[5:-1]),
    # The host-driver record says it is shorter than its two fields.
    "host-driver-record-too-short": capability_of(bytes([0x00, 0x05]) + VGPU_CAPABILITY[7:]),
}


@pytest.mark.parametrize("capability", MALFORMED.values(), ids=MALFORMED.keys())
def test_malformed_records_are_said_not_walked(capability: bytes) -> None:
    with pytest.raises(MalformedRecords, match=r"^(host driver )?record at offset \d+ "):
        host_driver(capability, where="x")


@pytest.mark.parametrize("capability", MALFORMED.values(), ids=MALFORMED.keys())
def test_a_malformed_vgpu_is_labelled_without_its_host_driver_and_one_warning(
    tmp_path: Path, logs: list[tuple[str, str]], capability: bytes
) -> None:
    add_device(tmp_path, "0000:06:00.0", config_space((0xD0, capability)))
    assert scan_vgpus(tmp_path) == (VgpuDevice("0000:06:00.0", None, None),)
    warnings = [text for level, text in logs if level == "WARNING"]
    assert len(warnings) == 1
    assert warnings[0].startswith("vGPU device 0000:06:00.0: host driver labels left out")


def test_a_capability_longer_than_config_space_is_cut_at_its_end(
    tmp_path: Path, logs: list[tuple[str, str]]
) -> None:
    # The capability's length byte says 0xff, from offset 0xf0: 16 bytes are there.
    capability = bytes([0x09, 0x00, 0xFF, 0x56, 0x46, 0x01, 0x30])
    add_device(tmp_path, "0000:06:00.0", config_space((0xF0, capability)))
    assert scan_vgpus(tmp_path) == (VgpuDevice("0000:06:00.0", None, None),)
    assert "past the end at 16" in logs[-1][1]


def test_scan_finds_vgpus_in_bus_order_and_skips_others(tmp_path: Path) -> None:
    other = VGPU_CAPABILITY.replace(b"460.16", b"470.82").replace(b"r460_00", b"r470_10")
    add_device(tmp_path, "0000:07:00.0", config_space((0xD0, other)))
    add_device(tmp_path, "0000:06:00.0", config_space((0xD0, VGPU_CAPABILITY)))
    add_device(tmp_path, "0000:05:00.0", config_space((0xD0, PASSTHROUGH_CAPABILITY)))
    add_device(tmp_path, "0000:00:1f.0", b"\x86\x80", vendor="0x8086")
    assert scan_vgpus(tmp_path) == (
        VgpuDevice("0000:06:00.0", "460.16", "r460_00"),
        VgpuDevice("0000:07:00.0", "470.82", "r470_10"),
    )


def test_scan_without_nvidia_devices_finds_nothing(tmp_path: Path) -> None:
    add_device(tmp_path, "0000:00:1f.0", b"\x86\x80", vendor="0x8086")
    assert scan_vgpus(tmp_path) == ()


def test_unprivileged_config_space_fails_the_scan(tmp_path: Path) -> None:
    add_device(tmp_path, "0000:06:00.0", config_space((0xD0, VGPU_CAPABILITY))[:64])
    with pytest.raises(VgpuScanError, match="privileged"):
        scan_vgpus(tmp_path)


def test_missing_sysfs_fails_the_scan(tmp_path: Path) -> None:
    with pytest.raises(VgpuScanError):
        scan_vgpus(tmp_path / "nothing")


def test_unreadable_device_file_fails_the_scan(tmp_path: Path) -> None:
    directory = add_device(tmp_path, "0000:06:00.0", config_space())
    (directory / "class").unlink()
    with pytest.raises(VgpuScanError):
        scan_vgpus(tmp_path)
