"""NodePrepareResources and NodeUnprepareResources: a claim in, its CDI device IDs out.

`ClaimPreparer` is the DRA plugin's `Preparer`. Preparing a claim:

1. a claim prepared before (this process or an earlier one: the checkpoint)
   is answered as it was, so the kubelet's retries are harmless;
2. the ResourceClaim is read from the API (off the loop) and its allocation
   results for our driver taken; a device of another pool (node) or not
   published by this node, or one that is unhealthy now, is that claim's
   error, as is an opaque config that is not a valid `GpuConfig`;
3. the claim's CDI spec is written (`resources.claim_spec`), then the claim
   is recorded in the checkpoint; its devices' CDI IDs are the answer.

Unpreparing removes the claim's spec file (named from its uid, so even a
claim the checkpoint no longer knows leaves nothing behind) and forgets it.
Every failure is one line in that claim's answer; one claim never fails the
others, and nothing here raises into the gRPC server.

What the node publishes comes from the reconciler as a `Catalog` (the
devices of the ResourceSlices, their health, and what building a spec
needs); it is replaced whole when any of it changes, and read, never
written, here.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from loguru import logger

from devices.model import Inventory
from foundation.errors import PluginError
from kubelet.dra import checkpoint
from kubelet.dra.checkpoint import CheckpointError, PreparedClaim
from kubelet.dra.types import ClaimRef, PreparedDevice, PrepareResult
from resources.cdi_files import write_spec
from resources.claim_spec import ClaimDevice, claim_device_id, claim_spec, claim_spec_file
from resources.options import ResourceOptions
from settings.claim_config import (
    ClaimConfigError,
    ClaimSharing,
    SharingMode,
    TimeSlice,
    parse_gpu_config,
)

if TYPE_CHECKING:  # the Kubernetes client is imported only once DRA mode starts
    from kube.resource_claims import ResourceClaimView

ReadClaim = Callable[[str, str], "ResourceClaimView"]  # (namespace, name), blocking


@dataclass(frozen=True)
class DraDevice:
    """A device of this node's ResourceSlices: its GPU or MIG UUID, and why it is unhealthy."""

    name: str
    uuid: str
    unhealthy: str | None = None


@dataclass(frozen=True)
class Catalog:
    """What the node publishes now, and what a claim's spec is built from."""

    pool: str
    devices: Mapping[str, DraDevice]
    inventory: Inventory
    options: ResourceOptions


class ClaimError(Exception):
    """Why one claim cannot be prepared; one line, given to the kubelet as that claim's error."""


