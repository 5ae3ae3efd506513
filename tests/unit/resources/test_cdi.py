"""CDI spec generation, checked against rules written from the CDI specification."""

from __future__ import annotations

import json
import stat
from pathlib import Path
from typing import Any

import pytest

from resources.allocation import Allocator
from resources.builder import plan_resources
from resources.cdi_files import spec_file_name, write_spec
from resources.cdi_spec import cdi_specs, gpu_spec
from resources.options import DeviceIdStrategy, DeviceListStrategy, MigStrategy
from tests.unit.cdi.validate import cdi_problems

from .nodes import FakeHost, gpu_uuid, inventory, make_gpu, mig_uuid

# --- Specs.

MIXED_NODE = inventory(
    [
        make_gpu(0, minor=1),
        make_gpu(1, minor=0, migs=[(0, "1g.5gb", 4864), (2, "2g.10gb", 9984)]),
    ]
)
HOST = FakeHost(
    files={"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/gdrdrv", "/dev/infiniband/uverbs0"},
    char_devices={"/dev/nvidia-caps-imex-channels/channel0"},
)
CDI_ONLY = (DeviceListStrategy.CDI_CRI,)


# Options whose driver root is an empty directory: no driver files to find.
def no_driver(tmp: Path, **kwargs: Any) -> Any:
    return HOST.options(driver_root_ctr_path=str(tmp), sysfs_root=str(tmp / "sys"), **kwargs)


def devices_of(spec: dict[str, Any]) -> dict[str, list[tuple[str, str]]]:
    return {
        device["name"]: [
            (n["path"], n["hostPath"]) for n in device["containerEdits"]["deviceNodes"]
        ]
        for device in spec["devices"]
    }


def test_gpu_spec_lists_whole_gpus_and_mig_devices(tmp_path: Path) -> None:
    spec = gpu_spec(MIXED_NODE, no_driver(tmp_path, mig_strategy=MigStrategy.MIXED))
    assert spec["cdiVersion"] == "0.5.0"
    assert spec["kind"] == "k8s.device-plugin.nvidia.com/gpu"
    assert devices_of(spec) == {
        gpu_uuid(0): [("/dev/nvidia1", "/dev/nvidia1")],
        # The MIG-enabled parent is a device too, as in the reference.
        gpu_uuid(1): [("/dev/nvidia0", "/dev/nvidia0")],
        mig_uuid(1, 0): [
            ("/dev/nvidia0", "/dev/nvidia0"),
            ("/dev/nvidia-caps/nvidia-cap100", "/dev/nvidia-caps/nvidia-cap100"),
            ("/dev/nvidia-caps/nvidia-cap101", "/dev/nvidia-caps/nvidia-cap101"),
        ],
        mig_uuid(1, 2): [
            ("/dev/nvidia0", "/dev/nvidia0"),
            ("/dev/nvidia-caps/nvidia-cap104", "/dev/nvidia-caps/nvidia-cap104"),
            ("/dev/nvidia-caps/nvidia-cap105", "/dev/nvidia-caps/nvidia-cap105"),
        ],
    }
    assert [d["name"] for d in spec["devices"]] == sorted(d["name"] for d in spec["devices"])
    assert spec["containerEdits"] == {
        "env": ["NVIDIA_VISIBLE_DEVICES=void"],
        "deviceNodes": [
            {"path": "/dev/nvidia-uvm", "hostPath": "/dev/nvidia-uvm"},
            {"path": "/dev/nvidiactl", "hostPath": "/dev/nvidiactl"},
        ],
    }
    assert cdi_problems(spec) == []


def test_index_names_and_mig_enabled_gpus_under_none(tmp_path: Path) -> None:
    options = no_driver(tmp_path, device_id_strategy=DeviceIdStrategy.INDEX)
    spec = gpu_spec(MIXED_NODE, options)
    assert list(devices_of(spec)) == ["0", "1", "1:0", "1:2"]
    assert cdi_problems(spec) == []


