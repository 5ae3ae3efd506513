"""The running resource servers, converged towards a desired set, one resource at a time.

`converge()` is the only way servers come and go. Each resource is its own
actuator with its own outcome: a resource that appears is started, one that
disappears is stopped (after announcing an empty list), a held one keeps what
it already serves, and every other server, socket and open stream is left
exactly as it is unless its own `ResourceServer.converge()` has something to
do. One resource failing to bind or register never stops the others from
converging, and is retried on its own. The fleet owns the `KubeletWatch` of
its kubelet socket: servers register against the generation it reports.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from pathlib import Path

from foundation.outcome import Change, Kind, Outcome
from kubelet.kubelet_watch import KubeletWatch
from kubelet.paths import plugin_socket
from kubelet.server import ResourceServer
from kubelet.servicer import PreferredPool, RpcObserver
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
        preferred: PreferredPool | None = None,
    ) -> None:
        self.kubelet_socket = kubelet_socket
        self._register = register
        self._observe = observe
        # One pool of preferred-allocation threads for every resource's server.
        self._preferred = preferred if preferred is not None else PreferredPool()
        self._timeout = timeout
        self._servers: dict[str, ResourceServer] = {}
        self.kubelet = KubeletWatch(kubelet_socket if register else None)
        self._status: tuple[ResourceStatus, ...] | None = None

    @property
    def names(self) -> list[str]:
        return sorted(self._servers)

    def server(self, name: str) -> ResourceServer | None:
        return self._servers.get(name)

    def allocators(self) -> dict[str, Allocator]:
        """What each running server answers Allocate with now."""
        return {name: server.allocator for name, server in self._servers.items()}

    def status(self) -> tuple[ResourceStatus, ...]:
        """What each server holds; the same object until a server changes."""
        if self._status is None:
            self._status = self._take_status()
        return self._status

    def _take_status(self) -> tuple[ResourceStatus, ...]:
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

    def targets(
        self, desired: Mapping[str, Allocator], hold: Collection[str] = ()
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
        self, name: str, target: Allocator | None, view: DeviceView, kubelet: int | None
    ) -> bool:
        """Whether converging `name` towards `target` would do anything."""
        server = self._servers.get(name)
        if target is None or server is None:
            return target is not None or server is not None
        return server.pending(target, view(target.resource.devices), kubelet)

    def registered_elsewhere(self, kubelet: int | None) -> bool:
        """The kubelet socket exists and some server is not registered with its generation."""
        if kubelet is None:
            return False  # nothing to register with until the kubelet is back
        return any(server.registration != kubelet for server in self._servers.values())

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
            preferred=self._preferred,
        )

    async def converge(
        self,
        targets: Mapping[str, Allocator | None],
        view: DeviceView = _as_is,
        before_first_registration: Callable[[], None] = lambda: None,
    ) -> list[Outcome]:
        """Converge the servers named in `targets`, touching nothing else.

        Args:
            targets: resource name -> the allocator it should answer with
                (None: stop it); see `targets()`.
            view: applied to each device list before it is published (health).
            before_first_registration: called (with `status()` showing the
                new servers) before a server registers for the first time.

        Returns:
            One outcome per resource in `targets`.
        """
        if not targets:
            return []
        self._status = None
        outcomes: list[Outcome] = []
        for name, target in targets.items():
            if target is None:
                server = self._servers.pop(name, None)
                if server is not None:
                    await server.stop(announce_empty=True)
                outcomes.append(Outcome(Kind.RESOURCE, name, frozenset({Change.STOPPED})))
        # Read before registering: a kubelet that restarts while we register
        # is a newer generation afterwards, or its restart would pass for ours.
        kubelet = self.kubelet.look()
        work: list[tuple[ResourceServer, Allocator]] = []
        for name, target in targets.items():
            if target is None:
                continue
            server = self._servers.get(name)
            if server is None:
                server = self._servers[name] = self._new_server(target)
            work.append((server, target))

        def first_registration() -> None:
            self._status = None  # what the callback shows includes the new servers
            before_first_registration()

        results = await asyncio.gather(
            *(s.converge(a, view(a.resource.devices), kubelet, first_registration) for s, a in work)
        )
        self._status = None
        for server, _ in work:
            if server.dialed is not None:
                self.kubelet.saw(server.dialed)  # in the order the sockets were dialed
                server.dialed = None
        if any(Change.REGISTERED in result.changes for result in results):
            # Registrations go to whatever kubelet is at the path when they
            # dial: one that came up during this pass may have been reached.
            # Look again now, or a kubelet replaced before the next look would
            # go uncounted. (The servers stay recorded against the first look,
            # so the next pass registers with the newer one for certain.)
            self.kubelet.look()
        outcomes += results
        return outcomes

    async def stop_all(self, grace: float = 1.0) -> None:
        servers = list(self._servers.values())
        self._servers.clear()
        self._status = None
        await asyncio.gather(*(s.stop(grace) for s in servers), return_exceptions=True)
