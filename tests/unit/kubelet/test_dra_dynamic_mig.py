"""Preparing dynamic MIG placements: instances created and destroyed, overlaps refused, undone.

The device library is a fake that records what it is asked and can be made
to fail; the CDI directory and the checkpoint are real files. Each test
checks what the claim's answer is, what exists on the (fake) GPU afterwards
and what the checkpoint says, on the happy path and on each failure.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest

from devices.errors import MigError
from devices.model import Inventory, MigAttributes, MigDevice, MigPlacement
from kubelet.dra import checkpoint
from kubelet.dra.checkpoint import CheckpointError, MigRecord, Phase, PreparedClaim, load, save
from kubelet.dra.mig_instances import owned_instances
from kubelet.dra.prepare import ClaimPreparer
from kubelet.dra.types import ClaimRef, PreparedDevice
from resources.claim_catalog import Catalog, CatalogDevice
from tests.unit.kubelet.test_dra_prepare import (
    DRIVER,
    NODE,
    OTHER_UID,
    UID,
    Api,
    View,
    allocated,
    claim,
    spec_file,
)
from tests.unit.resources.nodes import FakeHost, gpu_uuid, inventory, make_gpu
from tests.unit.resources.test_cdi import no_driver

GPU = gpu_uuid(0)
BOOT = "6a9f6c1e-0d3b-4f5e-9a7b-3c2d1e0f9a8b"
THIRD_UID = "33333333-0000-4000-8000-000000000003"
ATTRIBUTES = MigAttributes(14, 1, 1, 1, 0, 0, 0, 0)
# (device name, profile, GI profile id, start, size, MiB) on an A100-SXM4-40GB.
PLACEMENTS = {
    "gpu-0-mig-1g5gb-19-2": MigPlacement("1g.5gb", 19, 2, 1, 4864, ATTRIBUTES),
    "gpu-0-mig-1g5gb-19-4": MigPlacement("1g.5gb", 19, 4, 1, 4864, ATTRIBUTES),
    "gpu-0-mig-1g5gb-19-5": MigPlacement("1g.5gb", 19, 5, 1, 4864, ATTRIBUTES),
    "gpu-0-mig-3g20gb-9-0": MigPlacement("3g.20gb", 9, 0, 4, 19968, ATTRIBUTES),
}


@dataclass
class FakeGpu:
    """The device library of one MIG-mode GPU: instances created and destroyed here."""

    node: Inventory
    instances: dict[int, MigDevice] = field(default_factory=dict)
    calls: list[str] = field(default_factory=list)
    fail_create: set[int] = field(default_factory=set)  # starts whose create fails
    in_use: set[int] = field(default_factory=set)  # GIs whose destroy is refused

    def inventory(self) -> Inventory:
        gpu = replace(self.node.gpus[0], mig_devices=tuple(self.instances.values()))
        return replace(self.node, gpus=(gpu,))

    def create_mig(self, gpu_uuid: str, profile_id: int, start: int) -> MigDevice:
        self.calls.append(f"create {profile_id}@{start}")
        if start in self.fail_create:
            raise MigError(f"GPU {gpu_uuid}: creating a compute instance failed: Insufficient")
        gi = max(self.instances, default=0) + 1
        profile = next(p for p in PLACEMENTS.values() if p.profile_id == profile_id)
        mig = MigDevice(
            uuid=f"MIG-{gi:08x}-0000-4000-8000-000000000000",
            parent_index=0,
            slot=gi,
            gi=gi,
            ci=0,
            profile=profile.profile,
            memory_mib=profile.memory_mib,
            gi_cap_minor=100 + gi * 10,
            ci_cap_minor=101 + gi * 10,
            profile_id=profile_id,
            placement_start=start,
        )
        self.instances[gi] = mig
        return mig

    def destroy_mig(self, gpu_uuid: str, gi: int, ci: int) -> None:
        self.calls.append(f"destroy {gi}/{ci}")
        if gi in self.in_use:
            raise MigError(f"GPU {gpu_uuid}: GPU instance {gi} is in use")
        self.instances.pop(gi, None)


@pytest.fixture
def gpu() -> FakeGpu:
    return FakeGpu(inventory([make_gpu(0, minor=0, migs=[])]))


def catalog_of(tmp_path: Path, gpu: FakeGpu, *, dev: FakeHost | None = None) -> Catalog:
    devices = {"gpu-0": CatalogDevice("gpu-0", GPU)}
    devices |= {name: CatalogDevice(name, GPU, placement=p) for name, p in PLACEMENTS.items()}
    options = no_driver(tmp_path / "root")
    return Catalog(
        driver=DRIVER,
        pool=NODE,
        devices=devices,
        inventory=gpu.node,
        options=options if dev is None else replace(options, host_dev_exists=dev.exists),
        check_device_nodes=dev is not None,
    )


def start(tmp_path: Path, api: Api, gpu: FakeGpu, catalog: Catalog) -> ClaimPreparer:
    return ClaimPreparer(
        driver=DRIVER,
        cdi_dir=tmp_path / "cdi",
        checkpoint_path=tmp_path / "plugin" / "checkpoint.json",
        read_claim=api.read,
        catalog=lambda: catalog,
        boot_id=BOOT,
        mig=lambda: gpu,
    )


def on_disk(tmp_path: Path) -> dict[str, PreparedClaim]:
    found, problem = load(tmp_path / "plugin" / "checkpoint.json")
    assert problem is None
    assert found is not None
    return dict(found.claims)


async def test_a_placement_is_created_handed_out_and_destroyed(
    tmp_path: Path, gpu: FakeGpu
) -> None:
    api = Api({("ns", "c1"): View(UID, allocated("gpu-0-mig-3g20gb-9-0"))})
    dra = start(tmp_path, api, gpu, catalog_of(tmp_path, gpu))
    answer = (await dra.prepare([claim()]))[UID]
    assert answer.error == ""
    assert [d.cdi_device_ids for d in answer.devices] == [
        (f"k8s.gpu.nvidia.com/claim={UID}-gpu-0-mig-3g20gb-9-0",)
    ]
    (mig,) = gpu.instances.values()
    assert (mig.profile_id, mig.placement_start) == (9, 0)
    spec = json.loads(spec_file(tmp_path).read_text())
    (entry,) = spec["devices"]
    assert [n["path"] for n in entry["containerEdits"]["deviceNodes"]] == [
        "/dev/nvidia0",
        f"/dev/nvidia-caps/nvidia-cap{mig.gi_cap_minor}",
        f"/dev/nvidia-caps/nvidia-cap{mig.ci_cap_minor}",
    ]
    assert on_disk(tmp_path)[UID].mig == (
        MigRecord("gpu-0-mig-3g20gb-9-0", GPU, 9, 0, gi=mig.gi, ci=0),
    )
    assert on_disk(tmp_path)[UID].phase is Phase.COMPLETED

    assert await dra.unprepare([claim()]) == {UID: ""}
    assert gpu.instances == {}
    assert not spec_file(tmp_path).exists()
    assert on_disk(tmp_path) == {}


async def test_overlapping_placements_and_the_whole_gpu_are_refused(
    tmp_path: Path, gpu: FakeGpu
) -> None:
    api = Api(
        {
            ("ns", "big"): View(UID, allocated("gpu-0-mig-3g20gb-9-0")),
            ("ns", "inside"): View(OTHER_UID, allocated("gpu-0-mig-1g5gb-19-2")),
            ("ns", "whole"): View(THIRD_UID, allocated("gpu-0")),
        }
    )
    dra = start(tmp_path, api, gpu, catalog_of(tmp_path, gpu))
    assert (await dra.prepare([claim(UID, "big")]))[UID].error == ""
    answer = (await dra.prepare([claim(OTHER_UID, "inside")]))[OTHER_UID]
    assert answer.error == (
        "ResourceClaim ns/inside: device gpu-0-mig-1g5gb-19-2 overlaps gpu-0-mig-3g20gb-9-0, "
        "already prepared for claim ns/big"
    )
    answer = (await dra.prepare([claim(THIRD_UID, "whole")]))[THIRD_UID]
    assert answer.error.startswith("ResourceClaim ns/whole: device gpu-0 overlaps ")
    assert gpu.calls == ["create 9@0"]  # nothing was created for the refused claims
    assert set(on_disk(tmp_path)) == {UID}


async def test_two_placements_in_one_claim_that_overlap_are_refused(
    tmp_path: Path, gpu: FakeGpu
) -> None:
    api = Api({("ns", "c1"): View(UID, allocated("gpu-0-mig-3g20gb-9-0", "gpu-0-mig-1g5gb-19-2"))})
    dra = start(tmp_path, api, gpu, catalog_of(tmp_path, gpu))
    answer = (await dra.prepare([claim()]))[UID]
    assert answer.error == (
        "ResourceClaim ns/c1: devices gpu-0-mig-3g20gb-9-0 and gpu-0-mig-1g5gb-19-2 overlap"
    )
    assert gpu.calls == []


async def test_a_failed_second_creation_destroys_the_first_and_leaves_nothing(
    tmp_path: Path, gpu: FakeGpu
) -> None:
    api = Api({("ns", "c1"): View(UID, allocated("gpu-0-mig-1g5gb-19-4", "gpu-0-mig-1g5gb-19-5"))})
    gpu.fail_create = {5}
    dra = start(tmp_path, api, gpu, catalog_of(tmp_path, gpu))
    answer = (await dra.prepare([claim()]))[UID]
    assert answer.error.startswith(f"GPU {GPU}: creating a compute instance failed")
    assert gpu.calls == ["create 19@4", "create 19@5", "destroy 1/0"]
    assert gpu.instances == {}
    assert not spec_file(tmp_path).exists()
    assert on_disk(tmp_path) == {}

    gpu.fail_create = set()  # the kubelet's retry, once the GPU allows it
    assert (await dra.prepare([claim()]))[UID].error == ""
    assert sorted(m.placement_start for m in gpu.instances.values()) == [4, 5]


async def test_a_new_instance_whose_nodes_are_missing_is_destroyed_and_the_claim_waits(
    tmp_path: Path, gpu: FakeGpu
) -> None:
    dev = FakeHost(files={"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia0"})
    api = Api({("ns", "c1"): View(UID, allocated("gpu-0-mig-1g5gb-19-2"))})
    dra = start(tmp_path, api, gpu, catalog_of(tmp_path, gpu, dev=dev))
    answer = (await dra.prepare([claim()]))[UID]
    assert answer.error == (
        "ResourceClaim ns/c1: device nodes /dev/nvidia-caps/nvidia-cap110, "
        "/dev/nvidia-caps/nvidia-cap111 do not exist yet on this node (the driver creates "
        "them: nvidia-smi or nvidia-ctk system create-device-nodes); waiting for them"
    )
    assert gpu.instances == {}
    assert on_disk(tmp_path) == {}


async def test_an_instance_in_use_keeps_its_claim_until_it_can_be_destroyed(
    tmp_path: Path, gpu: FakeGpu
) -> None:
    api = Api({("ns", "c1"): View(UID, allocated("gpu-0-mig-1g5gb-19-2"))})
    dra = start(tmp_path, api, gpu, catalog_of(tmp_path, gpu))
    assert (await dra.prepare([claim()]))[UID].error == ""
    (gi,) = gpu.instances
    gpu.in_use = {gi}
    (error,) = (await dra.unprepare([claim()])).values()
    assert error == (
        f"cannot destroy the MIG instance gpu-0-mig-1g5gb-19-2 (GI {gi}) on {GPU} "
        f"of claim ns/c1 ({UID}): GPU {GPU}: GPU instance {gi} is in use"
    )
    assert "\n" not in error
    assert on_disk(tmp_path)[UID].mig[0].gi == gi  # still held: it still exists
    gpu.in_use = set()
    assert await dra.unprepare([claim()]) == {UID: ""}
    assert gpu.instances == {}
    assert on_disk(tmp_path) == {}


def started_with(uid: str, *records: MigRecord) -> PreparedClaim:
    devices = tuple(PreparedDevice(("gpu",), NODE, r.device, ()) for r in records)
    return PreparedClaim(ClaimRef("ns", uid, "torn"), devices, Phase.STARTED, records)


async def test_a_start_destroys_what_a_crash_left_being_created(
    tmp_path: Path, gpu: FakeGpu
) -> None:
    # A crash after the first instance was recorded with its ids, and during
    # the second's creation (made on the GPU, its ids never recorded).
    first = gpu.create_mig(GPU, 19, 4)
    second = gpu.create_mig(GPU, 19, 5)
    save(
        tmp_path / "plugin" / "checkpoint.json",
        {
            UID: started_with(
                UID,
                MigRecord("gpu-0-mig-1g5gb-19-4", GPU, 19, 4, gi=first.gi, ci=first.ci),
                MigRecord("gpu-0-mig-1g5gb-19-5", GPU, 19, 5),
            )
        },
        boot_id=BOOT,
    )
    gpu.calls.clear()
    dra = start(tmp_path, Api(), gpu, catalog_of(tmp_path, gpu))
    assert gpu.calls == [f"destroy {second.gi}/0", f"destroy {first.gi}/0"]
    assert gpu.instances == {}
    assert dra.prepared == {}
    assert on_disk(tmp_path) == {}


async def test_an_instance_a_start_cannot_destroy_keeps_its_placement_until_the_retry(
    tmp_path: Path, gpu: FakeGpu
) -> None:
    left = gpu.create_mig(GPU, 19, 2)
    record = MigRecord("gpu-0-mig-1g5gb-19-2", GPU, 19, 2, gi=left.gi, ci=left.ci)
    save(tmp_path / "plugin" / "checkpoint.json", {UID: started_with(UID, record)}, boot_id=BOOT)
    gpu.in_use = {left.gi}
    api = Api(
        {
            ("ns", "torn"): View(UID, allocated("gpu-0-mig-1g5gb-19-2")),
            ("ns", "other"): View(OTHER_UID, allocated("gpu-0-mig-1g5gb-19-2")),
        }
    )
    dra = start(tmp_path, api, gpu, catalog_of(tmp_path, gpu))
    assert on_disk(tmp_path)[UID].phase is Phase.STARTED  # kept: the instance exists
    other = (await dra.prepare([claim(OTHER_UID, "other")]))[OTHER_UID]
    assert other.error.endswith("is already prepared for claim ns/torn")

    gpu.in_use = set()
    answer = (await dra.prepare([claim(UID, "torn")]))[UID]  # the kubelet's retry
    assert answer.error == ""
    assert [m.placement_start for m in gpu.instances.values()] == [2]
    assert on_disk(tmp_path)[UID].phase is Phase.COMPLETED


def test_the_instances_claims_made_are_owned_confirmed_or_found_by_placement(
    tmp_path: Path, gpu: FakeGpu
) -> None:
    confirmed = gpu.create_mig(GPU, 9, 0)
    unconfirmed = gpu.create_mig(GPU, 19, 5)  # made; the plugin died before recording its ids
    foreign = gpu.create_mig(GPU, 19, 4)  # made by someone else: never the plugin's
    path = tmp_path / "checkpoint.json"
    save(
        path,
        {
            UID: started_with(UID, MigRecord("gpu-0-mig-3g20gb-9-0", GPU, 9, 0, confirmed.gi, 0)),
            OTHER_UID: started_with(OTHER_UID, MigRecord("gpu-0-mig-1g5gb-19-5", GPU, 19, 5)),
        },
        boot_id=BOOT,
    )
    owned = owned_instances(path, gpu.inventory())
    assert owned == {(GPU, confirmed.gi), (GPU, unconfirmed.gi)}
    assert (GPU, foreign.gi) not in owned
    assert owned_instances(tmp_path / "none.json", gpu.inventory()) == frozenset()
    path.write_text("{torn")
    assert owned_instances(path, gpu.inventory()) == frozenset()
    assert path.exists()  # read only: setting a damaged file aside is the preparer's


async def test_an_instance_whose_ids_cannot_be_recorded_is_destroyed(
    tmp_path: Path, gpu: FakeGpu, monkeypatch: pytest.MonkeyPatch
) -> None:
    api = Api({("ns", "c1"): View(UID, allocated("gpu-0-mig-1g5gb-19-2"))})
    dra = start(tmp_path, api, gpu, catalog_of(tmp_path, gpu))
    real_save = checkpoint.save

    def full_after_creation(path: Path, claims: Any, **kwargs: Any) -> None:
        if gpu.instances and any(r.gi is not None for c in claims.values() for r in c.mig):
            raise CheckpointError(f"cannot write the checkpoint {path}: No space left on device")
        real_save(path, claims, **kwargs)

    monkeypatch.setattr(checkpoint, "save", full_after_creation)
    answer = (await dra.prepare([claim()]))[UID]
    assert answer.error.endswith("No space left on device")
    assert gpu.calls == ["create 19@2", "destroy 1/0"]
    assert gpu.instances == {}
    assert not spec_file(tmp_path).exists()
    assert dra.prepared == {}
