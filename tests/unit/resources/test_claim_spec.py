"""A DRA claim's CDI spec: one transient file per claim, devices named `<uid>-<device>`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from resources.cdi_files import write_spec
from resources.claim_spec import (
    ClaimDevice,
    claim_device_id,
    claim_spec,
    claim_spec_file,
)
from resources.errors import ResourceError
from resources.options import MigStrategy
from tests.unit.cdi.validate import cdi_problems

from .nodes import gpu_uuid, inventory, make_gpu, mig_uuid
from .test_cdi import devices_of, no_driver

UID = "0a1b2c3d-0000-4000-8000-000000000001"
NODE = inventory([make_gpu(0, minor=0), make_gpu(1, minor=1, migs=[(0, "1g.5gb", 4864)])])


def test_names_follow_the_claim_and_the_driver() -> None:
    assert claim_spec_file("gpu.nvidia.com", UID) == f"k8s.gpu.nvidia.com-claim_{UID}.json"
    assert claim_device_id("gpu.nvidia.com", UID, "gpu-0") == (
        f"k8s.gpu.nvidia.com/claim={UID}-gpu-0"
    )


def test_a_claim_spec_holds_its_gpus_and_mig_devices_and_is_valid_cdi(tmp_path: Path) -> None:
    options = no_driver(tmp_path, mig_strategy=MigStrategy.MIXED)
    spec = claim_spec(
        driver="gpu.nvidia.com",
        claim_uid=UID,
        devices=[ClaimDevice("gpu-0", gpu_uuid(0)), ClaimDevice("gpu-1-mig-0", mig_uuid(1, 0))],
        inventory=NODE,
        options=options,
    )
    assert spec["kind"] == "k8s.gpu.nvidia.com/claim"
    assert devices_of(spec) == {
        f"{UID}-gpu-0": [("/dev/nvidia0", "/dev/nvidia0")],
        f"{UID}-gpu-1-mig-0": [
            ("/dev/nvidia1", "/dev/nvidia1"),
            ("/dev/nvidia-caps/nvidia-cap200", "/dev/nvidia-caps/nvidia-cap200"),
            ("/dev/nvidia-caps/nvidia-cap201", "/dev/nvidia-caps/nvidia-cap201"),
        ],
    }
    written = write_spec(tmp_path / "cdi", spec, claim_spec_file("gpu.nvidia.com", UID))
    assert written.name == f"k8s.gpu.nvidia.com-claim_{UID}.json"
    assert cdi_problems(json.loads(written.read_text())) == []


def test_a_device_not_on_the_node_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ResourceError, match="GPU-gone is not on this node"):
        claim_spec(
            driver="gpu.nvidia.com",
            claim_uid=UID,
            devices=[ClaimDevice("gpu-9", "GPU-gone")],
            inventory=NODE,
            options=no_driver(tmp_path),
        )
