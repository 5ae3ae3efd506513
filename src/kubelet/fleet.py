"""The running resource servers, converged towards a desired set, one resource at a time.

`converge()` is the only way servers come and go. Each resource is its own
actuator with its own outcome: a resource that appears is started, one that
disappears is stopped (after announcing an empty list), a held one keeps what
it already serves, and every other server, socket and open stream is left
exactly as it is unless its own `ResourceServer.converge()` has something to
do. One resource failing to bind or register never stops the others from
converging, and is retried on its own.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from pathlib import Path

from foundation.outcome import Outcome
from kubelet.paths import plugin_socket, socket_identity
from kubelet.server import NO_KUBELET, Identity, ResourceServer
from kubelet.servicer import RpcObserver
from resources.allocation import Allocator
from resources.model import PluginDevice

# Health (or any other view) applied to a resource's devices right before publishing.
DeviceView = Callable[[tuple[PluginDevice, ...]], tuple[PluginDevice, ...]]


def _as_is(devices: tuple[PluginDevice, ...]) -> tuple[PluginDevice, ...]:
    return devices


@dataclass(frozen=True)
class ResourceStatus:
    """What the inspection endpoint shows for one resource."""

    name: str
    endpoint: str
    running: bool
    registered: bool
    last_error: str | None
    devices: tuple[PluginDevice, ...]


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
        # Kubelet sockets seen, newest last: each one after the first is a
        # kubelet restart. Counted from every look at the socket (before each
        # registration, and whenever the directory watch says it changed), so
        # restarts too close together for either look alone are each counted.
        self.kubelet_changes = 0
        self._kubelets: deque[Identity] = deque(maxlen=64)

    @property
    def names(self) -> list[str]:
        return sorted(self._servers)

    def server(self, name: str) -> ResourceServer | None:
        return self._servers.get(name)

    def allocators(self) -> dict[str, Allocator]:
        """What each running server answers Allocate with now."""
        return {name: server.allocator for name, server in self._servers.items()}

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

    def kubelet_identity(self) -> Identity | None:
        """What a registration now would be recorded against."""
        return socket_identity(self.kubelet_socket) if self._register else NO_KUBELET

    def _targets(
        self, desired: Mapping[str, Allocator], hold: Collection[str]
    ) -> dict[str, Allocator | None]:
        """Resource name -> what its server should answer with; None: stop it.

        A held resource keeps what its server already has (if it has a server).
        """
        targets: dict[str, Allocator | None] = {}
        for name in sorted(set(self._servers) | set(desired)):
            server = self._servers.get(name)
            if name in hold:
                if server is not None:
                    targets[name] = server.allocator
            else:
                targets[name] = desired.get(name)
        return targets

    def pending(
        self,
        desired: Mapping[str, Allocator],
        view: DeviceView = _as_is,
        *,
        hold: Collection[str] = (),
    ) -> bool:
        """Whether `converge()` with the same arguments would do anything."""
        kubelet = self.kubelet_identity()
        for name, target in self._targets(desired, hold).items():
            server = self._servers.get(name)
            if target is None or server is None:
                return True
            if server.pending(target, view(target.resource.devices), kubelet):
                return True
        return False

    def observe_kubelet(self, identity: Identity | None) -> None:
        """Note the kubelet socket seen now; one not seen before (after the first) is a restart."""
        if identity is None or identity == NO_KUBELET or identity in self._kubelets:
            return
        if self._kubelets:
            self.kubelet_changes += 1
        self._kubelets.append(identity)

    def kubelet_replaced(self) -> bool:
        """The kubelet socket exists and some server is not registered with this one."""
        identity = self.kubelet_identity()
        if identity is None:
            return False  # nothing to register with until the kubelet is back
        return any(server.registration != identity for server in self._servers.values())

    def sockets_disturbed(self) -> list[str]:
        """Resources whose socket file vanished or was replaced underneath them."""
        return sorted(
            name
            for name, server in self._servers.items()
            if server.running and not server.socket_intact()
        )

    def _new_server(self, allocator: Allocator) -> ResourceServer:
        return ResourceServer(
            allocator=allocator,
            socket_path=plugin_socket(self.kubelet_socket, allocator.name),
            kubelet_socket=self.kubelet_socket if self._register else None,
            observe=self._observe,
            timeout=self._timeout,
        )

    async def converge(
        self,
        desired: Mapping[str, Allocator],
        view: DeviceView = _as_is,
        *,
        hold: Collection[str] = (),
    ) -> list[Outcome]:
        """Make the servers match `desired`, touching only what differs.

        Args:
            desired: resource name -> the allocator it should answer with.
            view: applied to each device list before it is published (health).
            hold: resources to leave as they are for now (their CDI names
                are not on disk yet, or their MPS daemon has not answered):
                a running one keeps serving what it serves, a new one is not
                started; its socket and registration are still repaired.

        Returns:
            One outcome per server converged or removed.
        """
        targets = self._targets(desired, hold)
        outcomes: list[Outcome] = []
        for name, target in targets.items():
            if target is None and name in self._servers:
                await self._servers.pop(name).stop(announce_empty=True)
                outcomes.append(Outcome.done(f"resource:{name}", "stopped"))
        # Read before registering: a kubelet that restarts while we register
        # must look new afterwards, or its restart would pass for ours.
        kubelet = self.kubelet_identity()
        self.observe_kubelet(kubelet)
        work: list[tuple[ResourceServer, Allocator]] = []
        for name, target in targets.items():
            if target is None:
                continue
            server = self._servers.get(name)
            if server is None:
                server = self._servers[name] = self._new_server(target)
            work.append((server, target))
        results = await asyncio.gather(
            *(s.converge(a, view(a.resource.devices), kubelet) for s, a in work)
        )
        if any("registered" in result.changed for result in results):
            # Registrations go to whatever kubelet is at the path when they
            # dial: one that came up during this pass (there was no socket when
            # it began, or the socket was replaced meanwhile) may have been
            # reached. Look again now, or a kubelet replaced before the next
            # look would go uncounted. (The servers stay recorded against the
            # first look, so the next pass registers with it for certain.)
            self.observe_kubelet(self.kubelet_identity())
        outcomes += results
        return outcomes

    async def stop_all(self, grace: float = 1.0) -> None:
        servers = list(self._servers.values())
        self._servers.clear()
        await asyncio.gather(*(s.stop(grace) for s in servers), return_exceptions=True)