@pytest.mark.parametrize(
    ("host", "roots", "expected"),
    [
        pytest.param(
            FakeHost(dirs={"/driver-root/dev"}),
            {"driver_root": "/run/nvidia/driver", "dev_root": "/elsewhere"},
            "/run/nvidia/driver/dev/nvidia1",
            id="driver-container-root-holds-dev",
        ),
        pytest.param(
            FakeHost(),
            {"driver_root": "/run/nvidia/driver", "dev_root": "/host"},
            "/host/dev/nvidia1",
            id="dev-root",
        ),
        pytest.param(
            FakeHost(),
            {"driver_root": "/run/nvidia/driver"},
            "/run/nvidia/driver/dev/nvidia1",
            id="dev-root-falls-back-to-driver-root",
        ),
        pytest.param(FakeHost(), {}, "/dev/nvidia1", id="defaults"),
    ],
)
def test_host_paths_follow_the_roots(host: FakeHost, roots: dict[str, str], expected: str) -> None:
    # The default driver root mount, /driver-root, does not exist on a test machine.
    spec = gpu_spec(MIXED_NODE, host.options(mig_strategy=MigStrategy.MIXED, **roots))
    assert devices_of(spec)[gpu_uuid(0)] == [("/dev/nvidia1", expected)]


def test_all_specs_for_the_cdi_strategies(tmp_path: Path) -> None:
    options = no_driver(
        tmp_path,
        device_list_strategy=CDI_ONLY,
        mig_strategy=MigStrategy.MIXED,
        imex_channel_ids=(0,),
        gdrcopy_enabled=True,
        gds_enabled=True,  # no /dev/nvidia-fs*: dropped, as an empty spec would be
        mofed_enabled=True,
    )
    specs = cdi_specs(MIXED_NODE, options)
    assert [spec["kind"].split("/")[1] for spec in specs] == [
        "gpu",
        "imex-channel",
        "gdrcopy",
        "mofed",
    ]
    assert devices_of(specs[1]) == {
        "0": [
            ("/dev/nvidia-caps-imex-channels/channel0", "/dev/nvidia-caps-imex-channels/channel0")
        ]
    }
    assert devices_of(specs[2]) == {"all": [("/dev/gdrdrv", "/dev/gdrdrv")]}
    assert devices_of(specs[3]) == {"all": [("/dev/infiniband/uverbs0", "/dev/infiniband/uverbs0")]}
    assert [spec_file_name(spec) for spec in specs] == [
        "k8s.device-plugin.nvidia.com-gpu.json",
        "k8s.device-plugin.nvidia.com-imex-channel.json",
        "k8s.device-plugin.nvidia.com-gdrcopy.json",
        "k8s.device-plugin.nvidia.com-mofed.json",
    ]
    for spec in specs:
        assert cdi_problems(spec) == [], spec["kind"]
    # Every class but IMEX tells nvidia-container-runtime to add nothing itself.
    assert [spec.get("containerEdits") for spec in specs] == [
        specs[0]["containerEdits"],
        None,
        {"env": ["NVIDIA_VISIBLE_DEVICES=void"]},
        {"env": ["NVIDIA_VISIBLE_DEVICES=void"]},
    ]

    # Every name Allocate hands out resolves to a device of a written spec.
    known = {f"{spec['kind']}={d['name']}" for spec in specs for d in spec["devices"]}
    plan = plan_resources(MIXED_NODE, options)
    for resource in plan.resources:
        allocator = Allocator(resource, options)
        edits = allocator.allocate([device.id for device in resource.devices])
        assert set(edits.cdi_devices) <= known


def test_no_specs_without_a_cdi_strategy() -> None:
    assert cdi_specs(MIXED_NODE, HOST.options()) == ()


def test_the_validator_catches_broken_specs(tmp_path: Path) -> None:
    good = gpu_spec(MIXED_NODE, no_driver(tmp_path))
    broken = {
        **good,
        "cdiVersion": "0.4.0",
        "kind": "nvidia/gpu.x",
        "devices": [
            {"name": "-bad", "containerEdits": {}},
            {"name": "-bad", "containerEdits": {"deviceNodes": [{"path": "dev/x"}]}},
        ],
    }
    problems = cdi_problems(broken)
    assert "bad kind 'nvidia/gpu.x'" in problems
    assert "duplicate device names" in problems
    assert "bad device name '-bad'" in problems
    assert "device '-bad' has empty edits" in problems
    assert any(p.startswith("relative device node") for p in problems)
    assert "features need cdiVersion 0.5.0, spec says 0.4.0" in problems


def test_write_spec_is_atomic_and_world_readable(tmp_path: Path) -> None:
    spec = gpu_spec(MIXED_NODE, no_driver(tmp_path / "root"))
    target = tmp_path / "cdi"
    path = write_spec(target, {**spec, "devices": spec["devices"][:1]})
    path = write_spec(target, spec)
    assert path == target / "k8s.device-plugin.nvidia.com-gpu.json"
    assert json.loads(path.read_text()) == spec
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert sorted(p.name for p in target.iterdir()) == [path.name]
