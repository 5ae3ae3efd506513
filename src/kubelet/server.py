"""One grpc.aio server per resource, on its own unix socket.

Lifecycle: `start()` removes a stale socket, binds, starts and self-dials (so
the kubelet is never told about a socket that does not answer); `register()`
tells the kubelet; `stop()` ends every ListAndWatch stream, stops the server
with a short grace and removes the socket. A kubelet restart is handled by
`stop()` + `start()` + `register()` with the same device list: nothing above
this layer is rebuilt.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import grpc
from loguru import logger

from foundation.latest import LatestValue
from kubelet import paths
from kubelet.errors import ServeError
from kubelet.handlers import device_plugin_handler
from kubelet.registration import register
from kubelet.servicer import DevicePluginServicer, ResourceState, RpcObserver
from resources.allocation import Allocator
from resources.model import PluginDevice


class ResourceServer:
    """Serves one resource; owns its socket file while running."""

    def __init__(
        self,
        *,
        allocator: Allocator,
        socket_path: Path,
        kubelet_socket: Path | None,
        observe: RpcObserver | None = None,
        timeout: float = 5.0,
    ) -> None:
        self.socket_path = socket_path
        self.kubelet_socket = kubelet_socket
        self._observe = observe
        self._timeout = timeout
        self._allocator = allocator
        self._devices: tuple[PluginDevice, ...] = allocator.resource.devices
        self._state: ResourceState | None = None
        self._server: grpc.aio.Server | None = None
        self.registered = False
        self.last_error: str | None = None
        self._log = logger.bind(resource=allocator.name)

    @property
    def name(self) -> str:
        return self._allocator.name

    @property
    def allocator(self) -> Allocator:
        return self._allocator

    @property
    def devices(self) -> tuple[PluginDevice, ...]:
        return self._devices

    @property
    def running(self) -> bool:
        return self._server is not None

    async def start(self) -> None:
        """Bind the socket and confirm it answers.

        Raises:
            ServeError: the socket could not be bound or did not answer in time.
        """
        if self._server is not None:
            return
        paths.check_length(self.socket_path)
        paths.remove_stale(self.socket_path)
        state = ResourceState(allocator=self._allocator, devices=LatestValue(self._devices))
        server = grpc.aio.server()
        server.add_generic_rpc_handlers(
            (device_plugin_handler(DevicePluginServicer(state, observe=self._observe)),)
        )
        target = paths.address(self.socket_path)
        try:
            server.add_insecure_port(target)
        except RuntimeError as err:
            raise ServeError(f"cannot bind {self.socket_path}: {err}") from err
        await server.start()
        self._server, self._state = server, state
        try:
            async with grpc.aio.insecure_channel(
                target, options=[("grpc.use_local_subchannel_pool", 1)]
            ) as channel:
                await asyncio.wait_for(channel.channel_ready(), self._timeout)
        except TimeoutError as err:
            await self.stop()
            raise ServeError(f"{self.socket_path} did not answer within {self._timeout}s") from err
        self._log.debug("serving {name} on {path}", name=self.name, path=self.socket_path)

    async def register(self) -> None:
        """Register with the kubelet; skipped when no kubelet socket is configured."""
        if self.kubelet_socket is None:
            self._log.info("no kubelet socket configured: not registering {name}", name=self.name)
            self.registered = True
            return
        self.registered = False
        await register(
            kubelet_socket=self.kubelet_socket,
            endpoint=self.socket_path.name,
            resource=self.name,
            timeout=self._timeout,
        )
        self.registered = True
        self.last_error = None

    async def publish(self, devices: tuple[PluginDevice, ...]) -> None:
        """Send a new device list on every open ListAndWatch stream."""
        self._devices = devices
        if self._state is not None:
            await self._state.devices.set(devices)

    def swap_allocator(self, allocator: Allocator) -> None:
        """Change allocation behaviour without touching the socket or streams."""
        self._allocator = allocator
        if self._state is not None:
            self._state.allocator = allocator

    async def stop(self, grace: float = 1.0, *, announce_empty: bool = False) -> None:
        """Stop serving and remove the socket.

        Args:
            announce_empty: first send an empty device list, so the kubelet
                drops the resource's capacity instead of keeping it until its
                own timeout (used when a resource disappears from the plan).
        """
        server, state = self._server, self._state
        self._server = self._state = None
        self.registered = False
        if state is not None:
            if announce_empty:
                await state.devices.set(())
            await state.devices.close()
        if server is not None:
            await server.stop(grace)
        self.socket_path.unlink(missing_ok=True)
