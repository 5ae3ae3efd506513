"""One grpc.aio server per resource, on its own unix socket: an actuator.

A `ResourceServer` holds what it has actually done: the allocator its
handlers answer with, the device list it published, the identity of the
socket file it bound (a `kubelet.unix_socket.ServedSocket`, which never removes a
socket that is not its own) and the kubelet generation it registered with (see
`kubelet.kubelet_watch`). `converge()` compares that with what is wanted and
does only the difference, idempotently:

- another allocation behaviour: the server is restarted on a fresh socket;
- another device list with the same behaviour: the allocator is swapped in
  place and the list is sent on the open ListAndWatch streams (no new
  socket, no re-registration, no capacity dip);
- its socket file deleted or replaced underneath it, or a new kubelet
  generation (the kubelet restarted and forgot us): the socket is served
  afresh and registered again;
- not registered with the kubelet generation there now: register.

A failed step is reported, not hidden: the outcome says the server is not
converged and the next `converge()` picks up where this one stopped.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from loguru import logger

from foundation.errors import PluginError
from foundation.latest import LatestValue
from foundation.outcome import Change, Kind, Outcome
from kubelet.handlers import device_plugin_handler
from kubelet.paths import socket_identity
from kubelet.registration import register
from kubelet.servicer import DevicePluginServicer, PreferredPool, ResourceState, RpcObserver
from kubelet.unix_socket import ServedSocket
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
        preferred: PreferredPool | None = None,
    ) -> None:
        self.socket_path = socket_path
        self.kubelet_socket = kubelet_socket
        self._observe = observe
        self._preferred = preferred if preferred is not None else PreferredPool()
        self._timeout = timeout
        self._allocator = allocator
        self._devices: tuple[PluginDevice, ...] = allocator.resource.devices
        self._state: ResourceState | None = None
        self._socket = ServedSocket(socket_path)
        self._registration: int | None = None
        self.dialed: tuple[int, int] | None = None  # the kubelet socket last registered with
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
        return self._socket.running

    @property
    def registered(self) -> bool:
        return self._registration is not None

    @property
    def registration(self) -> int | None:
        """The kubelet generation this server registered with; None: not registered."""
        return self._registration

    def socket_intact(self) -> bool:
        """The socket file is still the one this server bound."""
        return self._socket.intact()

    def pending(
        self, allocator: Allocator, devices: tuple[PluginDevice, ...], kubelet: int | None
    ) -> bool:
        """Cheap, in memory plus one stat: does `converge()` have anything to do?"""
        held = self._allocator.resource
        return (
            not self.running
            or held.behaviour_digest != allocator.resource.behaviour_digest
            or held.devices_digest != allocator.resource.devices_digest
            or devices != self._devices
            or not self.socket_intact()
            or kubelet is None
            or self._registration != kubelet
        )

    async def converge(
        self,
        allocator: Allocator,
        devices: tuple[PluginDevice, ...],
        kubelet: int | None,
        before_first_registration: Callable[[], None] = lambda: None,
    ) -> Outcome:
        """Make this server answer with `allocator`, publish `devices`, be registered.

        `kubelet` is the kubelet generation read *before* this call (None: no
        kubelet socket now), so a kubelet that restarts while we register is
        a newer generation afterwards and is registered with again.
        `before_first_registration` runs once the socket serves and before
        this server first registers: the kubelet cannot have its list before.
        """
        changes: set[Change] = set()
        try:
            held = self._allocator.resource
            if self.running and held.behaviour_digest != allocator.resource.behaviour_digest:
                await self.stop()
                changes.add(Change.RESTARTED)
            elif held.devices_digest != allocator.resource.devices_digest:
                self._swap(allocator)
                changes.add(Change.UPDATED)
            self._allocator = allocator
            if self._needs_socket(kubelet):
                if self.running:
                    await self.stop()
                    changes.add(Change.RECREATED)
                self._devices = devices
                await self._start()
                if not changes:
                    changes.add(Change.STARTED)
            elif devices != self._devices:
                await self._publish(devices)
                if Change.UPDATED not in changes:
                    changes.add(Change.PUBLISHED)
            if kubelet is None or self._registration != kubelet:
                if self._registration is None:
                    before_first_registration()
                await self._register(kubelet)
                changes.add(Change.REGISTERED)
        except PluginError as err:
            self.last_error = str(err)
            return Outcome(Kind.RESOURCE, self.name, frozenset(changes), err)
        self.last_error = None
        return Outcome(Kind.RESOURCE, self.name, frozenset(changes))

    def _needs_socket(self, kubelet: int | None) -> bool:
        if not self.socket_intact():
            return True
        # A kubelet that restarted wipes its plugin directory and keeps no
        # connection to us: serve a fresh socket before registering again.
        return (
            self._registration is not None and kubelet is not None and kubelet != self._registration
        )

    def _swap(self, allocator: Allocator) -> None:
        """Change the allocator without touching the socket or streams."""
        self._allocator = allocator
        if self._state is not None:
            self._state.allocator = allocator

    async def _publish(self, devices: tuple[PluginDevice, ...]) -> None:
        self._devices = devices
        if self._state is not None:
            await self._state.devices.set(devices)

    async def _start(self) -> None:
        """Bind the socket and confirm it answers.

        Raises:
            ServeError: the socket could not be bound or did not answer in time.
        """
        state = ResourceState(allocator=self._allocator, devices=LatestValue(self._devices))
        servicer = DevicePluginServicer(state, observe=self._observe, preferred=self._preferred)
        handler = device_plugin_handler(servicer)
        self._registration = None
        await self._socket.serve((handler,), timeout=self._timeout, create_directory=False)
        self._state = state
        self._log.debug("serving {name} on {path}", name=self.name, path=self.socket_path)

    async def _register(self, kubelet: int | None) -> None:
        if self.kubelet_socket is None:  # registration is off
            self._registration = kubelet
            return
        self._registration = None
        # The kubelet this registration reaches, seen just before it dials: one
        # replaced before the fleet looks again is still counted as a restart.
        self.dialed = socket_identity(self.kubelet_socket)
        await register(
            kubelet_socket=self.kubelet_socket,
            endpoint=self.socket_path.name,
            resource=self.name,
            timeout=self._timeout,
        )
        # Recorded against the generation read before registering: a kubelet
        # that restarted meanwhile is a newer one and is registered with again.
        self._registration = kubelet
        self._log.info(
            "registered {resource} with the kubelet as {endpoint}",
            resource=self.name,
            endpoint=self.socket_path.name,
        )

    async def stop(self, grace: float = 1.0, *, announce_empty: bool = False) -> None:
        """Stop serving and remove the socket (only if it is still ours).

        Args:
            announce_empty: first send an empty device list, so the kubelet
                drops the resource's capacity instead of keeping it until its
                own timeout (used when a resource disappears from the plan).
        """
        state, self._state = self._state, None
        self._registration = None
        if state is not None:
            if announce_empty:
                await state.devices.set(())
            await state.devices.close()
            if announce_empty:
                # The server's stop would cut a stream that has not sent it yet.
                await state.devices.drained(grace)
        await self._socket.close(grace)
