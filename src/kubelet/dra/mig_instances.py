"""The MIG instances DRA's dynamic MIG creates for claims, and how one is undone.

A claim that gets a MIG placement has its GPU instance and compute instance
created by the device library when it is prepared, and destroyed when it is
unprepared. Each creation is recorded in the checkpoint (`MigRecord`) before
it is made: a record whose instance ids are not known yet (the plugin died
during the creation) is found again by its placement on its GPU, so what a
crash left is always found and destroyed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from devices.model import Inventory, MigDevice
from kubelet.dra import checkpoint
from kubelet.dra.checkpoint import MigRecord


class MigControl(Protocol):
    """What the claim preparer needs of the device library (`devices.library.DeviceLibrary`)."""

    def inventory(self) -> Inventory: ...

    def create_mig(self, gpu_uuid: str, profile_id: int, start: int) -> MigDevice: ...

    def destroy_mig(self, gpu_uuid: str, gi: int, ci: int) -> None: ...


def instance_of(inventory: Inventory, record: MigRecord) -> tuple[int, int] | None:
    """(GI, CI) of the instance at the record's placement on its GPU, if there is one."""
    for gpu in inventory.gpus:
        if gpu.uuid != record.gpu_uuid:
            continue
        for mig in gpu.mig_devices:
            if (mig.profile_id, mig.placement_start) == (record.profile_id, record.start):
                return mig.gi, mig.ci
    return None


def owned_instances(path: Path, inventory: Inventory) -> frozenset[tuple[str, int]]:
    """(GPU UUID, GI id) of every MIG instance the checkpoint at `path` says a claim made.

    Dynamic MIG keeps publishing a GPU whose only instances are its claims'.
    An instance whose creation was recorded but not confirmed is found by its
    placement.
    """
    found = checkpoint.peek(path)
    owned: set[tuple[str, int]] = set()
    for claim in () if found is None else found.claims.values():
        for record in claim.mig:
            gi = record.gi
            if gi is None:
                found_ids = instance_of(inventory, record)
                gi = None if found_ids is None else found_ids[0]
            if gi is not None:
                owned.add((record.gpu_uuid, gi))
    return frozenset(owned)


def destroy(control: MigControl, record: MigRecord) -> None:
    """Destroy the instance a record names; one already gone is not an error.

    Blocking (NVML).

    Raises:
        MigError: the library refused (the instance is in use, for example).
        DiscoveryError: the GPU could not be read to find an unconfirmed instance.
    """
    ids = None if record.gi is None or record.ci is None else (record.gi, record.ci)
    if ids is None:
        ids = instance_of(control.inventory(), record)
        if ids is None:
            return
    control.destroy_mig(record.gpu_uuid, *ids)


def describe(record: MigRecord) -> str:
    """`MIG instance gpu-0-mig-1g5gb-19-0 (GI 3) on GPU-...`, for errors and logs."""
    gi = "" if record.gi is None else f" (GI {record.gi})"
    return f"MIG instance {record.device}{gi} on {record.gpu_uuid}"
