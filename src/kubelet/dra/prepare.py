"""NodePrepareResources and NodeUnprepareResources: a claim in, its CDI device IDs out.

`ClaimPreparer` is the DRA plugin's `Preparer`: the I/O around the pure
claim planner (`resources.claim_plan`). Preparing a claim:

1. a claim prepared before (this process or an earlier one: the checkpoint)
   is answered as it was, so the kubelet's retries are harmless; a claim
   asked for twice at once is prepared once, and both calls get its answer;
2. the ResourceClaim is read from the API (off the loop);
3. under one lock, so two claims never race for a device: the planner
   decides its devices and spec from the node's `Catalog` and the devices
   the other prepared claims hold; the claim is checkpointed
   `PrepareStarted` (with the MIG instances it will create, for a dynamic
   MIG placement), each instance is created and its ids checkpointed, its
   spec is written, and it is checkpointed `PrepareCompleted`; its devices'
   CDI IDs are the answer.

A crash between those steps leaves a `PrepareStarted` entry, which the next
start rolls back (`kubelet.dra.recovery`); a failure between them undoes
what the claim had made (spec, instances) before it answers. Kill points,
for the crash tests (`foundation.kill_points`): `prepare:claim-read`,
`prepare:started`, `prepare:mig-created`, `prepare:spec-written`,
`prepare:completed`, `unprepare:spec-removed` and `checkpoint:before-rename`.

Unpreparing removes the claim's spec file (named from its uid, so even a
claim the checkpoint no longer knows leaves nothing behind), destroys its
MIG instances and forgets it; an instance that cannot be destroyed (still in
use) is that claim's error, and the kubelet's retry tries again.
Every failure is one line in that claim's answer; one claim never fails the
others, and nothing here raises into the gRPC server.

What the node publishes comes from the reconciler as a `Catalog`; it is
replaced whole when any of it changes, and read, never written, here.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from loguru import logger

from devices.model import MigDevice
from foundation.errors import PluginError
from foundation.kill_points import KillPoints
from kubelet.dra import checkpoint, mig_instances
from kubelet.dra.checkpoint import CheckpointError, MigRecord, Phase, PreparedClaim
from kubelet.dra.mig_instances import MigControl
from kubelet.dra.recovery import recover
from kubelet.dra.types import ClaimRef, PreparedDevice, PrepareResult
from resources.cdi_files import write_spec
from resources.claim_catalog import Catalog
from resources.claim_plan import ClaimError, ClaimPlan, plan_claim
from resources.claim_spec import claim_spec_file

if TYPE_CHECKING:  # the Kubernetes client is imported only once DRA mode starts
    from kube.resource_claims import ResourceClaimView

NO_KILLS = KillPoints()
ReadClaim = Callable[[str, str], "ResourceClaimView"]  # (namespace, name), blocking


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
        boot_id: str | None = None,
        kill: KillPoints = NO_KILLS,
        mig: Callable[[], MigControl | None] = lambda: None,
    ) -> None:
        """Recovers the checkpoint (file I/O, NVML: make it in a thread)."""
        self._driver = driver
        self._cdi_dir = cdi_dir
        self._checkpoint = checkpoint_path
        self._read_claim = read_claim
        self._catalog = catalog
        self._on_change = on_change  # the prepared claims changed (for `/state`)
        # One claim planned, written and checkpointed at a time: two claims
        # naming one device cannot both pass the check against the other.
        self._lock = asyncio.Lock()
        self._preparing: dict[str, asyncio.Future[PrepareResult]] = {}
        self._boot_id = checkpoint.current_boot_id() if boot_id is None else boot_id
        self._kill = kill
        self._mig = mig  # the device library now, for dynamic MIG's instances
        recovered = recover(
            checkpoint_path,
            boot_id=self._boot_id,
            remove_spec=self._remove_spec,
            destroy_mig=self._destroy_now,
        )
        for note in recovered.notes:
            logger.info("DRA checkpoint: {note}", note=note)
        if recovered.problem is not None:
            logger.warning("DRA checkpoint: {problem}", problem=recovered.problem)
        self.prepared: dict[str, PreparedClaim] = recovered.prepared
        self.problem = recovered.problem  # for `/state` and an Event

    async def prepare(self, claims: Sequence[ClaimRef]) -> dict[str, PrepareResult]:
        answers = await asyncio.gather(*(self._prepare_once(claim) for claim in claims))
        self._on_change()
        return {claim.uid: answer for claim, answer in zip(claims, answers, strict=True)}

    async def unprepare(self, claims: Sequence[ClaimRef]) -> dict[str, str]:
        answers = await asyncio.gather(*(self._unprepare_one(claim) for claim in claims))
        self._on_change()
        return {claim.uid: answer for claim, answer in zip(claims, answers, strict=True)}

    def holders(self, but: str = "") -> dict[str, str]:
        """Device name -> the claim (`namespace/name`) that holds it, for every claim but `but`."""
        return {
            device.device_name: f"{done.claim.namespace}/{done.claim.name}"
            for uid, done in self.prepared.items()
            if uid != but
            for device in done.devices
        }

    async def _prepare_once(self, claim: ClaimRef) -> PrepareResult:
        """One preparation per claim at a time: a second call for it shares the first's answer."""
        running = self._preparing.get(claim.uid)
        if running is None:
            running = asyncio.ensure_future(self._prepare_one(claim))
            self._preparing[claim.uid] = running
            running.add_done_callback(lambda _: self._preparing.pop(claim.uid, None))
        # Shielded: a kubelet call that is cancelled must not cut short a
        # preparation another call is waiting for.
        return await asyncio.shield(running)

    def _spec_path(self, uid: str) -> Path:
        return self._cdi_dir / claim_spec_file(self._driver, uid)

    def _remove_spec(self, uid: str) -> None:
        self._spec_path(uid).unlink(missing_ok=True)

    async def _save(self, prepared: Mapping[str, PreparedClaim]) -> None:
        """Checkpoint `prepared`, then hold it as what is prepared.

        Raises:
            CheckpointError: not written; what is held is unchanged.
        """
        await asyncio.to_thread(
            checkpoint.save,
            self._checkpoint,
            prepared,
            boot_id=self._boot_id,
            before_rename=partial(self._kill, "checkpoint:before-rename"),
        )
        self.prepared = dict(prepared)

    def _control(self) -> MigControl:
        control = self._mig()
        if control is None:
            raise ClaimError("the device library is not open yet: retry")
        return control

    def _destroy_now(self, record: MigRecord) -> None:
        """Blocking: destroy the instance a record names (start-up recovery).

        Raises:
            MigError, DiscoveryError: not destroyed (one line).
            ClaimError: no device library yet.
        """
        mig_instances.destroy(self._control(), record)

    async def _undo(self, uid: str) -> None:
        """Take back a claim's `PrepareStarted`: its MIG instances, then its entry.

        An instance that cannot be destroyed keeps the entry (here and on
        disk, with what is left to destroy): it still holds its placement,
        and the claim's next prepare, or the next start, tries again.

        Raises:
            PluginError: an instance could not be destroyed (one line).
        """
        entry = self.prepared.get(uid)
        if entry is None:
            return
        left = list(entry.mig)
        try:
            while left:
                await asyncio.to_thread(self._destroy_now, left[-1])
                left.pop()
        except Exception as err:  # the library's one line, whatever it raised
            self.prepared[uid] = replace(entry, mig=tuple(left))
            with contextlib.suppress(CheckpointError):
                await self._save(self.prepared)
            raise ClaimError(
                f"cannot destroy the {mig_instances.describe(left[-1])} "
                f"of claim {entry.claim}: {err}"
            ) from None
        self.prepared.pop(uid, None)
        try:
            await self._save(self.prepared)
        except CheckpointError as err:
            logger.warning("DRA checkpoint: {err}; the next start rolls the claim back", err=err)

    async def _prepare_one(self, claim: ClaimRef) -> PrepareResult:
        done = self.prepared.get(claim.uid)
        if done is not None and done.phase is Phase.COMPLETED:
            return PrepareResult(done.devices)
        spec_path = self._spec_path(claim.uid)
        try:
            view = await asyncio.to_thread(self._read_claim, claim.namespace, claim.name)
            if view.uid != claim.uid:
                raise ClaimError(
                    f"ResourceClaim {claim.namespace}/{claim.name} has uid {view.uid}, "
                    f"not {claim.uid}: it was re-created"
                )
            self._kill("prepare:claim-read")
            async with self._lock:
                await self._undo_started(claim.uid)
                catalog = self._catalog()
                if catalog is None:
                    raise ClaimError("the node's devices are not known yet: retry")
                plan = plan_claim(view, catalog, self.holders(but=claim.uid))
                devices = tuple(
                    PreparedDevice(
                        request_names=device.requests,
                        pool_name=catalog.pool,
                        device_name=device.name,
                        cdi_device_ids=(device.cdi_id,),
                    )
                    for device in plan.devices
                )
                started = PreparedClaim(claim, devices, Phase.STARTED, _records(plan))
                await self._save({**self.prepared, claim.uid: started})
                self._kill("prepare:started")
                try:
                    created = await self._create(started, plan)
                    spec = plan.spec(catalog, created)
                    await asyncio.to_thread(write_spec, self._cdi_dir, spec, spec_path.name)
                    self._kill("prepare:spec-written")
                    done_entry = replace(self.prepared[claim.uid], phase=Phase.COMPLETED)
                    await self._save({**self.prepared, claim.uid: done_entry})
                except Exception:
                    # Not recorded as done, so not prepared: leave nothing a
                    # later unprepare would not know about.
                    with contextlib.suppress(OSError, ValueError):
                        await asyncio.to_thread(self._remove_spec, claim.uid)
                    with contextlib.suppress(ClaimError):
                        await self._undo(claim.uid)
                    raise
                self._kill("prepare:completed")
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

    async def _undo_started(self, uid: str) -> None:
        """Take back the claim's own `PrepareStarted` that a failed undo left, before planning."""
        entry = self.prepared.get(uid)
        if entry is not None and entry.phase is Phase.STARTED:
            await self._undo(uid)

    async def _create(self, started: PreparedClaim, plan: ClaimPlan) -> dict[str, MigDevice]:
        """Each of the plan's MIG instances, its ids checkpointed as soon as it exists.

        Raises:
            MigError: a creation failed (the library left nothing of it).
            CheckpointError: an instance exists but could not be recorded.
        """
        created: dict[str, MigDevice] = {}
        records = list(started.mig)
        for i, creation in enumerate(plan.creations):
            control = self._control()
            placement = creation.placement
            mig = await asyncio.to_thread(
                control.create_mig, creation.gpu_uuid, placement.profile_id, placement.start
            )
            created[creation.device] = mig
            records[i] = replace(records[i], gi=mig.gi, ci=mig.ci)
            entry = replace(started, mig=tuple(records))
            await self._save({**self.prepared, started.claim.uid: entry})
            self._kill("prepare:mig-created")
        return created

    async def _unprepare_one(self, claim: ClaimRef) -> str:
        try:
            await asyncio.to_thread(self._remove_spec, claim.uid)
            self._kill("unprepare:spec-removed")
            if claim.uid in self.prepared:
                async with self._lock:
                    await self._undo(claim.uid)
        except (CheckpointError, ClaimError) as err:
            return str(err)
        except OSError as err:
            return f"cannot remove the claim's CDI spec {err.filename}: {err.strerror}"
        logger.info("unprepared claim {uid}", uid=claim.uid)
        return ""


def _records(plan: ClaimPlan) -> tuple[MigRecord, ...]:
    """What the claim's prepare creates, recorded before any of it is made."""
    return tuple(
        MigRecord(c.device, c.gpu_uuid, c.placement.profile_id, c.placement.start)
        for c in plan.creations
    )
