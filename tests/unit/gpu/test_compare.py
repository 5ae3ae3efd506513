"""The GPU check's reading of nvidia-smi and its field-by-field comparison."""

from __future__ import annotations

import dataclasses

import pytest

from devices.model import Gpu, Inventory
from scripts.gpu_check.compare import FIELDS, Field, compare, our_mig_mode, render, same
from scripts.gpu_check.smi import QUERY_FIELDS, SmiError, parse_csv, render_profile

H200 = Gpu(
    index=0,
    minor=0,
    uuid="GPU-5e1f0c3a-6a0b-4f7e-9d1c-2b3a4c5d6e7f",
    name="NVIDIA H200",
    memory_mib=143771,
    pci_bus_id="00000000:07:00.0",
    numa_node=0,
    compute_capability="9.0",
    mig_capable=True,
)
SECOND = dataclasses.replace(
    H200,
    index=1,
    minor=1,
    uuid="GPU-0a1b2c3d-0000-4000-8000-000000000001",
    pci_bus_id="00000000:1B:00.0",
)
NODE = Inventory(driver_version="580.159.04", cuda_driver_version="13.0", gpus=(H200, SECOND))


def smi_line(gpu: Gpu, **override: str) -> str:
    values = {
        "uuid": gpu.uuid,
        "name": gpu.name,
        "memory.total": str(gpu.memory_mib),
        "pci.bus_id": gpu.pci_bus_id,
        "compute_cap": gpu.compute_capability,
        "driver_version": NODE.driver_version,
        "mig.mode.current": our_mig_mode(gpu),
    }
    values.update({k.replace("_dot_", "."): v for k, v in override.items()})
    return ", ".join(values[f] for f in QUERY_FIELDS)


def field(name: str) -> Field:
    return next(f for f in FIELDS if f.smi == name)


def test_parse_csv_reads_nvidia_smi_lines() -> None:
    text = (
        "GPU-5e1f0c3a-6a0b-4f7e-9d1c-2b3a4c5d6e7f, NVIDIA H200, 143771, 00000000:07:00.0, "
        "9.0, 580.159.04, Disabled\n\n"
    )
    (row,) = parse_csv(text)
    assert row == {
        "uuid": "GPU-5e1f0c3a-6a0b-4f7e-9d1c-2b3a4c5d6e7f",
        "name": "NVIDIA H200",
        "memory.total": "143771",
        "pci.bus_id": "00000000:07:00.0",
        "compute_cap": "9.0",
        "driver_version": "580.159.04",
        "mig.mode.current": "Disabled",
    }


def test_parse_csv_rejects_a_short_line() -> None:
    with pytest.raises(SmiError, match="line 1 has 2 values, expected 7"):
        parse_csv("GPU-1, NVIDIA H200\n")


@pytest.mark.parametrize(
    ("name", "ours", "theirs", "expected"),
    [
        pytest.param("memory.total", "143771", "143771", True, id="memory-nounits"),
        pytest.param("memory.total", "143771", "143771 MiB", True, id="memory-with-unit"),
        pytest.param("memory.total", "143771", "143770", False, id="memory-differs"),
        pytest.param("pci.bus_id", "00000000:07:00.0", "00000000:07:00.0", True, id="bus-same"),
        pytest.param("pci.bus_id", "00000000:1B:00.0", "00000000:1b:00.0", True, id="bus-case"),
        pytest.param("pci.bus_id", "00000000:07:00.0", "0000:07:00.0", True, id="bus-4-digit"),
        pytest.param("pci.bus_id", "00000000:07:00.0", "00000000:08:00.0", False, id="bus-other"),
        pytest.param("compute_cap", "8.0", "8.0", True, id="cc-same"),
        pytest.param("compute_cap", "9.0", "8.0", False, id="cc-differs"),
        pytest.param("mig.mode.current", "[N/A]", "[N/A]", True, id="mig-na"),
        pytest.param("mig.mode.current", "[N/A]", "N/A", True, id="mig-na-bare"),
        pytest.param("mig.mode.current", "[N/A]", "[Not Supported]", True, id="mig-unsupported"),
        pytest.param("mig.mode.current", "Disabled", "Disabled", True, id="mig-off"),
        pytest.param("mig.mode.current", "Disabled", "Enabled", False, id="mig-differs"),
        pytest.param("mig.mode.current", "Disabled", "[N/A]", False, id="mig-capable-differs"),
        pytest.param("name", "NVIDIA H200", "NVIDIA H100", False, id="name-differs"),
        pytest.param("uuid", H200.uuid, H200.uuid.upper(), False, id="uuid-case-counts"),
    ],
)
def test_same_sets_aside_spelling_only(name: str, ours: str, theirs: str, expected: bool) -> None:
    assert same(field(name), ours, theirs) is expected