class ClaimPreparer:
    """Owns the prepared claims: their CDI spec files and the checkpoint."""

    def __init__(
        self,
        *,
        driver: str,
        cdi_dir: Path,
        checkpoint_path: Path,
        read_claim: ReadClaim,
        catalog: Callable[[], Catalog | None],
        on_change: Callable[[], None] = lambda: None,
    ) -> None:
        self._driver = driver
        self._cdi_dir = cdi_dir
        self._checkpoint = checkpoint_path
        self._read_claim = read_claim
        self._catalog = catalog
        self._on_change = on_change  # the prepared claims changed (for `/state`)
        self._lock = asyncio.Lock()  # one checkpoint write at a time
        self.prepared, self.problem = checkpoint.load(checkpoint_path)
        if self.problem is not None:
            logger.warning("DRA checkpoint: {problem}", problem=self.problem)

    async def prepare(self, claims: Sequence[ClaimRef]) -> dict[str, PrepareResult]:
        answers = await asyncio.gather(*(self._prepare_one(claim) for claim in claims))
        self._on_change()
        return {claim.uid: answer for claim, answer in zip(claims, answers, strict=True)}

    async def unprepare(self, claims: Sequence[ClaimRef]) -> dict[str, str]:
        answers = await asyncio.gather(*(self._unprepare_one(claim) for claim in claims))
        self._on_change()
        return {claim.uid: answer for claim, answer in zip(claims, answers, strict=True)}

    async def _prepare_one(self, claim: ClaimRef) -> PrepareResult:
        done = self.prepared.get(claim.uid)
        if done is not None:
            return PrepareResult(done.devices)
        spec_path = self._cdi_dir / claim_spec_file(self._driver, claim.uid)
        try:
            view = await asyncio.to_thread(self._read_claim, claim.namespace, claim.name)
            devices, spec = self._plan(claim, view)
            await asyncio.to_thread(write_spec, self._cdi_dir, spec, spec_path.name)
            async with self._lock:
                prepared = {**self.prepared, claim.uid: PreparedClaim(claim, devices)}
                try:
                    await asyncio.to_thread(checkpoint.save, self._checkpoint, prepared)
                except CheckpointError:
                    # Not recorded, so not prepared: leave nothing a later
                    # unprepare would not know about.
                    await asyncio.to_thread(spec_path.unlink, missing_ok=True)
                    raise
                self.prepared = prepared
        except (ClaimError, PluginError, CheckpointError) as err:
            return PrepareResult(error=str(err))
        except OSError as err:
            where = err.filename or self._cdi_dir
            return PrepareResult(error=f"cannot write the claim's CDI spec to {where}: {err}")
        logger.info(
            "prepared claim {ns}/{name} ({uid}): {devices}",
            ns=claim.namespace,
            name=claim.name,
            uid=claim.uid,
            devices=", ".join(d.device_name for d in devices),
        )
        return PrepareResult(devices)

    def _plan(
        self, claim: ClaimRef, view: ResourceClaimView
    ) -> tuple[tuple[PreparedDevice, ...], dict[str, Any]]:
        """The devices to answer with and the spec to write (raises `ClaimError`)."""
        where = f"ResourceClaim {claim.namespace}/{claim.name}"
        if view.uid != claim.uid:
            raise ClaimError(f"{where} has uid {view.uid}, not {claim.uid}: it was re-created")
        catalog = self._catalog()
        if catalog is None:
            raise ClaimError("the node's devices are not known yet: retry")
        ours = [r for r in view.results if r.driver == self._driver]
        if not ours:
            raise ClaimError(f"{where} has no device of driver {self._driver} allocated")
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
                why = device.unhealthy
                raise ClaimError(f"{where}: device {result.device} is unhealthy ({why})")
            requests.setdefault(result.device, []).append(result.request)
        # Validated, and refused where it cannot be honoured; time-slicing at
        # the default interval is what a shared GPU does anyway: no edits.
        self._sharing(where, view, {r.request for r in ours})
        chosen = [catalog.devices[name] for name in requests]
        spec = claim_spec(
            driver=self._driver,
            claim_uid=claim.uid,
            devices=[ClaimDevice(d.name, d.uuid) for d in chosen],
            inventory=catalog.inventory,
            options=catalog.options,
        )
        devices = tuple(
            PreparedDevice(
                request_names=tuple(requests[d.name]),
                pool_name=catalog.pool,
                device_name=d.name,
                cdi_device_ids=(claim_device_id(self._driver, claim.uid, d.name),),
            )
            for d in chosen
        )
        return devices, spec

    def _sharing(self, where: str, view: ResourceClaimView, requests: set[str]) -> ClaimSharing:
        """The claim's sharing: its opaque configs for our driver, later ones winning."""
        sharing = ClaimSharing()
        for config in view.config:
            if config.driver != self._driver:
                continue
            if config.requests and not requests & set(config.requests):
                continue
            try:
                sharing = parse_gpu_config(config.parameters)
            except ClaimConfigError as err:
                raise ClaimError(f"{where}: opaque config for {self._driver}: {err}") from None
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

    async def _unprepare_one(self, claim: ClaimRef) -> str:
        try:
            spec = self._cdi_dir / claim_spec_file(self._driver, claim.uid)
            await asyncio.to_thread(spec.unlink, missing_ok=True)
            if claim.uid in self.prepared:
                async with self._lock:
                    prepared = dict(self.prepared)
                    prepared.pop(claim.uid, None)
                    await asyncio.to_thread(checkpoint.save, self._checkpoint, prepared)
                    self.prepared = prepared
        except CheckpointError as err:
            return str(err)
        except OSError as err:
            return f"cannot remove the claim's CDI spec {err.filename}: {err.strerror}"
        logger.info("unprepared claim {uid}", uid=claim.uid)
        return ""
