"""Claim planning: a DRA claim's allocation and the node's devices in, what to prepare out.

The pure half of NodePrepareResources, beside the device plugin's
allocator: given what the scheduler allocated to a claim, the devices this
node publishes (the `Catalog`) and the devices other claims already hold,
`plan_claim` decides which devices the claim gets, the CDI spec that hands
them to its containers and the CDI IDs to answer with, or says in one line
why the claim cannot be prepared. Reading the claim, writing the spec and
keeping the checkpoint are the kubelet plugin's (`kubelet.dra.prepare`); no
I/O happens here, so every refusal is tested as a table.

What is refused, each as that claim's error and touching no other claim:

- an allocation of another pool (node), or of a device this node does not
  publish, or of a device that is unhealthy now;
- a device another claim holds (`device gpu-0 is already prepared for
  claim default/claim-a`): the scheduler gives a device to one claim, and
  two pods of two claims must never share a GPU by accident;
- a device whose `/dev` nodes, or the driver's `/dev/nvidiactl` and
  `/dev/nvidia-uvm`, do not exist yet: on a fresh node nothing may have
  created them (no `nvidia-smi` run, no `nvidia-ctk system
  create-device-nodes`), and a spec without them would start the pod with
  no GPU (NVIDIA's DRA driver answers such a spec, their #1380). The error
  names the missing nodes; the kubelet retries until they exist;
- an opaque `GpuConfig` that is not valid, MPS sharing (not served through
  claims yet) and a time-slice interval other than `Default`, which would
  change a GPU setting.

The `/dev` probe is the node's (`ResourceOptions.host_dev_exists` under the
container's view of `/dev`), injected like every probe of the CDI spec.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from devices.model import Inventory, MigDevice, MigPlacement
from resources.cdi_files import Spec
from resources.claim_catalog import Catalog, CatalogDevice
from resources.claim_spec import ClaimDevice, claim_device_id, claim_spec, device_node_paths
from resources.options import ResourceOptions, join_root
from settings.claim_config import (
    ClaimConfigError,
    ClaimSharing,
    SharingMode,
    TimeSlice,
    parse_gpu_config,
)

# What CUDA opens besides the GPU's own node; the toolkit's specs carry them when present.
DRIVER_NODES = ("/dev/nvidiactl", "/dev/nvidia-uvm")


class ClaimError(Exception):
    """Why one claim cannot be prepared; one line, given to the kubelet as that claim's error."""


class AllocatedResult(Protocol):
    """One device the scheduler allocated to a claim's request."""

    @property
    def request(self) -> str: ...
    @property
    def driver(self) -> str: ...
    @property
    def pool(self) -> str: ...
    @property
    def device(self) -> str: ...


class OpaqueParameters(Protocol):
    """One opaque device config of a claim (for a driver, and some or all of its requests)."""

    @property
    def requests(self) -> tuple[str, ...]: ...
    @property
    def driver(self) -> str: ...
    @property
    def parameters(self) -> Mapping[str, Any]: ...


