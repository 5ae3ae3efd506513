"""Which MPS-shared resources may be served now, per resource, and the probe that decides it.

A resource shared through MPS is served only while its own control daemon
answers, with the limits meant for the replicas the plugin advertises. The
gate remembers, per resource, the key (behaviour and replica count) its
daemon answered for: an edit that changes one MPS resource asks its daemon
again and leaves the others open; a daemon that stops answering withdraws
only its own resource.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from pathlib import Path

from foundation.files import FileRejected, read_small_file
from mps import MpsConfigError, MpsLayout, MpsNotReady, probe_daemon
from mps.limits import daemon_spec
from reconciler.plan import ResourceIntent

PROBE_TIMEOUT_SECONDS = 5.0
# A marker is one line naming a few GPUs and their limits; more is not ours.
MARKER_LIMIT = 64 * 1024


class MpsGate:
    def __init__(self) -> None:
        self._admitted: dict[str, str] = {}

    def admits(self, intent: ResourceIntent) -> bool:
        """True for a resource that needs no daemon, or whose daemon answered for this key."""
        return intent.mps_key is None or self._admitted.get(intent.name) == intent.mps_key

    def admitted(self, name: str) -> bool:
        return name in self._admitted

    def admit(self, intent: ResourceIntent) -> None:
        if intent.mps_key is not None:
            self._admitted[intent.name] = intent.mps_key

    def withdraw(self, name: str) -> None:
        self._admitted.pop(name, None)

    def forget_others(self, names: set[str]) -> None:
        """Drop what is remembered for resources that are no longer planned."""
        for name in set(self._admitted) - names:
            del self._admitted[name]

    @staticmethod
    async def probe(root: Path, intent: ResourceIntent) -> NotReady | None:
        """None when the daemon of `intent` answers with this intent's limits applied, else why not.

        A daemon answers as soon as it runs, but its memory and thread limits
        are applied after that; its `.started` marker says they are, and
        which: the GPUs and limit commands it applied. They must be the ones
        `intent` is served with, so after an edit or a node label change
        (which the daemon follows on its own) no replica is handed out under
        the previous limits.
        """
        name = intent.name
        marker = MpsLayout(root).started(name)
        try:
            spec = daemon_spec(name, intent.allocator.resource.devices)
        except MpsConfigError as err:
            return NotReady(f"MPS for {name}: {err}")
        try:
            applied = await asyncio.to_thread(read_small_file, marker, limit=MARKER_LIMIT)
        except FileRejected as err:
            if not marker.exists():
                return NotReady(
                    f"MPS control daemon for {name} has not finished starting (no {marker})"
                )
            return NotReady(f"cannot read {marker}: {err.reason}")
        try:
            await probe_daemon(mps_root_ctr=root, resource=name, timeout=PROBE_TIMEOUT_SECONDS)
        except MpsNotReady as err:
            return NotReady(str(err))
        # An empty marker is a daemon from an earlier release, which did not
        # say its limits: trusted as before, so that an upgrade that rolls
        # the plugin first does not withdraw MPS resources until the daemon
        # rolls too.
        if applied.strip() and applied.decode("utf-8", "replace") != spec.marker:
            return NotReady(
                f"MPS control daemon for {name} applies other limits than this config asks for "
                f"({_summary(applied)}, not {spec.summary}); it restarts with the new config",
                other_limits=True,
            )
        return None


@dataclass(frozen=True)
class NotReady:
    """Why a resource's daemon cannot back it now.

    `other_limits`: the daemon runs and answers, with the limits of another
    config (a node label change it has not followed yet, or one the plugin
    has not). What the plugin already serves stays served if it was
    admitted for those limits; the new config waits.
    """

    reason: str
    other_limits: bool = False


def _summary(marker: bytes) -> str:
    """The limits a marker says were applied, or that it does not say."""
    try:
        found = json.loads(marker)
    except ValueError:
        found = None
    summary = found.get("summary") if isinstance(found, dict) else None
    return summary[:200] if isinstance(summary, str) else "limits not stated"
