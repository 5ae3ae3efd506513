"""The DRA checkpoint across crashes and reboots: two phases, a boot ID, damage set aside.

Each test leaves on disk what a crash, a reboot or a broken disk leaves,
then starts a preparer on it (the real recovery, real files) and checks
what is held, what was removed and what the kubelet's next call gets.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kubelet.dra import checkpoint
from kubelet.dra.checkpoint import (
    Checkpoint,
    CheckpointError,
    Phase,
    PreparedClaim,
    load,
    save,
)
from kubelet.dra.prepare import ClaimPreparer
from kubelet.dra.recovery import recover
from kubelet.dra.types import ClaimRef, PreparedDevice
from resources.claim_catalog import Catalog
from tests.unit.kubelet.test_dra_prepare import (
    OTHER_UID,
    UID,
    Api,
    View,
    allocated,
    claim,
    make_catalog,
    spec_file,
)

BOOT = "6a9f6c1e-0d3b-4f5e-9a7b-3c2d1e0f9a8b"
EARLIER_BOOT = "0b1c2d3e-4f50-4617-8293-a4b5c6d7e8f9"


def prepared(uid: str, phase: Phase = Phase.COMPLETED, device: str = "gpu-0") -> PreparedClaim:
    cdi = f"k8s.gpu.nvidia.com/claim={uid}-{device}"
    return PreparedClaim(
        ClaimRef(namespace="ns", uid=uid, name=f"c-{uid[:4]}"),
        (PreparedDevice(("gpu",), "node-a", device, (cdi,)),),
        phase,
    )


@pytest.fixture
def node(tmp_path: Path) -> Catalog:
    return make_catalog(tmp_path)


def checkpoint_path(tmp_path: Path) -> Path:
    return tmp_path / "plugin" / "checkpoint.json"


def on_disk(tmp_path: Path, boot: str, *claims: PreparedClaim) -> None:
    save(checkpoint_path(tmp_path), {c.claim.uid: c for c in claims}, boot_id=boot)
    for c in claims:
        spec_file(tmp_path, c.claim.uid).parent.mkdir(parents=True, exist_ok=True)
        spec_file(tmp_path, c.claim.uid).write_text("{}")


def start(tmp_path: Path, api: Api, catalog: Catalog) -> ClaimPreparer:
    return ClaimPreparer(
        driver="gpu.nvidia.com",
        cdi_dir=tmp_path / "cdi",
        checkpoint_path=checkpoint_path(tmp_path),
        read_claim=api.read,
        catalog=lambda: catalog,
        boot_id=BOOT,
    )


def held(tmp_path: Path) -> dict[str, str]:
    found, problem = load(checkpoint_path(tmp_path))
    assert problem is None
    assert found is not None
    return {uid: str(c.phase) for uid, c in found.claims.items()}


async def test_prepare_writes_started_then_completed_with_the_boot(
    tmp_path: Path, node: Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[dict[str, str]] = []
    api = Api({("ns", "c1"): View(UID, allocated("gpu-0"))})
    dra = start(tmp_path, api, node)
    real_save = checkpoint.save

    def recording_save(path: Path, claims: object, **kwargs: object) -> None:
        real_save(path, claims, **kwargs)  # type: ignore[arg-type]
        seen.append(held(tmp_path))
        assert spec_file(tmp_path).exists() == (seen[-1].get(UID) == "PrepareCompleted")

    monkeypatch.setattr(checkpoint, "save", recording_save)
    assert (await dra.prepare([claim()]))[UID].error == ""
    assert seen == [{UID: "PrepareStarted"}, {UID: "PrepareCompleted"}]
    document = json.loads(checkpoint_path(tmp_path).read_text())
    assert (document["version"], document["bootId"]) == (2, BOOT)


async def test_a_started_claim_is_rolled_back_and_prepared_afresh(
    tmp_path: Path, node: Catalog
) -> None:
    on_disk(tmp_path, BOOT, prepared(UID, Phase.STARTED), prepared(OTHER_UID, device="gpu-1"))
    api = Api({("ns", "c1"): View(UID, allocated("gpu-0"))})
    dra = start(tmp_path, api, node)
    assert held(tmp_path) == {OTHER_UID: "PrepareCompleted"}
    assert not spec_file(tmp_path, UID).exists()
    assert spec_file(tmp_path, OTHER_UID).exists()
    assert dra.problem is None
    answer = (await dra.prepare([claim()]))[UID]  # the kubelet's retry
    assert answer.error == ""
    assert api.reads == 1  # prepared afresh, not answered from the rolled-back entry
    assert held(tmp_path) == {UID: "PrepareCompleted", OTHER_UID: "PrepareCompleted"}


def test_a_checkpoint_of_another_boot_is_discarded_with_its_specs(
    tmp_path: Path, node: Catalog
) -> None:
    on_disk(tmp_path, EARLIER_BOOT, prepared(UID), prepared(OTHER_UID, device="gpu-1"))
    dra = start(tmp_path, Api(), node)
    assert dra.prepared == {}
    assert held(tmp_path) == {}
    assert json.loads(checkpoint_path(tmp_path).read_text())["bootId"] == BOOT
    assert not spec_file(tmp_path, UID).exists()
    assert not spec_file(tmp_path, OTHER_UID).exists()
    assert dra.problem is None


def test_a_version_1_checkpoint_is_kept_as_completed_claims_of_this_boot(
    tmp_path: Path, node: Catalog
) -> None:
    path = checkpoint_path(tmp_path)
    path.parent.mkdir(parents=True)
    entry = prepared(UID).to_json()
    del entry["phase"]
    path.write_text(json.dumps({"version": 1, "claims": {UID: entry}}))
    dra = start(tmp_path, Api(), node)
    assert list(dra.prepared) == [UID]
    assert dra.prepared[UID].phase is Phase.COMPLETED
    assert held(tmp_path) == {UID: "PrepareCompleted"}  # rewritten as version 2, with the boot


def test_temp_files_of_a_killed_write_are_removed(tmp_path: Path, node: Catalog) -> None:
    on_disk(tmp_path, BOOT, prepared(UID))
    left = checkpoint_path(tmp_path).with_name(".checkpoint.json.x1y2.tmp")
    left.write_text('{"version": 2, "half')
    dra = start(tmp_path, Api(), node)
    assert list(dra.prepared) == [UID]
    assert not left.exists()


DAMAGED = {
    "truncated": b'{"version": 2, "bootId": "x", "claims": {"a": {"namespace": "ns", "na',
    "not-json": b"\x00\xff garbage \x13",
    "empty": b"",
    "unknown-version": b'{"version": 9, "claims": {}}',
    "unknown-phase": json.dumps(
        {"version": 2, "claims": {UID: {**prepared(UID).to_json(), "phase": "Half"}}}
    ).encode(),
    "claims-not-a-map": b'{"version": 2, "claims": []}',
    "boot-not-a-string": b'{"version": 2, "bootId": 7, "claims": {}}',
}


@pytest.mark.parametrize("content", DAMAGED.values(), ids=DAMAGED.keys())
async def test_a_damaged_checkpoint_is_set_aside_and_the_preparer_serves(
    tmp_path: Path, node: Catalog, content: bytes
) -> None:
    path = checkpoint_path(tmp_path)
    path.parent.mkdir(parents=True)
    path.write_bytes(content)
    api = Api({("ns", "c1"): View(UID, allocated("gpu-0"))})
    dra = start(tmp_path, api, node)
    assert dra.problem is not None
    assert "\n" not in dra.problem
    assert "set aside as checkpoint.json.corrupt" in dra.problem
    assert path.with_name("checkpoint.json.corrupt").read_bytes() == content
    assert (await dra.prepare([claim()]))[UID].error == ""
    assert held(tmp_path) == {UID: "PrepareCompleted"}


def test_a_directory_at_the_checkpoint_is_set_aside(tmp_path: Path, node: Catalog) -> None:
    checkpoint_path(tmp_path).mkdir(parents=True)
    dra = start(tmp_path, Api(), node)
    assert dra.problem is not None
    assert "is not a regular file" in dra.problem
    assert checkpoint_path(tmp_path).with_name("checkpoint.json.corrupt").is_dir()


def test_recovery_that_cannot_write_back_says_so_and_is_done_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    on_disk(tmp_path, BOOT, prepared(UID, Phase.STARTED))
    path = checkpoint_path(tmp_path)

    def full_disk(*_: object, **__: object) -> None:
        raise CheckpointError(f"cannot write the checkpoint {path}: No space left on device")

    monkeypatch.setattr(checkpoint, "save", full_disk)
    removed: list[str] = []
    result = recover(path, boot_id=BOOT, remove_spec=removed.append)
    assert removed == [UID]
    assert result.prepared == {}
    assert result.problem == f"cannot write the checkpoint {path}: No space left on device"
    found, _ = load(path)
    assert found == Checkpoint(BOOT, {UID: prepared(UID, Phase.STARTED)})  # rolled back next time


async def test_a_failed_spec_write_takes_the_started_entry_back(
    tmp_path: Path, node: Catalog
) -> None:
    (tmp_path / "cdi").write_text("a file where the directory should be\n")
    api = Api({("ns", "c1"): View(UID, allocated("gpu-0"))})
    dra = start(tmp_path, api, node)
    assert (await dra.prepare([claim()]))[UID].error.startswith("cannot write the claim's CDI")
    assert dra.prepared == {}
    assert held(tmp_path) == {}
