"""``--metrics-address``: the labeller's `/healthz`, `/readyz` and `/metrics`.

Off by default (see `inspection.side` for why). When on, the labeller reports:

- ``gpu_feature_discovery_labelling_passes_total``: passes that published;
- ``gpu_feature_discovery_labels``: how many labels the last pass wrote;
- ``gpu_feature_discovery_last_labelled_timestamp_seconds``: when (Unix time);
- the process series and ``gpu_feature_discovery_build_info``.

``/healthz`` fails once the labeller is overdue: no pass has finished within
the sleep interval plus `PASS_GRACE_SECONDS` of the previous one (or of the
start), which is what a hung driver call looks like from outside. With an
infinite interval only the first pass is waited for. ``/readyz`` is 200 once
a pass has published labels and until a periodic run withdraws them.

Passes are observed through the `LabelSink` seam: the recorder is one more
sink, so the labelling loop knows nothing about it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence

from inspection.side import SideEndpoint, ThreadedEndpoint
from inspection.telemetry import SideMetrics
from labels.flags import parse_arguments
from labels.options import GfdOptions
from labels.output import LabelSink
from settings import ConfigError

__all__ = ["PASS_GRACE_SECONDS", "LabellerTelemetry", "start_telemetry"]

# Longest a pass (driver start, discovery, writing the file) may take.
PASS_GRACE_SECONDS = 120.0


class _PassRecorder:
    def __init__(self, owner: LabellerTelemetry, interval: float) -> None:
        self._owner = owner
        self._interval = interval

    def publish(self, labels: Mapping[str, str]) -> None:
        self._owner.published(len(labels), self._interval)

    def withdraw(self) -> None:
        self._owner.withdrawn()


class LabellerTelemetry:
    """The labeller's metrics and probes, served from a thread at ``address``.

    Raises:
        ValueError: ``address`` is not HOST:PORT.
    """

    def __init__(
        self,
        address: str,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self._clock = clock
        self._wall = wall
        self._due = clock() + PASS_GRACE_SECONDS
        self._labels: int | None = None
        self._last: float | None = None
        self._ready = False
        self.metrics = SideMetrics("gpu_feature_discovery_")
        self._passes = self.metrics.counter(
            "labelling_passes", "Labelling passes whose labels were published."
        )
        self.metrics.reading(
            "labels", "Labels written by the last labelling pass.", lambda: self._labels
        )
        self.metrics.reading(
            "last_labelled_timestamp_seconds",
            "Unix time at which the last labelling pass published its labels.",
            lambda: self._last,
        )
        endpoint = SideEndpoint(address, self.metrics, healthy=self.healthy, ready=self.ready)
        self._server = ThreadedEndpoint(endpoint)

    @property
    def port(self) -> int:
        return self._server.port

    def start(self) -> None:
        """Raises OSError when the address cannot be bound."""
        self._server.start()

    def stop(self) -> None:
        self._server.stop()

    def sink(self, options: GfdOptions) -> LabelSink:
        """One more sink for a run: records each pass it sees."""
        return _PassRecorder(self, options.sleep_interval)

    def published(self, count: int, interval: float) -> None:
        self._labels = count
        self._last = self._wall()
        self._ready = True
        self._passes()
        wait = interval if math.isfinite(interval) else math.inf
        self._due = self._clock() + wait + PASS_GRACE_SECONDS

    def withdrawn(self) -> None:
        self._ready = False
        # The next run (a reload) starts with a pass at once.
        self._due = self._clock() + PASS_GRACE_SECONDS

    def healthy(self) -> bool:
        return self._clock() <= self._due

    def ready(self) -> bool:
        return self._ready


def start_telemetry(argv: Sequence[str], env: Mapping[str, str]) -> LabellerTelemetry | None:
    """The endpoint ``--metrics-address`` asks for, listening; None when it is not set.

    Raises:
        ConfigError: the arguments are invalid, or the address is malformed or in use
            (one line naming the flag or variable).
    """
    given = parse_arguments(argv, env).get("metrics_address")
    if given is None or not given.value:
        return None
    try:
        telemetry = LabellerTelemetry(given.value)
        telemetry.start()
    except ValueError as error:
        raise ConfigError(str(error), origin=given.origin, path=given.name) from None
    except OSError as error:
        raise ConfigError(
            f"cannot listen on {given.value}: {error.strerror or error}",
            origin=given.origin,
            path=given.name,
        ) from None
    return telemetry
