"""Which MPS-shared resources may be served now, per resource, and the probe that decides it.

A resource shared through MPS is served only while its own control daemon
answers. The gate remembers, per resource, the key (behaviour and replica
count) its daemon answered for: an edit that changes one MPS resource asks
its daemon again and leaves the others open; a daemon that stops answering
withdraws only its own resource.
"""

from __future__ import annotations

from pathlib import Path

from mps import MpsLayout, MpsNotReady, probe_daemon
from reconciler.plan import ResourceIntent

PROBE_TIMEOUT_SECONDS = 5.0


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
    async def probe(root: Path, name: str) -> str | None:
        """None when the daemon of `name` answers with its limits applied, else why not.

        A daemon answers as soon as it runs, but its memory and thread limits
        are applied after that; its `.started` marker says they are, so a
        replica is never handed out before its limits hold.
        """
        marker = MpsLayout(root).started(name)
        if not marker.exists():
            return f"MPS control daemon for {name} has not finished starting (no {marker})"
        try:
            await probe_daemon(mps_root_ctr=root, resource=name, timeout=PROBE_TIMEOUT_SECONDS)
        except MpsNotReady as err:
            return str(err)
        return None
