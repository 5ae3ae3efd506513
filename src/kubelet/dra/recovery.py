"""What the claim preparer starts from: the checkpoint, cleaned of what a crash or a reboot left.

Run once, before the DRA socket serves (in a thread: it is all file I/O):

- temp files of a checkpoint write that was killed before its rename go;
- a checkpoint that cannot be read is set aside (`checkpoint.load`) and the
  preparer starts with nothing prepared; that is a problem for `/state`, a
  log line and an Event, never a reason not to serve;
- a checkpoint of another boot is discarded: nothing it lists exists any
  more (the devices were reset, the containers are gone), so its claims'
  spec files are removed and the kubelet's retries prepare them afresh;
- a claim still `PrepareStarted` was cut short by a crash: the kubelet never
  had an answer for it, so its spec, if written, is removed, the MIG
  instances it recorded (dynamic MIG) are destroyed, and the entry dropped;
  the kubelet's retry prepares it again. An instance that cannot be
  destroyed now keeps its entry, still `PrepareStarted`: it holds its
  placement until the claim's next prepare or the next start destroys it.

What was cleaned is written back at once, so the next start does not do it
again; a write that fails is reported and done again at the next start.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from kubelet.dra import checkpoint
from kubelet.dra.checkpoint import CheckpointError, MigRecord, Phase, PreparedClaim


@dataclass
class Recovered:
    prepared: dict[str, PreparedClaim]
    problem: str | None = None  # the checkpoint was set aside, or could not be written
    notes: list[str] = field(default_factory=list)  # what was rolled back or discarded


def recover(
    path: Path,
    *,
    boot_id: str,
    remove_spec: Callable[[str], None],
    destroy_mig: Callable[[MigRecord], None] = lambda _: None,
) -> Recovered:
    """The claims prepared in this boot; `remove_spec(uid)` removes one claim's spec.

    `remove_spec` may raise OSError; a spec that cannot be removed is reported
    and its claim dropped all the same (the kubelet prepares it again, which
    rewrites it). `destroy_mig` may raise: see above.
    """
    for temp in checkpoint.temporary_files(path):
        with contextlib.suppress(OSError):
            temp.unlink()
    found, problem = checkpoint.load(path)
    if found is None:
        return Recovered({}, problem)
    result = Recovered(dict(found.claims))
    rebooted = bool(found.boot_id and boot_id and found.boot_id != boot_id)
    if rebooted:
        if found.claims:
            result.notes.append(
                f"{len(found.claims)} claim(s) prepared before the node rebooted are "
                "discarded; the kubelet prepares them again"
            )
        dropped = list(found.claims.values())
    else:
        dropped = [c for c in found.claims.values() if c.phase is Phase.STARTED]
        result.notes += [
            f"claim {c.claim} was being prepared when the plugin stopped: rolled back"
            for c in dropped
        ]
    for claim in dropped:
        result.prepared.pop(claim.claim.uid, None)
        try:
            remove_spec(claim.claim.uid)
        except OSError as err:
            result.notes.append(f"cannot remove the spec of claim {claim.claim}: {err.strerror}")
        # A reboot reset the GPUs: their MIG instances are gone with it.
        left = [] if rebooted else _destroy(claim, destroy_mig, result.notes)
        if left:
            result.prepared[claim.claim.uid] = replace(claim, mig=tuple(left))
    if dropped or found.boot_id != boot_id:
        try:
            checkpoint.save(path, result.prepared, boot_id=boot_id)
        except CheckpointError as err:
            result.problem = str(err)
    return result


def _destroy(
    claim: PreparedClaim, destroy_mig: Callable[[MigRecord], None], notes: list[str]
) -> list[MigRecord]:
    """Destroy the claim's recorded MIG instances, last first; those that could not be, kept."""
    left = list(claim.mig)
    while left:
        try:
            destroy_mig(left[-1])
        except Exception as err:  # whatever the library says, start-up goes on
            notes.append(f"cannot destroy a MIG instance of claim {claim.claim}: {err}")
            break
        left.pop()
    return left
