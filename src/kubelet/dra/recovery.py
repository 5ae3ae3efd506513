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
  had an answer for it, so its spec, if written, is removed and the entry
  dropped; the kubelet's retry prepares it again.

What was cleaned is written back at once, so the next start does not do it
again; a write that fails is reported and done again at the next start.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from kubelet.dra import checkpoint
from kubelet.dra.checkpoint import CheckpointError, Phase, PreparedClaim


@dataclass
class Recovered:
    prepared: dict[str, PreparedClaim]
    problem: str | None = None  # the checkpoint was set aside, or could not be written
    notes: list[str] = field(default_factory=list)  # what was rolled back or discarded


def recover(path: Path, *, boot_id: str, remove_spec: Callable[[str], None]) -> Recovered:
    """The claims prepared in this boot and completed; `remove_spec(uid)` removes one claim's spec.

    `remove_spec` may raise OSError; a spec that cannot be removed is reported
    and its claim dropped all the same (the kubelet prepares it again, which
    rewrites it).
    """
    for temp in checkpoint.temporary_files(path):
        with contextlib.suppress(OSError):
            temp.unlink()
    found, problem = checkpoint.load(path)
    if found is None:
        return Recovered({}, problem)
    result = Recovered(dict(found.claims))
    if found.boot_id and boot_id and found.boot_id != boot_id:
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
    if dropped or found.boot_id != boot_id:
        try:
            checkpoint.save(path, result.prepared, boot_id=boot_id)
        except CheckpointError as err:
            result.problem = str(err)
    return result
