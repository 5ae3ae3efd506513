"""PCI bus ids and NUMA nodes, MIG capability minors, NVLink lane counting, P2P levels."""

from __future__ import annotations

from pathlib import Path

import pytest

from devices.errors import DiscoveryError
from devices.migcaps import (
    parse_mig_minors,
    read_mig_minors,
    standard_ci_minor,
    standard_gi_minor,
)
from devices.model import P2PLevel
from devices.pci import numa_node_path, read_numa_node, sysfs_bus_id
from devices.topology import combine_nvlinks, p2p_level


@pytest.mark.parametrize(
    ("nvml", "kernel"),
    [
        pytest.param("00000000:3B:00.0", "0000:3b:00.0", id="nvml-form"),
        pytest.param("0000:3b:00.0", "0000:3b:00.0", id="already-kernel-form"),
        pytest.param("00010000:3B:00.0", "00010000:3b:00.0", id="non-zero-high-domain"),
        pytest.param("00000001:C1:00.1", "0001:c1:00.1", id="domain-1-function-1"),
    ],
)
def test_sysfs_bus_id(nvml: str, kernel: str) -> None:
    assert sysfs_bus_id(nvml) == kernel


def test_numa_node_path() -> None:
    assert numa_node_path("00000000:3B:00.0") == Path("/sys/bus/pci/devices/0000:3b:00.0/numa_node")


@pytest.mark.parametrize(
    ("content", "node"),
    [
        pytest.param("1\n", 1, id="node-1"),
        pytest.param("0", 0, id="node-0"),
        pytest.param("-1\n", None, id="negative-means-none"),
        pytest.param(None, None, id="unreadable-means-none"),
    ],
)
def test_read_numa_node(tmp_path: Path, content: str | None, node: int | None) -> None:
    if content is not None:
        path = numa_node_path("00000000:3B:00.0", sysfs_root=tmp_path)
        path.parent.mkdir(parents=True)
        path.write_text(content)
    assert read_numa_node("00000000:3B:00.0", sysfs_root=tmp_path) == node


def test_non_integer_numa_node_is_an_error(tmp_path: Path) -> None:
    path = numa_node_path("00000000:3B:00.0", sysfs_root=tmp_path)
    path.parent.mkdir(parents=True)
    path.write_text("zero\n")
    with pytest.raises(DiscoveryError, match=r"cannot parse NUMA node 'zero' in .*0000:3b:00\.0"):
        read_numa_node("00000000:3B:00.0", sysfs_root=tmp_path)


def test_parse_mig_minors_skips_unknown_lines() -> None:
    minors = parse_mig_minors(
        "config 1\nmonitor 2\ngpu0/gi1/access 12\ngpu0/gi1/ci0/access 13\n"
        "something else\ngpu3/gi2/ci1/access 424\n"
    )
    assert minors.gi_minor(0, 1) == 12
    assert minors.ci_minor(0, 1, 0) == 13
    assert minors.ci_minor(3, 2, 1) == 424
    assert minors.gi_minor(3, 2) is None


def test_missing_mig_minors_file_is_empty(tmp_path: Path) -> None:
    minors = read_mig_minors(tmp_path / "absent")
    assert minors.gi_minor(0, 0) is None


def test_standard_minor_layout_matches_the_driver_file() -> None:
    # What the driver writes: 15 GPU instances per GPU, 9 minors per GPU instance.
    lines = ["config 1", "monitor 2"]
    minor = 3
    for gpu in range(2):
        for gi in range(15):
            lines.append(f"gpu{gpu}/gi{gi}/access {minor}")
            minor += 1
            for ci in range(8):
                lines.append(f"gpu{gpu}/gi{gi}/ci{ci}/access {minor}")
                minor += 1
    parsed = parse_mig_minors("\n".join(lines))
    for (gpu, gi), value in parsed.gpu_instances.items():
        assert standard_gi_minor(gpu, gi) == value
    for (gpu, gi, ci), value in parsed.compute_instances.items():
        assert standard_ci_minor(gpu, gi, ci) == value
    assert (standard_gi_minor(0, 1), standard_ci_minor(0, 1, 0)) == (12, 13)


@pytest.mark.parametrize(
    ("value", "level"),
    [
        pytest.param(0, P2PLevel.INTERNAL, id="internal"),
        pytest.param(10, P2PLevel.SINGLE, id="single"),
        pytest.param(20, P2PLevel.MULTIPLE, id="multiple"),
        pytest.param(30, P2PLevel.HOSTBRIDGE, id="hostbridge"),
        pytest.param(40, P2PLevel.NODE, id="node"),
        pytest.param(50, P2PLevel.SYSTEM, id="system"),
    ],
)
def test_p2p_level(value: int, level: P2PLevel) -> None:
    assert p2p_level(value) is level


def test_unknown_p2p_level() -> None:
    with pytest.raises(ValueError, match="unknown topology level: 45"):
        p2p_level(45)


def test_combine_direct_links() -> None:
    direct = [{1: 2}, {0: 2, 2: 1}, {1: 1}]
    assert combine_nvlinks(direct, [{}, {}, {}]) == [{1: 2}, {0: 2, 2: 1}, {1: 1}]


def test_combine_switched_links_counts_lanes_both_ends_bring() -> None:
    # DGX A100 style: every GPU has 2 lanes to each of 6 switches -> 12 lanes to every peer.
    switches = {f"0000:{b:02x}:00.0": 2 for b in range(0xC0, 0xC6)}
    result = combine_nvlinks([{}, {}, {}], [switches, switches, switches])
    assert result == [{1: 12, 2: 12}, {0: 12, 2: 12}, {0: 12, 1: 12}]


def test_combine_partial_switch_overlap_and_mixed_links() -> None:
    switched = [{"s1": 2, "s2": 2}, {"s1": 1}, {"s3": 4}]
    direct = [{2: 1}, {}, {0: 1}]
    assert combine_nvlinks(direct, switched) == [{1: 1, 2: 1}, {0: 1}, {0: 1}]


def test_combine_rejects_mismatched_lists() -> None:
    with pytest.raises(ValueError, match="differ in length"):
        combine_nvlinks([{}], [])
