"""The running resource servers, made to match a desired set by diff.

`apply()` is the only way servers come and go: resources that appear are
started, resources that disappear are stopped (after announcing an empty list),
a resource whose allocation behaviour changed is restarted, one whose device
list alone changed gets a new ListAndWatch message, and every other server,
socket and open stream is left exactly as it is.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from loguru import logger

from foundation.errors import PluginError
from kubelet.errors import RegistrationError
from kubelet.paths import plugin_socket, socket_identity
from kubelet.server import ResourceServer
from kubelet.servicer import RpcObserver
from resources.allocation import Allocator
from resources.model import PluginDevice


@dataclass(frozen=True)
class ResourceStatus:
    """What the inspection endpoint shows for one resource."""

    name: str
    endpoint: str
    running: bool
    registered: bool
    last_error: str | None
    devices: tuple[PluginDevice, ...]


@dataclass
class ApplyReport:
    started: list[str] = field(default_factory=list)
    stopped: list[str] = field(default_factory=list)
    restarted: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return bool(self.started or self.stopped or self.restarted or self.updated)


def same_behaviour(old: Allocator, new: Allocator) -> bool:
    """True when two allocators differ at most in their device lists.

    The resource's behaviour (sharing, strategies, roots, MPS paths...) is
    everything an allocation depends on besides the devices; options that
    only affect *other* resources do not count.
    """
    return old.resource.behaviour_digest == new.resource.behaviour_digest


class PluginFleet:
    """Owns every ResourceServer of the process."""

    def __init__(
        self,
        *,
        kubelet_socket: Path,
        register: bool = True,
        observe: RpcObserver | None = None,
        timeout: float = 5.0,
    ) -> None:
        self.kubelet_socket = kubelet_socket
        self._register = register
        self._observe = observe
        self._timeout = timeout
        self._servers: dict[str, ResourceServer] = {}
        # Identity of the kubelet socket our registrations went to: another
        # one means the kubelet restarted and forgot us.
        self._registered_with: tuple[int, int] | None = None

    @property
    def names(self) -> list[str]:
        return sorted(self._servers)

    def server(self, name: str) -> ResourceServer | None:
        return self._servers.get(name)

    def status(self) -> tuple[ResourceStatus, ...]:
        return tuple(
            ResourceStatus(
                name=server.name,
                endpoint=server.socket_path.name,
                running=server.running,
                registered=server.registered,
                last_error=server.last_error,
                devices=server.devices,
            )
            for server in (self._servers[name] for name in sorted(self._servers))
        )

    @property
    def all_registered(self) -> bool:
        return all(server.registered for server in self._servers.values())

    def _new_server(self, allocator: Allocator) -> ResourceServer:
        return ResourceServer(
            allocator=allocator,
            socket_path=plugin_socket(self.kubelet_socket, allocator.name),
            kubelet_socket=self.kubelet_socket if self._register else None,
            observe=self._observe,
            timeout=self._timeout,
        )

    async def apply(self, desired: Sequence[Allocator]) -> ApplyReport:
        """Make the running servers match `desired`, touching only what differs.

        Raises:
            ServeError: a socket could not be served.
            RegistrationError: the kubelet did not accept a registration; the
                servers keep running and the next `apply()` registers again.
        """
        report = ApplyReport()
        wanted = {allocator.name: allocator for allocator in desired}
        for name in sorted(set(self._servers) - set(wanted)):
            await self._servers.pop(name).stop(announce_empty=True)
            report.stopped.append(name)
        for name, allocator in sorted(wanted.items()):
            current = self._servers.get(name)
            if current is None:
                server = self._new_server(allocator)
                self._servers[name] = server
                await server.start()
                report.started.append(name)
            elif not same_behaviour(current.allocator, allocator):
                await current.stop()
                server = self._new_server(allocator)
                self._servers[name] = server
                await server.start()
                report.restarted.append(name)
            elif current.allocator.resource.devices_digest != allocator.resource.devices_digest:
                current.swap_allocator(allocator)
                await current.publish(allocator.resource.devices)
                report.updated.append(name)
            else:
                if not current.running:
                    await current.start()
                report.unchanged.append(name)
        await self.register_pending()
        return report

    async def register_pending(self) -> None:
        """Register every running server the kubelet does not know yet."""
        pending = [s for s in self._servers.values() if s.running and not s.registered]
        # Read before registering: a kubelet that restarts while we register
        # must look new afterwards, or its restart would pass for ours.
        identity = socket_identity(self.kubelet_socket)
        results = await asyncio.gather(*(s.register() for s in pending), return_exceptions=True)
        errors: list[str] = []
        for server, result in zip(pending, results, strict=True):
            if isinstance(result, PluginError):
                server.last_error = str(result)
                errors.append(str(result))
            elif isinstance(result, BaseException):
                raise result
            else:
                logger.info(
                    "registered {resource} with the kubelet as {endpoint}",
                    resource=server.name,
                    endpoint=server.socket_path.name,
                )
        if errors:
            raise RegistrationError("; ".join(errors))
        self._registered_with = identity

    def kubelet_replaced(self) -> bool:
        """True when the kubelet socket is a new one, or some registration is missing."""
        identity = socket_identity(self.kubelet_socket)
        if identity is None:
            return False  # nothing to register with until the kubelet is back
        return identity != self._registered_with or not self.all_registered

    async def reconnect(self) -> None:
        """After a kubelet restart: re-create every socket and register again.

        The kubelet wipes the plugin directory when it starts, so each socket
        is served afresh; device lists and allocation behaviour stay as they are.
        """
        for server in self._servers.values():
            await server.stop()
            await server.start()
        await self.register_pending()

    async def publish(self, devices: dict[str, tuple[PluginDevice, ...]]) -> None:
        """New device lists (health changes) for the named resources."""
        for name, listed in devices.items():
            server = self._servers.get(name)
            if server is not None and server.devices != listed:
                await server.publish(listed)

    async def stop_all(self, grace: float = 1.0) -> None:
        servers = list(self._servers.values())
        self._servers.clear()
        await asyncio.gather(*(s.stop(grace) for s in servers), return_exceptions=True)
