"""The kubelet's device-health stream: `DRAResourceHealth.NodeWatchResources` (KEP-4680).

The kubelet opens one server-streaming call per registered DRA driver, on the
driver's DRAPlugin socket, and shows what it hears in the status of the pods
given a device (`containerStatuses[].allocatedResourcesStatus`). Each message is
the complete list of the pool's devices; a device the kubelet has not heard of
for its `health_check_timeout_seconds` reads `Unknown`, and the kubelet forgets
the driver's health when the stream ends.

`HealthFeed` holds the latest complete list (a `resources.dra_health.HealthReport`,
published by the reconcile loop on its own thread, the same event loop that
runs this server) and every watcher follows it: a new list is sent at once, to
every watcher, and the same list again every `RESEND_SECONDS` when nothing
changed, so the kubelet never ages a device we still report. A watcher that
falls behind (the kubelet not reading) skips to the newest list; nothing queues
up. A watcher that goes away stops following at once (`kubelet.handlers.streaming`
closes its iteration), and `end()` finishes every stream when the socket stops.

Both versions (`v1beta1`, `v1alpha1`) are the same on the wire
(tests/unit/kubelet/test_proto_descriptor_dra_health.py), so one servicer written
against the v1beta1 classes is bound under both service names.
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from contextlib import aclosing
from functools import partial
from typing import Any

import grpc
from loguru import logger

from foundation.latest import LatestValue
from kubelet.api.dra_health.v1alpha1 import api_pb2 as health_v1alpha1
from kubelet.api.dra_health.v1beta1 import api_pb2 as health_v1beta1
from kubelet.handlers import streaming
from resources.dra_health import (
    HEALTH_CHECK_TIMEOUT_SECONDS,
    RESEND_SECONDS,
    HealthReport,
    StreamHealth,
    cut,
)

#: The gRPC service names the servicer is bound under, newest first.
SERVICES = tuple(
    module.DESCRIPTOR.services_by_name["DRAResourceHealth"].full_name
    for module in (health_v1beta1, health_v1alpha1)
)
METHOD = "NodeWatchResources"
_STATUS = {
    StreamHealth.HEALTHY: health_v1beta1.HEALTHY,
    StreamHealth.UNHEALTHY: health_v1beta1.UNHEALTHY,
    StreamHealth.UNKNOWN: health_v1beta1.UNKNOWN,
}
Context = grpc.aio.ServicerContext[Any, Any]


class HealthFeed:
    """The latest complete list of the pool's devices with their health, for every watcher.

    Published and read on the event loop's thread only.
    """

    def __init__(self, *, every: float = RESEND_SECONDS) -> None:
        self._every = every
        self._value: LatestValue[HealthReport | None] = LatestValue(None)

    @property
    def report(self) -> HealthReport | None:
        """The list watchers get now; None before the first is published."""
        return self._value.value

    @property
    def watchers(self) -> int:
        """How many streams follow the feed now."""
        return self._value.followers

    async def publish(self, report: HealthReport) -> bool:
        """Make `report` the list every watcher gets; whether it differs from the last."""
        if report == self._value.value:
            return False
        await self._value.set(report)
        return True

    def follow(self) -> AsyncIterator[HealthReport]:
        """The list now (once there is one), every new one, and the same again when quiet."""
        return _published(self._value.follow(every=self._every))

    async def end(self) -> None:
        """Finish every stream following now; a later watcher starts from the last list."""
        ending, self._value = self._value, LatestValue(self._value.value)
        await ending.close()


async def _published(
    reports: AsyncGenerator[HealthReport | None, None],
) -> AsyncIterator[HealthReport]:
    # Closed with this one, so a watcher that goes stops following the feed at once.
    async with aclosing(reports):
        async for report in reports:
            if report is not None:
                yield report


def response(
    report: HealthReport, *, now: int, timeout: int = HEALTH_CHECK_TIMEOUT_SECONDS
) -> health_v1beta1.NodeWatchResourcesResponse:
    """One stream message: every device of `report`, determined at `now` (Unix seconds)."""
    return health_v1beta1.NodeWatchResourcesResponse(
        devices=[
            health_v1beta1.DeviceHealth(
                device=health_v1beta1.DeviceIdentifier(
                    pool_name=device.pool, device_name=device.device
                ),
                health=_STATUS[device.health],
                last_updated_time=now,
                health_check_timeout_seconds=timeout,
                message=cut(device.message),
            )
            for device in report
        ]
    )


class HealthStreamServicer:
    """Streams a `HealthFeed` to each kubelet that watches it.

    `clock` gives the Unix time each message says its statuses were determined
    at: the moment it is sent, since the health machine hears of every change
    as it happens (an unchanged list is still true when it goes out again).
    """

    def __init__(
        self, feed: HealthFeed, *, driver: str, clock: Callable[[], float] = time.time
    ) -> None:
        self._feed = feed
        self.driver = driver
        self._clock = clock
        self._log = logger.bind(driver=driver)

    async def NodeWatchResources(
        self,
        request: health_v1beta1.NodeWatchResourcesRequest,
        context: Context,
        *,
        service: str = SERVICES[0],
    ) -> AsyncGenerator[health_v1beta1.NodeWatchResourcesResponse, None]:
        self._log.info(
            "the kubelet watches the health of {driver}'s devices ({service})",
            driver=self.driver,
            service=service,
        )
        async for report in self._feed.follow():
            yield response(report, now=int(self._clock()))


def health_handlers(servicer: HealthStreamServicer) -> tuple[grpc.GenericRpcHandler, ...]:
    """The DRAResourceHealth service of `servicer` under each served version's name."""
    return tuple(
        grpc.method_handlers_generic_handler(
            service,
            {
                METHOD: streaming(
                    health_v1beta1.NodeWatchResourcesRequest,
                    partial(servicer.NodeWatchResources, service=service),
                    method=METHOD,
                    resource=servicer.driver,
                )
            },
        )
        for service in SERVICES
    )
