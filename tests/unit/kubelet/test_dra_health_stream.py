"""The device-health stream (DRAResourceHealth.NodeWatchResources) on the DRA plugin socket.

The kubelet's side is a raw gRPC call on the method path of each version, so what
the kubelet would read is asserted on the wire: the complete list, each status,
the timeout, the message cut at 1024 characters, every watcher getting every
change, and a watcher that hangs up being let go. `HealthFeed` alone shows what
a slow reader gets (the newest list, not a backlog) and the resend when quiet.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from grpc import aio

from kubelet.api.dra_health.v1beta1 import api_pb2 as health_pb2
from kubelet.dra.health_stream import SERVICES, HealthFeed
from kubelet.dra.server import DraPluginServer
from resources.dra_health import (
    HEALTH_CHECK_TIMEOUT_SECONDS,
    MESSAGE_LIMIT,
    DeviceHealthReport,
    HealthReport,
    StreamHealth,
)
from tests.unit.kubelet.conftest import DraFactory
from tests.waiting import eventually

POOL = "node-a"
WAIT = 5.0
Call = aio.UnaryStreamCall[
    health_pb2.NodeWatchResourcesRequest, health_pb2.NodeWatchResourcesResponse
]


def report(*states: tuple[str, StreamHealth, str]) -> HealthReport:
    return tuple(DeviceHealthReport(POOL, name, state, message) for name, state, message in states)


THREE = report(
    ("gpu-0", StreamHealth.UNHEALTHY, "xid 79"),
    ("gpu-1", StreamHealth.HEALTHY, ""),
    ("gpu-2", StreamHealth.UNKNOWN, "unmonitored: events not supported"),
)


@pytest.fixture
async def channel(short_dir: Path) -> AsyncIterator[aio.Channel]:
    socket = short_dir / "plugins" / "gpu.example.com" / "dra.sock"
    async with aio.insecure_channel(f"unix://{socket}") as opened:
        yield opened


def watch(channel: aio.Channel, service: str = SERVICES[0]) -> Call:
    method = channel.unary_stream(
        f"/{service}/NodeWatchResources",
        request_serializer=health_pb2.NodeWatchResourcesRequest.SerializeToString,
        response_deserializer=health_pb2.NodeWatchResourcesResponse.FromString,
    )
    call: Call = method(health_pb2.NodeWatchResourcesRequest())
    return call


async def read(call: Call) -> health_pb2.NodeWatchResourcesResponse:
    async with asyncio.timeout(WAIT):
        message = await call.read()
    assert message is not aio.EOF
    assert isinstance(message, health_pb2.NodeWatchResourcesResponse)
    return message


def said(message: health_pb2.NodeWatchResourcesResponse) -> list[tuple[str, str, int, str]]:
    return [
        (d.device.pool_name, d.device.device_name, d.health, d.message) for d in message.devices
    ]


async def serving(serve_dra: DraFactory, first: HealthReport | None = THREE) -> DraPluginServer:
    server = await serve_dra()
    if first is not None:
        await server.health.publish(first)
    return server


async def test_a_watcher_gets_the_complete_list_with_each_status_and_the_timeout(
    serve_dra: DraFactory, channel: aio.Channel
) -> None:
    await serving(serve_dra)
    before = int(time.time())
    message = await read(watch(channel))
    assert said(message) == [
        (POOL, "gpu-0", health_pb2.UNHEALTHY, "xid 79"),
        (POOL, "gpu-1", health_pb2.HEALTHY, ""),
        (POOL, "gpu-2", health_pb2.UNKNOWN, "unmonitored: events not supported"),
    ]
    assert {d.health_check_timeout_seconds for d in message.devices} == {
        HEALTH_CHECK_TIMEOUT_SECONDS
    }
    assert {d.last_updated_time for d in message.devices} <= set(
        range(before, int(time.time()) + 1)
    )


@pytest.mark.parametrize("service", SERVICES)
async def test_both_versions_stream_the_same_list(
    serve_dra: DraFactory, channel: aio.Channel, service: str
) -> None:
    await serving(serve_dra)
    assert said(await read(watch(channel, service)))[0][1:3] == ("gpu-0", health_pb2.UNHEALTHY)


async def test_a_message_past_1024_characters_is_cut_to_1024(
    serve_dra: DraFactory, channel: aio.Channel
) -> None:
    long = "xid 79: " + "x" * 5000
    await serving(serve_dra, report(("gpu-0", StreamHealth.UNHEALTHY, long)))
    (device,) = (await read(watch(channel))).devices
    assert len(device.message) == MESSAGE_LIMIT
    assert device.message.startswith("xid 79: xxx")
    assert device.message.endswith("...")


async def test_nothing_is_sent_before_the_first_list_then_the_list_at_once(
    serve_dra: DraFactory, channel: aio.Channel
) -> None:
    server = await serving(serve_dra, first=None)
    call = watch(channel)
    await eventually(lambda: server.health.watchers == 1, what="the stream to follow the feed")
    await server.health.publish(THREE)
    assert len((await read(call)).devices) == 3


async def test_every_watcher_gets_every_change(serve_dra: DraFactory, channel: aio.Channel) -> None:
    server = await serving(serve_dra)
    first, second = watch(channel), watch(channel, SERVICES[1])
    for call in (first, second):
        await read(call)
    healed = report(
        ("gpu-0", StreamHealth.HEALTHY, ""), *((d.device, d.health, d.message) for d in THREE[1:])
    )
    assert await server.health.publish(healed)
    for call in (first, second):
        assert said(await read(call))[0] == (POOL, "gpu-0", health_pb2.HEALTHY, "")
    assert not await server.health.publish(healed)  # the same list: nothing to send


async def test_a_watcher_that_hangs_up_is_let_go_and_the_others_keep_theirs(
    serve_dra: DraFactory, channel: aio.Channel
) -> None:
    server = await serving(serve_dra)
    leaving, staying = watch(channel), watch(channel)
    for call in (leaving, staying):
        await read(call)
    assert server.health.watchers == 2
    leaving.cancel()
    await eventually(lambda: server.health.watchers == 1, what="the cancelled stream to go")
    await server.health.publish(report(("gpu-0", StreamHealth.HEALTHY, "")))
    assert said(await read(staying)) == [(POOL, "gpu-0", health_pb2.HEALTHY, "")]


async def test_stopping_the_plugin_ends_the_streams(
    serve_dra: DraFactory, channel: aio.Channel
) -> None:
    server = await serving(serve_dra)
    call = watch(channel)
    await read(call)
    async with asyncio.timeout(WAIT):
        await server.stop(grace=WAIT)  # the stream ends first, so the grace is not waited out
        assert await call.read() is aio.EOF
    assert await call.code() is grpc.StatusCode.OK
    assert server.health.watchers == 0


async def test_a_stream_opened_after_a_restart_starts_from_the_last_list(
    serve_dra: DraFactory, channel: aio.Channel, short_dir: Path
) -> None:
    server = await serving(serve_dra)
    await server.stop()
    outcome = await server.converge(
        "gpu.example.com", short_dir / "registry", short_dir / "plugins"
    )
    assert outcome.converged
    assert said(await read(watch(channel)))[0][1] == "gpu-0"


# -- the feed alone ------------------------------------------------------------------------


async def test_a_slow_watcher_gets_the_newest_list_not_a_backlog() -> None:
    feed = HealthFeed()
    follower = feed.follow()
    await feed.publish(THREE)
    assert await anext(follower) == THREE
    for n in range(100):  # the watcher reads nothing meanwhile
        await feed.publish(report((f"gpu-{n}", StreamHealth.HEALTHY, "")))
    assert await anext(follower) == report(("gpu-99", StreamHealth.HEALTHY, ""))
    await feed.end()
    with pytest.raises(StopAsyncIteration):
        await anext(follower)


async def test_the_same_list_goes_out_again_when_nothing_changed() -> None:
    feed = HealthFeed(every=0.05)
    await feed.publish(THREE)
    follower = feed.follow()
    async with asyncio.timeout(WAIT):
        assert [await anext(follower) for _ in range(3)] == [THREE, THREE, THREE]
    await feed.end()
