"""Preparing DRA claims: CDI IDs out, idempotent, checkpointed, one error per bad claim.

The claim reader is a function over scripted ResourceClaims (the API server's
part is tested with the claim reader itself); the CDI directory and the
checkpoint are real files in a temp directory, broken the ways a node breaks
them.
"""

from __future__ import annotations

import asyncio
import json
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest

from devices.model import Inventory
from kube.errors import KubeError
from kubelet.dra.checkpoint import load
from kubelet.dra.prepare import ClaimPreparer
from kubelet.dra.types import ClaimRef
from resources.claim_catalog import Catalog, CatalogDevice
from resources.claim_plan import DRIVER_NODES
from resources.claim_spec import device_node_paths
from resources.options import MigStrategy
from tests.unit.resources.nodes import FakeHost, gpu_uuid, inventory, make_gpu, mig_uuid
from tests.unit.resources.test_cdi import no_driver

DRIVER = "gpu.nvidia.com"
NODE = "node-a"
UID = "11111111-0000-4000-8000-000000000001"
OTHER_UID = "22222222-0000-4000-8000-000000000002"
GPU_CONFIG = {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig"}


@dataclass(frozen=True)
class Result:
    request: str
    driver: str
    pool: str
    device: str


@dataclass(frozen=True)
class Opaque:
    requests: tuple[str, ...]
    driver: str
    parameters: Any


@dataclass(frozen=True)
class View:
    uid: str
    results: tuple[Result, ...]
    config: tuple[Opaque, ...] = ()
    namespace: str = ""  # as the API names it: filled in by `Api.read`
    name: str = ""


@dataclass
class Api:
    claims: dict[tuple[str, str], View] = field(default_factory=dict)
    reads: int = 0

    def read(self, namespace: str, name: str) -> View:
        self.reads += 1
        try:
            return replace(self.claims[(namespace, name)], namespace=namespace, name=name)
        except KeyError:
            raise KubeError(f"resourceclaims {namespace}/{name}: 404 NotFound") from None


def claim(uid: str = UID, name: str = "c1") -> ClaimRef:
    return ClaimRef(namespace="ns", uid=uid, name=name)


def allocated(*devices: str, driver: str = DRIVER, pool: str = NODE) -> tuple[Result, ...]:
    return tuple(Result("gpu", driver, pool, device) for device in devices)


@pytest.fixture
def node(tmp_path: Path) -> Catalog:
    return make_catalog(tmp_path)


def make_catalog(tmp_path: Path) -> Catalog:
    inv = inventory([make_gpu(0, minor=0), make_gpu(1, minor=1, migs=[(0, "1g.5gb", 4864)])])
    devices = {
        "gpu-0": CatalogDevice("gpu-0", gpu_uuid(0)),
        "gpu-1-mig-0": CatalogDevice("gpu-1-mig-0", mig_uuid(1, 0)),
        "gpu-9": CatalogDevice("gpu-9", "GPU-sick", unhealthy="xid 79"),
    }
    options = no_driver(tmp_path / "root", mig_strategy=MigStrategy.MIXED)
    dev = FakeHost(files=set(device_nodes_of(inv)))
    options = replace(options, host_dev_exists=dev.exists)
    return Catalog(driver=DRIVER, pool=NODE, devices=devices, inventory=inv, options=options)


def device_nodes_of(inv: Inventory) -> list[str]:
    """Every `/dev` node the node's devices and the driver need."""
    paths = [*DRIVER_NODES]
    for gpu in inv.gpus:
        paths += device_node_paths(inv, gpu.uuid)
        for mig in gpu.mig_devices:
            paths += device_node_paths(inv, mig.uuid)
    return list(dict.fromkeys(paths))


def preparer(tmp_path: Path, api: Api, catalog: Catalog | None) -> ClaimPreparer:
    return ClaimPreparer(
        driver=DRIVER,
        cdi_dir=tmp_path / "cdi",
        checkpoint_path=tmp_path / "plugin" / "checkpoint.json",
        read_claim=api.read,
        catalog=lambda: catalog,
    )


def spec_file(tmp_path: Path, uid: str = UID) -> Path:
    return tmp_path / "cdi" / f"k8s.gpu.nvidia.com-claim_{uid}.json"


async def test_prepare_answers_cdi_ids_and_again_from_memory(tmp_path: Path, node: Catalog) -> None:
    api = Api({("ns", "c1"): View(UID, allocated("gpu-0", "gpu-1-mig-0"))})
    dra = preparer(tmp_path, api, node)
    (answer,) = (await dra.prepare([claim()])).values()
    assert answer.error == ""
    assert [
        (d.device_name, d.pool_name, d.request_names, d.cdi_device_ids) for d in answer.devices
    ] == [
        ("gpu-0", NODE, ("gpu",), (f"k8s.gpu.nvidia.com/claim={UID}-gpu-0",)),
        ("gpu-1-mig-0", NODE, ("gpu",), (f"k8s.gpu.nvidia.com/claim={UID}-gpu-1-mig-0",)),
    ]
    spec = json.loads(spec_file(tmp_path).read_text())
    assert [d["name"] for d in spec["devices"]] == [f"{UID}-gpu-0", f"{UID}-gpu-1-mig-0"]
    assert await dra.prepare([claim()]) == {UID: answer}  # the kubelet's retry
    assert api.reads == 1


async def test_a_restarted_plugin_answers_the_same_and_unprepares_what_it_prepared(
    tmp_path: Path, node: Catalog
) -> None:
    api = Api({("ns", "c1"): View(UID, allocated("gpu-0"))})
    before = (await preparer(tmp_path, api, node).prepare([claim()]))[UID]
    restarted = preparer(tmp_path, api, node)
    assert (await restarted.prepare([claim()]))[UID] == before
    assert api.reads == 1  # answered from the checkpoint
    assert await restarted.unprepare([claim()]) == {UID: ""}
    assert not spec_file(tmp_path).exists()
    found, problem = load(tmp_path / "plugin" / "checkpoint.json")
    assert found is not None
    assert (found.claims, problem) == ({}, None)
    assert await restarted.unprepare([claim()]) == {UID: ""}  # again: nothing left, no error


async def test_unprepare_removes_the_spec_of_a_claim_it_does_not_know(
    tmp_path: Path, node: Catalog
) -> None:
    orphan = spec_file(tmp_path, OTHER_UID)
    orphan.parent.mkdir(parents=True)
    orphan.write_text("{}")  # written just before a crash, never checkpointed
    assert await preparer(tmp_path, Api(), node).unprepare([claim(OTHER_UID)]) == {OTHER_UID: ""}
    assert not orphan.exists()


@pytest.mark.parametrize(
    ("view", "message"),
    [
        pytest.param(View(UID, allocated("gpu-7")),
                     "ResourceClaim ns/c1: device gpu-7 is not published by this node",
                     id="unknown-device"),
        pytest.param(View(UID, allocated("gpu-0", pool="node-b")),
                     "ResourceClaim ns/c1: device node-b/gpu-0 is in another pool than this "
                     "node's (node-a)", id="another-node"),
        pytest.param(View(UID, allocated("gpu-9")),
                     "ResourceClaim ns/c1: device gpu-9 is unhealthy (xid 79)", id="unhealthy"),
        pytest.param(View(UID, allocated("gpu-0", driver="other.example.com")),
                     "ResourceClaim ns/c1 has no device of driver gpu.nvidia.com allocated",
                     id="another-driver"),
        pytest.param(View(OTHER_UID, allocated("gpu-0")),
                     f"ResourceClaim ns/c1 has uid {OTHER_UID}, not {UID}: it was re-created",
                     id="re-created"),
        pytest.param(View(UID, allocated("gpu-0"), (Opaque((), DRIVER, {"kind": "GpuConfig"}),)),
                     "ResourceClaim ns/c1: opaque config for gpu.nvidia.com: apiVersion: required",
                     id="bad-opaque-config"),
        pytest.param(View(UID, allocated("gpu-0"), (Opaque((), DRIVER, {
                         **GPU_CONFIG, "sharing": {"strategy": "MPS"}}),)),
                     "ResourceClaim ns/c1: MPS sharing is not available through DRA claims yet; "
                     "share with MPS through the device-plugin API (sharing.mps in the config "
                     "file)", id="mps"),
        pytest.param(View(UID, allocated("gpu-0"), (Opaque(("gpu",), DRIVER, {
                         **GPU_CONFIG, "sharing": {"strategy": "TimeSlicing",
                                                   "timeSlicingConfig": {"interval": "Short"}}}),)),
                     "ResourceClaim ns/c1: time-slice interval Short would change a GPU setting, "
                     "which this plugin never does; use Default", id="interval"),
    ],
)  # fmt: skip
async def test_a_bad_claim_is_its_own_error_and_the_others_are_prepared(
    tmp_path: Path, node: Catalog, view: View, message: str
) -> None:
    api = Api({("ns", "c1"): view, ("ns", "c2"): View(OTHER_UID, allocated("gpu-0"))})
    answers = await preparer(tmp_path, api, node).prepare([claim(), claim(OTHER_UID, "c2")])
    assert answers[UID].error == message
    assert answers[UID].devices == ()
    assert not spec_file(tmp_path).exists()
    assert answers[OTHER_UID].error == ""
    assert spec_file(tmp_path, OTHER_UID).exists()


async def test_an_opaque_config_for_another_driver_or_request_is_not_ours(
    tmp_path: Path, node: Catalog
) -> None:
    configs = (
        Opaque((), "other.example.com", {"anything": True}),
        Opaque(("other-request",), DRIVER, {"kind": "nonsense"}),
        Opaque(("gpu",), DRIVER, {**GPU_CONFIG, "sharing": {"strategy": "TimeSlicing"}}),
    )
    api = Api({("ns", "c1"): View(UID, allocated("gpu-0"), configs)})
    assert (await preparer(tmp_path, api, node).prepare([claim()]))[UID].error == ""


async def test_a_missing_claim_or_unknown_devices_are_errors_not_crashes(
    tmp_path: Path, node: Catalog
) -> None:
    answers = await preparer(tmp_path, Api(), node).prepare([claim()])
    assert answers[UID].error == "resourceclaims ns/c1: 404 NotFound"
    api = Api({("ns", "c1"): View(UID, allocated("gpu-0"))})
    early = await preparer(tmp_path, api, None).prepare([claim()])
    assert early[UID].error == "the node's devices are not known yet: retry"


async def test_a_cdi_directory_that_cannot_be_written_prepares_nothing(
    tmp_path: Path, node: Catalog
) -> None:
    (tmp_path / "cdi").write_text("a file where the directory should be\n")
    api = Api({("ns", "c1"): View(UID, allocated("gpu-0"))})
    dra = preparer(tmp_path, api, node)
    answer = (await dra.prepare([claim()]))[UID]
    assert answer.error.startswith("cannot write the claim's CDI spec to ")
    assert dra.prepared == {}
    (tmp_path / "cdi").unlink()
    assert (await dra.prepare([claim()]))[UID].error == ""  # the kubelet's retry lands


async def test_a_checkpoint_that_cannot_be_written_leaves_no_spec_behind(
    tmp_path: Path, node: Catalog
) -> None:
    (tmp_path / "plugin").write_text("in the way\n")
    api = Api({("ns", "c1"): View(UID, allocated("gpu-0"))})
    answer = (await preparer(tmp_path, api, node).prepare([claim()]))[UID]
    assert answer.error.startswith("cannot write the checkpoint ")
    assert not spec_file(tmp_path).exists()


def test_a_damaged_checkpoint_is_set_aside_and_reported(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint.json"
    path.write_text('{"version": 1, "claims": {"x": {"devices": "no"}}}')
    found, problem = load(path)
    assert found is None
    assert problem is not None
    assert "is not a checkpoint" in problem
    assert (tmp_path / "checkpoint.json.corrupt").exists()
    assert not path.exists()


def test_a_fifo_at_the_checkpoint_never_blocks(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint.json"
    os.mkfifo(path)
    found, problem = load(path)
    assert found is None
    assert problem is not None
    assert "is not a regular file" in problem


async def test_a_device_prepared_for_another_claim_is_that_claims_error(
    tmp_path: Path, node: Catalog
) -> None:
    api = Api(
        {
            ("default", "claim-a"): View(UID, allocated("gpu-0")),
            ("default", "claim-b"): View(OTHER_UID, allocated("gpu-0")),
        }
    )
    dra = preparer(tmp_path, api, node)
    first = ClaimRef(namespace="default", uid=UID, name="claim-a")
    second = ClaimRef(namespace="default", uid=OTHER_UID, name="claim-b")
    (answer,) = (await dra.prepare([first])).values()
    assert answer.error == ""
    spec_before = spec_file(tmp_path).read_bytes()

    refused = (await dra.prepare([second]))[OTHER_UID]
    assert refused.error == (
        "ResourceClaim default/claim-b: device gpu-0 is already prepared for claim default/claim-a"
    )
    assert not spec_file(tmp_path, OTHER_UID).exists()
    assert spec_file(tmp_path).read_bytes() == spec_before  # the other claim is untouched
    assert set(dra.prepared) == {UID}
    assert (await dra.prepare([first]))[UID] == answer

    assert await dra.unprepare([first]) == {UID: ""}
    assert (await dra.prepare([second]))[OTHER_UID].error == ""  # free again


async def test_two_claims_racing_for_one_device_never_both_get_it(
    tmp_path: Path, node: Catalog
) -> None:
    api = Api(
        {
            ("default", "claim-a"): View(UID, allocated("gpu-0")),
            ("default", "claim-b"): View(OTHER_UID, allocated("gpu-0")),
        }
    )
    dra = preparer(tmp_path, api, node)
    answers = await dra.prepare(
        [
            ClaimRef(namespace="default", uid=UID, name="claim-a"),
            ClaimRef(namespace="default", uid=OTHER_UID, name="claim-b"),
        ]
    )
    errors = sorted(bool(answer.error) for answer in answers.values())
    assert errors == [False, True]
    assert len(dra.prepared) == 1
    assert len(list((tmp_path / "cdi").glob("*.json"))) == 1


async def test_one_claim_prepared_twice_at_once_is_prepared_once_and_answered_the_same(
    tmp_path: Path, node: Catalog
) -> None:
    api = Api({("ns", "c1"): View(UID, allocated("gpu-0"))})
    dra = preparer(tmp_path, api, node)
    first, second = await asyncio.gather(dra.prepare([claim()]), dra.prepare([claim()]))
    assert first == second
    assert first[UID].error == ""
    assert api.reads == 1  # one read, one spec, one checkpoint entry
    assert list(dra.prepared) == [UID]


async def test_a_claim_waits_for_its_device_nodes_and_is_prepared_once_they_exist(
    tmp_path: Path, node: Catalog
) -> None:
    # A fresh node: the driver is loaded but nothing has created /dev/nvidia* yet.
    dev = FakeHost(files=set())
    fresh = replace(node, options=replace(node.options, host_dev_exists=dev.exists))
    api = Api({("ns", "c1"): View(UID, allocated("gpu-0", "gpu-1-mig-0"))})
    dra = preparer(tmp_path, api, fresh)
    answer = (await dra.prepare([claim()]))[UID]
    assert answer.error == (
        "ResourceClaim ns/c1: device nodes /dev/nvidiactl, /dev/nvidia-uvm, /dev/nvidia0, "
        "/dev/nvidia1, /dev/nvidia-caps/nvidia-cap200, /dev/nvidia-caps/nvidia-cap201 "
        "do not exist yet on this node (the driver creates them: nvidia-smi or nvidia-ctk "
        "system create-device-nodes); waiting for them"
    )
    assert not spec_file(tmp_path).exists()
    assert dra.prepared == {}

    dev.files = set(device_nodes_of(node.inventory)) - {"/dev/nvidia-uvm"}
    answer = (await dra.prepare([claim()]))[UID]  # the kubelet's retry
    assert answer.error.startswith("ResourceClaim ns/c1: device nodes /dev/nvidia-uvm do not")

    dev.files.add("/dev/nvidia-uvm")
    answer = (await dra.prepare([claim()]))[UID]
    assert answer.error == ""
    spec = json.loads(spec_file(tmp_path).read_text())
    common = [n["path"] for n in spec["containerEdits"]["deviceNodes"]]
    assert {"/dev/nvidiactl", "/dev/nvidia-uvm"} <= set(common)


async def test_a_node_that_does_not_check_device_nodes_prepares_without_them(
    tmp_path: Path, node: Catalog
) -> None:
    # A simulated node without a /dev of its own: the host's /dev has no GPU nodes to find.
    dev = FakeHost(files=set())
    simulated = replace(
        node,
        options=replace(node.options, host_dev_exists=dev.exists),
        check_device_nodes=False,
    )
    api = Api({("ns", "c1"): View(UID, allocated("gpu-0"))})
    assert (await preparer(tmp_path, api, simulated).prepare([claim()]))[UID].error == ""
