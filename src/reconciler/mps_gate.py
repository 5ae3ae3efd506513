"""Which MPS-shared resources may be served now, and the probe that decides it.

A resource shared through MPS is served only while its control daemon
answers; the gate remembers that per set of MPS resources (their behaviour
digests), so a reconfiguration that changes them asks again, and one that
does not keeps them open.
"""

from __future__ import annotations

from pathlib import Path

from mps import MpsLayout, MpsNotReady, probe_daemon
from reconciler.plan import Plan
from resources.allocation import Allocator

PROBE_TIMEOUT_SECONDS = 5.0


class MpsGate:
    def __init__(self) -> None:
        self.ready = False
        self._key: tuple[str, ...] = ()

    def admitted(self, plan: Plan) -> tuple[Allocator, ...]:
        """The plan's allocators, less the MPS resources while their daemon is not ready."""
        if plan.mps_key != self._key:
            self._key, self.ready = plan.mps_key, False
        if self.ready:
            return plan.allocators
        gated = set(plan.mps_resources)
        return tuple(a for a in plan.allocators if a.name not in gated)

    async def probe(self, plan: Plan) -> str | None:
        """None when every MPS daemon of the plan answers, else why not (one line).

        A daemon answers as soon as it runs, but its memory and thread limits
        are applied after that; its `.started` marker says they are, so a
        replica is never handed out before its limits hold.
        """
        root = Path(plan.config.flags.mps_container_root)
        layout = MpsLayout(root)
        for name in plan.mps_resources:
            marker = layout.started(name)
            if not marker.exists():
                return f"MPS control daemon for {name} has not finished starting (no {marker})"
            try:
                await probe_daemon(mps_root_ctr=root, resource=name, timeout=PROBE_TIMEOUT_SECONDS)
            except MpsNotReady as err:
                return str(err)
        return None
