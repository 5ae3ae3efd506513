"""``--metrics-address``: the MPS daemon manager's `/healthz`, `/readyz` and `/metrics`.

Off by default (see `inspection.side`). When on, the endpoint runs on the
manager's own event loop, so ``/healthz`` answering at all shows the loop is
alive; ``/readyz`` is 200 while every control daemon of the node answers
(the same condition as the ``.ready`` marker). Metrics:

- ``mps_control_daemon_daemons``: control daemons this node runs;
- ``mps_control_daemon_ready``: 1 while all of them answer;
- ``mps_control_daemon_load_failures_total``: settings or devices that could
  not be read (each retried with backoff);
- the process series and ``mps_control_daemon_build_info``.
"""

from __future__ import annotations

from inspection.side import SideEndpoint
from inspection.telemetry import SideMetrics
from mps.supervisor import Supervisor

__all__ = ["DaemonTelemetry"]


class DaemonTelemetry:
    """Metrics and probes of the manager; does nothing when ``address`` is empty.

    Raises:
        ValueError: ``address`` is set but is not HOST:PORT.
    """

    def __init__(self, address: str) -> None:
        self._supervisor: Supervisor | None = None
        self.metrics = SideMetrics("mps_control_daemon_")
        self._failures = self.metrics.counter(
            "load_failures", "Times the settings or the devices could not be read."
        )
        self.metrics.reading(
            "daemons",
            "MPS control daemons this node runs (one per MPS-shared resource).",
            lambda: None if self._supervisor is None else float(len(self._supervisor.daemons)),
        )
        self.metrics.reading(
            "ready", "1 while every MPS control daemon answers, else 0.", self._ready_value
        )
        self.endpoint = (
            SideEndpoint(address, self.metrics, healthy=lambda: True, ready=self.ready)
            if address
            else None
        )

    async def start(self) -> None:
        """Raises OSError when the address cannot be bound."""
        if self.endpoint is not None:
            await self.endpoint.start()

    async def stop(self) -> None:
        if self.endpoint is not None:
            await self.endpoint.stop()

    def supervising(self, supervisor: Supervisor | None) -> None:
        self._supervisor = supervisor

    def load_failed(self) -> None:
        self._failures()

    def ready(self) -> bool:
        return self._supervisor is not None and self._supervisor.all_up

    def _ready_value(self) -> float | None:
        return None if self._supervisor is None else float(self.ready())
