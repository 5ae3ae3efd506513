"""A kubelet that hangs up on its ListAndWatch streams is not an error.

A restarting kubelet drops every connection at once, often while the plugin is
still sending it device lists it stopped reading (health events and config
edits keep coming). Each such stream must end quietly: one DEBUG line, no
WARNING or ERROR and no traceback, whatever gRPC does underneath.

Real grpc.aio server (the product's `ResourceServer`) and clients on a unix
socket. The clients open ListAndWatch and never read. The lists are large
enough (about 45 KB) that the first one fits in a client's HTTP/2 stream
window (64 KiB; the clients do not probe for a larger one) and the second
cannot: every stream is then stuck mid-write when its client goes away, as
a kubelet that stopped reading leaves it. Records are taken from the plugin's own log pipeline
(`foundation.logs.configure`), through which gRPC's stdlib records reach it.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import AsyncIterator, Iterable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import grpc
import pytest
from loguru import logger

from foundation import logs
from foundation.latest import LatestValue
from kubelet import translate
from kubelet.api import api_pb2, api_pb2_grpc
from kubelet.handlers import SERVICE, device_plugin_handler
from kubelet.server import ResourceServer
from kubelet.servicer import DevicePluginServicer, ResourceState
from resources.allocation import Allocator
from resources.builder import build_resources
from resources.model import Health, PluginDevice
from resources.options import ResourceOptions, SharingOptions, SharingStrategy
from tests.unit.kubelet.test_servicer_preferred import node
from tests.waiting import eventually

STREAMS = 20
KUBELET = 1  # the kubelet generation the server "registers" with (registration is off)
# No BDP probing: the client keeps the initial 64 KiB stream window, which the
# second list overflows.
CLIENT_OPTIONS = [("grpc.http2.bdp_probe", 0)]


@dataclass(frozen=True)
class Record:
    level: str
    severity: int  # loguru's level number: WARNING is 30, as in stdlib logging
    logger: str
    message: str
    traceback: bool


@pytest.fixture
def records() -> Iterator[list[Record]]:
    """Every record of the plugin's log pipeline during the test, gRPC's stdlib ones included."""
    root = logging.getLogger()
    saved_handlers, saved_level = root.handlers[:], root.level
    libraries = {name: logging.getLogger(name).level for name in logging.root.manager.loggerDict}
    logs.configure(level="DEBUG")
    logger.remove()  # the stderr sink `configure` added: the test reads records, not text
    seen: list[Record] = []

    def sink(message: Any) -> None:
        record = message.record
        seen.append(
            Record(
                level=record["level"].name,
                severity=record["level"].no,
                logger=str(record["extra"].get("logger") or record["name"]),
                message=record["message"],
                traceback=record["exception"] is not None,
            )
        )

    logger.add(sink, level="DEBUG")
    try:
        yield seen
    finally:
        logger.remove()
        logger.add(sys.stderr)  # loguru's own default, which the other tests log to
        root.handlers[:] = saved_handlers
        root.setLevel(saved_level)
        for name in logging.root.manager.loggerDict:
            logging.getLogger(name).setLevel(libraries.get(name, logging.NOTSET))


def large_resource() -> Allocator:
    # 8 GPUs shared 100 ways: 800 device IDs, about 45 KB per ListAndWatch message.
    sharing = SharingOptions(
        strategy=SharingStrategy.TIME_SLICING, replicas={"nvidia.com/gpu": 100}
    )
    options = ResourceOptions(sharing=sharing)
    (resource,) = build_resources(node(8), options)
    return Allocator(resource, options)


def health_flip(devices: Iterable[PluginDevice], turn: int) -> tuple[PluginDevice, ...]:
    """What a health event does to the list: half the devices change state."""
    states = (Health.HEALTHY, Health.UNHEALTHY)
    return tuple(replace(device, health=states[(n + turn) % 2]) for n, device in enumerate(devices))


@pytest.fixture
async def served(sock_dir: Path) -> AsyncIterator[tuple[ResourceServer, Allocator]]:
    allocator = large_resource()
    server = ResourceServer(
        allocator=allocator, socket_path=sock_dir / "gpu.sock", kubelet_socket=None
    )
    outcome = await server.converge(allocator, allocator.resource.devices, KUBELET)
    assert outcome.converged, outcome.describe()
    try:
        yield server, allocator
    finally:
        await server.stop(grace=0)


@pytest.fixture
def lists_built(monkeypatch: pytest.MonkeyPatch) -> tuple[list[int], asyncio.Event]:
    """Counts the ListAndWatch messages built; the event is set at two per stream.

    A stream builds a message right before writing it, in the same step, so
    two per stream means every stream has started writing its second list.
    """
    built = [0]
    second_lists = asyncio.Event()
    build = translate.list_and_watch_response

    def counting(devices: Iterable[PluginDevice]) -> api_pb2.ListAndWatchResponse:
        built[0] += 1
        if built[0] >= 2 * STREAMS:
            second_lists.set()
        return build(devices)

    monkeypatch.setattr(translate, "list_and_watch_response", counting)
    return built, second_lists


def loud(records: list[Record]) -> list[Record]:
    return [r for r in records if r.severity >= logging.WARNING]


def about_streams(records: list[Record]) -> list[Record]:
    return [r for r in records if "ListAndWatch" in r.message]


async def test_kubelets_hanging_up_on_stalled_streams_log_one_debug_line_each(
    records: list[Record],
    served: tuple[ResourceServer, Allocator],
    lists_built: tuple[list[int], asyncio.Event],
) -> None:
    server, allocator = served
    built, second_lists = lists_built
    address = f"unix://{server.socket_path}"
    channels = [grpc.aio.insecure_channel(address, options=CLIENT_OPTIONS) for _ in range(STREAMS)]
    try:
        calls = [
            api_pb2_grpc.DevicePluginStub(channel).ListAndWatch(api_pb2.Empty())
            for channel in channels
        ]
        # Headers come with the first list: every stream is open and has sent it.
        await asyncio.wait_for(asyncio.gather(*(call.initial_metadata() for call in calls)), 10)

        # Health events, as the reconciler publishes them, while nobody reads.
        devices = allocator.resource.devices
        for turn in range(3):
            devices = health_flip(devices, turn)
            outcome = await server.converge(allocator, devices, KUBELET)
            assert outcome.converged, outcome.describe()
        await asyncio.wait_for(second_lists.wait(), 10)
        assert not about_streams(records), "no stream has ended yet"
    finally:
        # The kubelet restarts: every connection closes at once.
        await asyncio.gather(*(channel.close() for channel in channels))

    # Until every stream has said it ended, or something was logged loud.
    await eventually(
        lambda: len(about_streams(records)) >= STREAMS or loud(records),
        what=f"each of the {STREAMS} streams to end",
        detail=lambda: records,
    )
    await server.stop(grace=0)
    assert not loud(records), loud(records)[:3]
    ended = about_streams(records)
    assert len(ended) == STREAMS, ended
    assert {r.level for r in ended} == {"DEBUG"}
    assert not any(r.traceback for r in ended)
    # Each stream was stuck writing its second list when its client went away.
    assert built[0] == 2 * STREAMS
    assert all("while a list was being sent" in r.message for r in ended), ended[:3]


class HungUpContext:
    """A stream's context once its client is gone: gRPC fails every write (ExecuteBatchError)."""

    def __init__(self) -> None:
        self.writes = 0

    async def write(self, message: object) -> None:
        self.writes += 1
        raise grpc.aio.InternalError("ExecuteBatchError")


async def test_a_list_write_that_fails_ends_the_stream_in_one_debug_line_and_stops_following(
    records: list[Record],
) -> None:
    allocator = large_resource()
    devices = LatestValue(allocator.resource.devices)
    servicer = DevicePluginServicer(ResourceState(allocator=allocator, devices=devices))
    handler = device_plugin_handler(servicer).service(
        SimpleNamespace(method=f"/{SERVICE}/ListAndWatch")
    )
    context = HungUpContext()
    # Ended as gRPC ends a call whose client cancelled: no status to send, nothing raised.
    with pytest.raises(asyncio.CancelledError):
        await handler.unary_stream(api_pb2.Empty().SerializeToString(), context)
    assert context.writes == 1
    assert await devices.drained(5.0), "the ended stream still follows the device list"
    assert not loud(records), loud(records)[:3]
    (ended,) = about_streams(records)
    assert ended.level == "DEBUG"
    assert not ended.traceback
    assert "while a list was being sent" in ended.message
