"""The device manager's side of the DevicePlugin service: an async client on one socket.

Both the simulator (which keeps one client per registered resource, as the kubelet
keeps one connection per plugin) and the one-shot CLI commands use it. RPC failures
are re-raised as `PluginCallError` carrying the gRPC status code and details
unchanged, because that is exactly what callers assert on (for example
INVALID_ARGUMENT with the plugin's message for a bad Allocate).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Self

import grpc
from grpc import aio

from kubelet.api import api_pb2, api_pb2_grpc

# Longest path an AF_UNIX socket address can hold on Linux (108 bytes incl. NUL).
MAX_UNIX_PATH = 107


class PluginCallError(Exception):
    """A DevicePlugin RPC failed; `code` and `details` are the plugin's status."""

    def __init__(self, method: str, code: grpc.StatusCode, details: str) -> None:
        super().__init__(f"{method}: {code.name}: {details}")
        self.method = method
        self.code = code
        self.details = details


def unix_target(path: Path) -> str:
    """gRPC target for a unix socket: `unix://` plus the absolute path (three slashes)."""
    absolute = path.absolute()
    if len(str(absolute).encode()) > MAX_UNIX_PATH:
        raise ValueError(f"unix socket path too long for AF_UNIX: {absolute}")
    return f"unix://{absolute}"


async def dial(socket_path: Path, timeout: float) -> aio.Channel:
    """A ready channel to `socket_path`, or PluginCallError(UNAVAILABLE) after `timeout`."""
    # A private subchannel pool: a socket re-created at the same path must not
    # inherit the reconnect backoff of the channel to its predecessor.
    channel = aio.insecure_channel(
        unix_target(socket_path), options=[("grpc.use_local_subchannel_pool", 1)]
    )
    try:
        async with asyncio.timeout(timeout):
            await channel.channel_ready()
    except TimeoutError:
        await channel.close()
        raise PluginCallError(
            "dial", grpc.StatusCode.UNAVAILABLE, f"cannot connect to {socket_path}"
        ) from None
    except BaseException:
        await channel.close()
        raise
    return channel


def call_error(method: str, exc: aio.AioRpcError) -> PluginCallError:
    """A failed call as the kubelet sees it: the gRPC status, unchanged."""
    return PluginCallError(method, exc.code(), exc.details() or "")


class ChannelClient:
    """One channel to a plugin socket, closed with the client (an async context manager)."""

    def __init__(self, socket_path: Path, channel: aio.Channel, call_timeout: float) -> None:
        self.socket_path = socket_path
        self.timeout = call_timeout
        self._channel = channel

    @property
    def channel(self) -> aio.Channel:
        return self._channel

    async def close(self) -> None:
        await self._channel.close(grace=None)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()


class PluginClient(ChannelClient):
    """One channel to a device plugin's socket, with the calls the kubelet makes on it."""

    def __init__(self, socket_path: Path, channel: aio.Channel, *, call_timeout: float) -> None:
        super().__init__(socket_path, channel, call_timeout)
        self._stub = api_pb2_grpc.DevicePluginStub(channel)

    @classmethod
    async def connect(
        cls, socket_path: Path, *, dial_timeout: float = 5.0, call_timeout: float = 5.0
    ) -> PluginClient:
        """Dial and wait until the channel is ready, like the kubelet's blocking dial.

        `call_timeout` is the deadline of each unary call made through the client.
        """
        return cls(socket_path, await dial(socket_path, dial_timeout), call_timeout=call_timeout)

    async def options(self) -> api_pb2.DevicePluginOptions:
        try:
            return await self._stub.GetDevicePluginOptions(api_pb2.Empty(), timeout=self.timeout)
        except aio.AioRpcError as exc:
            raise call_error("GetDevicePluginOptions", exc) from exc

    async def allocate(self, containers: Sequence[Sequence[str]]) -> api_pb2.AllocateResponse:
        request = api_pb2.AllocateRequest(
            container_requests=[
                api_pb2.ContainerAllocateRequest(devices_ids=list(ids)) for ids in containers
            ]
        )
        try:
            return await self._stub.Allocate(request, timeout=self.timeout)
        except aio.AioRpcError as exc:
            raise call_error("Allocate", exc) from exc

    async def preferred(
        self, *, available: Sequence[str], must_include: Sequence[str], size: int
    ) -> api_pb2.PreferredAllocationResponse:
        request = api_pb2.PreferredAllocationRequest(
            container_requests=[
                api_pb2.ContainerPreferredAllocationRequest(
                    available_deviceIDs=list(available),
                    must_include_deviceIDs=list(must_include),
                    allocation_size=size,
                )
            ]
        )
        try:
            return await self._stub.GetPreferredAllocation(request, timeout=self.timeout)
        except aio.AioRpcError as exc:
            raise call_error("GetPreferredAllocation", exc) from exc

    async def pre_start(self, device_ids: Sequence[str]) -> api_pb2.PreStartContainerResponse:
        request = api_pb2.PreStartContainerRequest(devices_ids=list(device_ids))
        try:
            return await self._stub.PreStartContainer(request, timeout=self.timeout)
        except aio.AioRpcError as exc:
            raise call_error("PreStartContainer", exc) from exc

    def list_and_watch(self) -> aio.UnaryStreamCall[api_pb2.Empty, api_pb2.ListAndWatchResponse]:
        """Open the device stream; it has no deadline, like the kubelet's."""
        return self._stub.ListAndWatch(api_pb2.Empty())