@pytest.mark.parametrize(
    ("gpu", "expected"),
    [
        pytest.param(dataclasses.replace(H200, mig_capable=False), "[N/A]", id="not-capable"),
        pytest.param(H200, "Disabled", id="capable-off"),
        pytest.param(dataclasses.replace(H200, mig_enabled=True), "Enabled", id="on"),
    ],
)
def test_our_mig_mode_speaks_nvidia_smi(gpu: Gpu, expected: str) -> None:
    assert our_mig_mode(gpu) == expected


def test_identical_tables_match_everywhere() -> None:
    rows = parse_csv("\n".join(smi_line(g) for g in NODE.gpus))
    checks = compare(NODE, rows)
    assert [c.diffs for c in checks] == [0, 0]
    assert all("paired by UUID" in c.title for c in checks)
    assert [len(c.fields) for c in checks] == [len(QUERY_FIELDS)] * 2


def test_rows_pair_by_uuid_whatever_their_order() -> None:
    rows = parse_csv("\n".join(smi_line(g) for g in reversed(NODE.gpus)))
    assert [c.diffs for c in compare(NODE, rows)] == [0, 0]


def test_one_wrong_field_is_one_diff() -> None:
    rows = parse_csv(smi_line(H200, memory_dot_total="143360") + "\n" + smi_line(SECOND))
    first, second = compare(NODE, rows)
    assert first.diffs == 1
    assert second.diffs == 0
    (diff,) = [f for f in first.fields if not f.match]
    assert (diff.field, diff.ours, diff.theirs) == ("memory.total", "143771", "143360")


def test_unknown_uuid_pairs_by_position() -> None:
    rows = parse_csv(smi_line(H200) + "\n" + smi_line(SECOND, uuid="GPU-ffffffff"))
    _, second = compare(NODE, rows)
    assert "paired by position" in second.title
    assert [f.field for f in second.fields if not f.match] == ["uuid"]


def test_gpus_missing_on_either_side_are_diffs() -> None:
    only_first = compare(NODE, parse_csv(smi_line(H200)))
    assert "not listed by nvidia-smi" in only_first[1].title
    assert only_first[1].diffs == len(QUERY_FIELDS)
    alone = Inventory(driver_version=NODE.driver_version, cuda_driver_version="13.0", gpus=(H200,))
    extra = compare(alone, parse_csv(smi_line(H200) + "\n" + smi_line(SECOND)))
    assert "not discovered by us" in extra[1].title
    assert extra[1].diffs == len(QUERY_FIELDS)


def test_render_puts_both_sides_and_the_verdict_on_one_line() -> None:
    rows = parse_csv(smi_line(H200, compute_cap="8.0") + "\n" + smi_line(SECOND))
    lines = render(compare(NODE, rows))
    assert lines[0] == f"GPU 0 {H200.uuid} (paired by UUID)"
    assert lines[1].split() == ["field", "ours", "nvidia-smi", "result"]
    cc = next(line for line in lines[:9] if line.split()[0] == "compute_cap")
    assert cc.split() == ["compute_cap", "9.0", "8.0", "DIFF"]
    name = next(line for line in lines[:9] if line.split()[0] == "name")
    assert name.split() == ["name", "NVIDIA", "H200", "NVIDIA", "H200", "MATCH"]
    # columns line up: every verdict starts at the same offset within a table
    offsets = {line.rfind("  ") for line in lines[1:9]}
    assert len(offsets) == 1


@pytest.mark.parametrize(
    ("spec", "mode"),
    [
        pytest.param({}, "[N/A]", id="no-mig-keys"),
        pytest.param({"migCapable": False}, "[N/A]", id="not-capable"),
        pytest.param({"migCapable": True}, "Disabled", id="capable"),
        pytest.param({"migEnabled": True}, "Enabled", id="enabled-implies-capable"),
    ],
)
def test_render_profile_writes_what_nvidia_smi_would(spec: dict[str, object], mode: str) -> None:
    gpu = {
        "uuid": H200.uuid,
        "name": "NVIDIA H200",
        "memoryMiB": 143771,
        "pciBusID": "00000000:07:00.0",
        "computeCapability": "9.0",
        **spec,
    }
    text = render_profile({"driverVersion": "580.159.04", "gpus": [gpu]})
    (row,) = parse_csv(text)
    assert row["mig.mode.current"] == mode
    assert row["memory.total"] == "143771"
    assert row["driver_version"] == "580.159.04"


def test_render_profile_fails_like_nvidia_smi_when_nvml_does() -> None:
    with pytest.raises(SmiError, match="version mismatch"):
        render_profile({"initError": "RM has detected an NVML/RM version mismatch.", "gpus": []})
