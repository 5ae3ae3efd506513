"""Fixtures for the kubelet tests: short socket dirs, a tiny fake device plugin, log capture.

The fake plugin is a real grpc.aio DevicePlugin server on a unix socket, written
here and independent of the product's servicer, so the simulator is exercised
against the wire protocol alone. Its behaviour is deliberately obvious (Allocate
echoes the IDs into an env var, unknown IDs are INVALID_ARGUMENT, the preferred
allocation is "must-include first, then available in order") so tests can state
expected results from the inputs.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc import aio
from loguru import logger

from kubelet.api import api_pb2, api_pb2_grpc
from kubelet.dra.server import DraPluginServer
from kubelet.dra.types import Preparer
from kubelet_sim import KubeletSimulator
from tests.unit.kubelet.dra_support import DRIVER, ScriptedPreparer

HEALTHY = "Healthy"
UNHEALTHY = "Unhealthy"


def make_device(device_id: str, health: str = HEALTHY, numa: int | None = None) -> api_pb2.Device:
    device = api_pb2.Device(ID=device_id, health=health)
    if numa is not None:
        device.topology.nodes.add(ID=numa)
    return device


class FakePlugin(api_pb2_grpc.DevicePluginServicer):
    """A minimal device plugin serving `<directory>/<endpoint>`."""

    def __init__(
        self,
        directory: Path,
        *,
        resource: str = "example.com/gpu",
        endpoint: str = "fake-gpu.sock",
        devices: Sequence[api_pb2.Device] = (),
        options: api_pb2.DevicePluginOptions | None = None,
    ) -> None:
        self.directory = directory
        self.resource = resource
        self.endpoint = endpoint
        self.socket_path = directory / endpoint
        self.devices = list(devices) or [make_device("dev-0"), make_device("dev-1")]
        self.options = options or api_pb2.DevicePluginOptions(
            get_preferred_allocation_available=True
        )
        self.allocate_requests: list[api_pb2.AllocateRequest] = []
        self._changed = asyncio.Event()
        self._finish = False
        self._server: aio.Server | None = None

    # -- DevicePlugin service ------------------------------------------------------

    async def GetDevicePluginOptions(self, request, context):
        return self.options

    async def ListAndWatch(self, request, context):
        while not self._finish:
            changed = self._changed
            yield api_pb2.ListAndWatchResponse(devices=self.devices)
            await changed.wait()

    async def Allocate(self, request, context):
        self.allocate_requests.append(request)
        known = {d.ID for d in self.devices}
        response = api_pb2.AllocateResponse()
        for container in request.container_requests:
            unknown = [i for i in container.devices_ids if i not in known]
            if unknown:
                await context.abort(
                    grpc.StatusCode.INVALID_ARGUMENT, f"unknown device: {unknown[0]}"
                )
            reply = response.container_responses.add()
            reply.envs["FAKE_VISIBLE_DEVICES"] = ",".join(container.devices_ids)
        return response

    async def GetPreferredAllocation(self, request, context):
        response = api_pb2.PreferredAllocationResponse()
        for container in request.container_requests:
            chosen = list(container.must_include_deviceIDs)
            chosen += [i for i in container.available_deviceIDs if i not in chosen]
            response.container_responses.add(deviceIDs=chosen[: container.allocation_size])
        return response

    async def PreStartContainer(self, request, context):
        return api_pb2.PreStartContainerResponse()

    # -- test controls ---------------------------------------------------------------

    def set_devices(self, devices: Sequence[api_pb2.Device]) -> None:
        self.devices = list(devices)
        self._signal()

    def set_health(self, device_id: str, health: str) -> None:
        self.set_devices(
            [make_device(d.ID, health) if device_id == d.ID else d for d in self.devices]
        )

    def finish_streams(self) -> None:
        """End every ListAndWatch stream normally (the generator returns)."""
        self._finish = True
        self._signal()

    def _signal(self) -> None:
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    async def start(self) -> None:
        self._finish = False
        self.socket_path.unlink(missing_ok=True)
        server = aio.server()
        api_pb2_grpc.add_DevicePluginServicer_to_server(self, server)
        server.add_insecure_port(f"unix://{self.socket_path}")
        await server.start()
        self._server = server

    async def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            await server.stop(0.2)
        self.socket_path.unlink(missing_ok=True)

    async def register(
        self,
        kubelet_socket: Path,
        *,
        version: str = "v1beta1",
        resource: str | None = None,
        endpoint: str | None = None,
    ) -> None:
        """Call Register like a plugin does; raises grpc.aio.AioRpcError on refusal."""
        request = api_pb2.RegisterRequest(
            version=version,
            endpoint=self.endpoint if endpoint is None else endpoint,
            resource_name=self.resource if resource is None else resource,
            options=self.options,
        )
        async with aio.insecure_channel(f"unix://{kubelet_socket}") as channel:
            await api_pb2_grpc.RegistrationStub(channel).Register(request, timeout=5)


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A short temp dir: AF_UNIX socket paths must stay under 108 bytes."""
    path = Path(tempfile.mkdtemp(prefix="dp-", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
async def simulator(short_dir: Path) -> AsyncIterator[KubeletSimulator]:
    async with KubeletSimulator(short_dir, dial_timeout=1.0, stop_grace=0.1) as sim:
        yield sim


PluginFactory = Callable[..., Awaitable[FakePlugin]]


@pytest.fixture
async def make_plugin(short_dir: Path) -> AsyncIterator[PluginFactory]:
    """Start fake plugins in `short_dir`; all are stopped at teardown."""
    plugins: list[FakePlugin] = []

    async def factory(**kwargs: object) -> FakePlugin:
        plugin = FakePlugin(short_dir, **kwargs)
        await plugin.start()
        plugins.append(plugin)
        return plugin

    yield factory
    for plugin in plugins:
        await plugin.stop()


@pytest.fixture
def logs() -> Iterator[list[tuple[str, str]]]:
    """(level, message) of every log record emitted during the test."""
    records: list[tuple[str, str]] = []
    handler = logger.add(
        lambda message: records.append((message.record["level"].name, message.record["message"])),
        level="DEBUG",
    )
    try:
        yield records
    finally:
        logger.remove(handler)


DraFactory = Callable[..., Awaitable[DraPluginServer]]


@pytest.fixture
async def serve_dra(short_dir: Path) -> AsyncIterator[DraFactory]:
    """Serve DRA plugins (a scripted preparer unless given) in `short_dir`; stopped at teardown.

    Sockets: `short_dir/registry/<driver>-reg.sock` and `short_dir/plugins/<driver>/dra.sock`.
    """
    servers: list[DraPluginServer] = []

    async def factory(
        preparer: Preparer | None = None, *, driver: str = DRIVER, **kwargs: Any
    ) -> DraPluginServer:
        server = DraPluginServer(preparer or ScriptedPreparer(), **kwargs)
        servers.append(server)
        outcome = await server.converge(driver, short_dir / "registry", short_dir / "plugins")
        assert outcome.converged, outcome.error
        return server

    yield factory
    for server in servers:
        await server.stop(0)


@pytest.fixture
async def dra_simulator(short_dir: Path) -> AsyncIterator[KubeletSimulator]:
    """A simulator whose DRA side watches `short_dir/registry` (where `serve_dra` registers)."""
    async with KubeletSimulator(
        short_dir / "device-plugins",
        registry_dir=short_dir / "registry",
        dial_timeout=1.0,
        stop_grace=0.1,
        registry_poll=0.02,
    ) as sim:
        yield sim