class Claim(Protocol):
    """A ResourceClaim as read from the API: who it is, and what it was allocated."""

    @property
    def namespace(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def uid(self) -> str: ...
    @property
    def results(self) -> Sequence[AllocatedResult]: ...
    @property
    def config(self) -> Sequence[OpaqueParameters]: ...


@dataclass(frozen=True)
class PlannedDevice:
    """One device a claim gets: the requests it answers and the CDI ID that injects it."""

    name: str
    requests: tuple[str, ...]
    cdi_id: str


@dataclass(frozen=True)
class Creation:
    """A dynamic MIG placement a claim gets: its instance is created before the spec is written."""

    device: str
    gpu_uuid: str
    placement: MigPlacement


@dataclass(frozen=True)
class ClaimPlan:
    """What preparing a claim creates (MIG instances), writes (its CDI spec) and answers."""

    where: str  # "ResourceClaim <namespace>/<name>", how its errors start
    claim_uid: str
    devices: tuple[PlannedDevice, ...]
    chosen: tuple[CatalogDevice, ...]
    sharing: ClaimSharing
    creations: tuple[Creation, ...] = ()

    def spec(self, catalog: Catalog, created: Mapping[str, MigDevice] | None = None) -> Spec:
        """The claim's CDI spec; `created`: each creation's new MIG device, by device name.

        Raises:
            ClaimError: a device's `/dev` nodes do not exist yet.
            ResourceError: a device is not on this node, or lacks a capability node.
        """
        made = dict(created or {})
        inventory = _with_created(catalog.inventory, self.creations, made)
        uuids = [made[d.name].uuid if d.name in made else d.uuid for d in self.chosen]
        if self.creations:  # the other devices' nodes were checked by `plan_claim`
            _refuse_missing_nodes(self.where, uuids, replace(catalog, inventory=inventory))
        return claim_spec(
            driver=catalog.driver,
            claim_uid=self.claim_uid,
            devices=[ClaimDevice(d.name, u) for d, u in zip(self.chosen, uuids, strict=True)],
            inventory=inventory,
            options=catalog.options,
        )


def _with_created(
    inventory: Inventory, creations: Sequence[Creation], created: Mapping[str, MigDevice]
) -> Inventory:
    """`inventory` with the claim's new MIG devices on their GPUs."""
    if not created:
        return inventory
    by_gpu: dict[str, list[MigDevice]] = {}
    for creation in creations:
        if creation.device in created:
            by_gpu.setdefault(creation.gpu_uuid, []).append(created[creation.device])
    gpus = tuple(
        replace(gpu, mig_devices=(*gpu.mig_devices, *by_gpu[gpu.uuid]))
        if gpu.uuid in by_gpu
        else gpu
        for gpu in inventory.gpus
    )
    return replace(inventory, gpus=gpus)


def plan_claim(claim: Claim, catalog: Catalog, held: Mapping[str, str]) -> ClaimPlan:
    """The claim's devices, what must be created for them, and how to build its spec.

    Args:
        claim: the claim as read from the API (its uid already checked).
        catalog: what the node publishes now.
        held: device name -> the claim (`namespace/name`) that holds it,
            for every other prepared claim.

    Raises:
        ClaimError: the claim cannot be prepared on this node now (one line).
    """
    where = f"ResourceClaim {claim.namespace}/{claim.name}"
    ours = [result for result in claim.results if result.driver == catalog.driver]
    if not ours:
        raise ClaimError(f"{where} has no device of driver {catalog.driver} allocated")
    requests: dict[str, list[str]] = {}
    for result in ours:
        if result.pool != catalog.pool:
            raise ClaimError(
                f"{where}: device {result.pool}/{result.device} is in another pool "
                f"than this node's ({catalog.pool})"
            )
        device = catalog.devices.get(result.device)
        if device is None:
            raise ClaimError(f"{where}: device {result.device} is not published by this node")
        if device.unhealthy is not None:
            raise ClaimError(f"{where}: device {result.device} is unhealthy ({device.unhealthy})")
        other = held.get(result.device)
        if other is not None:
            raise ClaimError(
                f"{where}: device {result.device} is already prepared for claim {other}"
            )
        requests.setdefault(result.device, []).append(result.request)
    sharing = claim_sharing(where, claim, catalog.driver, {r.request for r in ours})
    chosen = tuple(catalog.devices[name] for name in requests)
    _refuse_overlaps(where, chosen, catalog, held)
    if not any(d.placement is not None for d in chosen):
        # Before anything is written; a new MIG instance's nodes are checked once it exists.
        _refuse_missing_nodes(where, [d.uuid for d in chosen], catalog)
    devices = tuple(
        PlannedDevice(
            name=d.name,
            requests=tuple(requests[d.name]),
            cdi_id=claim_device_id(catalog.driver, claim.uid, d.name),
        )
        for d in chosen
    )
    creations = tuple(
        Creation(d.name, d.uuid, d.placement) for d in chosen if d.placement is not None
    )
    return ClaimPlan(where, claim.uid, devices, chosen, sharing, creations)


def _overlap(a: CatalogDevice, b: CatalogDevice) -> bool:
    """Whether two devices cannot both be prepared: the same one, or two parts of one
    dynamic MIG GPU that meet (two placements sharing a memory slice, or the
    whole GPU beside one of its placements)."""
    if a.name == b.name:
        return True
    if a.uuid != b.uuid or (a.placement is None and b.placement is None):
        return False
    if a.placement is None or b.placement is None:
        return True
    first, second = a.placement, b.placement
    return first.start < second.start + second.size and second.start < first.start + first.size


def _refuse_overlaps(
    where: str, chosen: Sequence[CatalogDevice], catalog: Catalog, held: Mapping[str, str]
) -> None:
    """A device overlapping one held by another claim (or by this claim twice) is refused."""
    for i, device in enumerate(chosen):
        for other in chosen[i + 1 :]:
            if _overlap(device, other):
                raise ClaimError(f"{where}: devices {device.name} and {other.name} overlap")
        for name, holder in held.items():
            other_device = catalog.devices.get(name)
            if other_device is not None and _overlap(device, other_device):
                raise ClaimError(
                    f"{where}: device {device.name} overlaps {name}, "
                    f"already prepared for claim {holder}"
                )


def _refuse_missing_nodes(where: str, uuids: Sequence[str], catalog: Catalog) -> None:
    missing = missing_device_nodes(uuids, catalog)
    if missing:
        raise ClaimError(
            f"{where}: device nodes {', '.join(missing)} do not exist yet on this node "
            "(the driver creates them: nvidia-smi or nvidia-ctk system create-device-nodes); "
            "waiting for them"
        )


def missing_device_nodes(uuids: Sequence[str], catalog: Catalog) -> list[str]:
    """The `/dev` nodes the devices `uuids` need that do not exist (none when unchecked).

    Raises:
        ResourceError: a device is not on this node, or a MIG capability is unknown.
    """
    if not catalog.check_device_nodes:
        return []
    options = catalog.options
    root = options.container_dev_root
    needed = [*DRIVER_NODES]
    for uuid in uuids:
        needed += device_node_paths(catalog.inventory, uuid)
    return [path for path in dict.fromkeys(needed) if not _exists(options, join_root(root, path))]


def _exists(options: ResourceOptions, path: str) -> bool:
    try:
        return bool(options.host_dev_exists(path))
    except (OSError, ValueError):
        return False


def claim_sharing(where: str, claim: Claim, driver: str, requests: set[str]) -> ClaimSharing:
    """The claim's sharing: its opaque configs for `driver`, later ones winning.

    Validated, and refused where it cannot be honoured; time-slicing at the
    default interval is what a shared GPU does anyway: no edits.
    """
    sharing = ClaimSharing()
    for config in claim.config:
        if config.driver != driver:
            continue
        if config.requests and not requests & set(config.requests):
            continue
        try:
            sharing = parse_gpu_config(config.parameters)
        except ClaimConfigError as err:
            raise ClaimError(f"{where}: opaque config for {driver}: {err}") from None
    if sharing.mode is SharingMode.MPS:
        raise ClaimError(
            f"{where}: MPS sharing is not available through DRA claims yet; "
            "share with MPS through the device-plugin API (sharing.mps in the config file)"
        )
    if sharing.mode is SharingMode.TIME_SLICING and sharing.interval is not TimeSlice.DEFAULT:
        raise ClaimError(
            f"{where}: time-slice interval {sharing.interval} would change a GPU setting, "
            "which this plugin never does; use Default"
        )
    return sharing
