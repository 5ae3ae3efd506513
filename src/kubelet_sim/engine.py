"""KubeletSimulator: the kubelet's device manager, reduced to what a device plugin sees.

It serves `v1beta1.Registration/Register` on `<dir>/kubelet.sock` and, for every
registration it accepts, behaves like the kubelet: it dials `<dir>/<endpoint>`,
asks for the plugin's options, and keeps a ListAndWatch stream open, remembering
the latest device list per resource. A new registration for the same resource
replaces the old connection. `restart()` reproduces a kubelet restart as a plugin
observes it: the registration server goes away, every socket in the directory is
deleted, and a fresh `kubelet.sock` appears (a new inode, so directory watchers see
a create event).

Given a plugins_registry directory (`registry_dir`), it also plays the kubelet's
DRA side (`kubelet_sim.dra`): it dials each registration socket there,
registers DRA drivers, watches their device-health streams and makes
NodePrepareResources/NodeUnprepareResources calls on request; `restart()`
forgets them and scans the directory afresh, as a kubelet that starts does.
Without one, the DRA side is off.

Everything observable is recorded in a `Ledger` (counters, event log, latest
devices) and exposed as immutable snapshots with event-driven waits, so tests and
the demo assert on facts ("registered once, no stream gap") instead of sleeping.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import NoReturn, Self

import grpc
from grpc import aio

from kubelet.api import api_pb2, api_pb2_grpc
from kubelet.api.dra.v1 import api_pb2 as dra_v1
from kubelet.dra.types import ClaimRef
from kubelet_sim.client import PluginCallError, PluginClient, unix_target
from kubelet_sim.dra import DraRegistry, DriverNotRegistered
from kubelet_sim.ledger import Ledger, Predicate
from kubelet_sim.model import (
    DeviceInfo,
    DraDeviceHealth,
    DraDriverView,
    Event,
    PluginOptions,
    ResourceView,
    Snapshot,
)
from kubelet_sim.snapshot_file import snapshot_path, write_snapshot
from kubelet_sim.sockets import remove_sockets, socket_is_live
from kubelet_sim.streams import Registration, close_stream, teardown, watch
from kubelet_sim.validation import registration_error

KUBELET_SOCKET = "kubelet.sock"
DEFAULT_DIRECTORY = Path("/var/lib/kubelet/device-plugins")

DevicesPredicate = Callable[[tuple[DeviceInfo, ...]], bool]
_RegisterContext = aio.ServicerContext[api_pb2.RegisterRequest, api_pb2.Empty]


class ResourceNotRegistered(LookupError):
    """A client call named a resource that has no live registration."""


class SimulatorError(RuntimeError):
    """The simulator could not start serving (socket in use, path too long, ...)."""


class _Registrar(api_pb2_grpc.RegistrationServicer):
    def __init__(self, simulator: KubeletSimulator) -> None:
        self._simulator = simulator

    async def Register(
        self, request: api_pb2.RegisterRequest, context: _RegisterContext
    ) -> api_pb2.Empty:
        return await self._simulator._register(request, context)


class KubeletSimulator:
    """Plays the kubelet for device plugins in one device-plugin directory."""

    def __init__(
        self,
        directory: Path | str = DEFAULT_DIRECTORY,
        *,
        dial_timeout: float = 3.0,
        call_timeout: float = 5.0,
        stop_grace: float = 0.5,
        write_snapshot_file: bool = True,
        on_event: Callable[[Event], None] | None = None,
        registry_dir: Path | str | None = None,
        registry_poll: float = 0.05,
    ) -> None:
        self.directory = Path(directory).absolute()
        self.registry_directory = None if registry_dir is None else Path(registry_dir).absolute()
        self.socket_path = self.directory / KUBELET_SOCKET
        self.snapshot_file = snapshot_path(self.directory) if write_snapshot_file else None
        self.snapshot_write_error: OSError | None = None
        self._dial_timeout = dial_timeout
        self._call_timeout = call_timeout
        self._stop_grace = stop_grace
        self._ledger = Ledger(
            str(self.directory),
            registry="" if self.registry_directory is None else str(self.registry_directory),
            on_event=on_event,
            on_change=self._write_snapshot if self.snapshot_file is not None else None,
        )
        self._server: aio.Server | None = None
        self._socket_inode: int | None = None
        self._registrations: dict[str, Registration] = {}
        self._next_registration = 0
        self._dra = (
            None
            if self.registry_directory is None
            else DraRegistry(
                self.registry_directory,
                self._ledger,
                poll=registry_poll,
                dial_timeout=dial_timeout,
                call_timeout=call_timeout,
            )
        )

    # -- lifecycle -------------------------------------------------------------

    async def start(self) -> None:
        if self._server is not None:
            raise SimulatorError("kubelet simulator already started")
        self.directory.mkdir(parents=True, exist_ok=True)
        await self._serve()
        if self._dra is not None:
            self._dra.start()

    async def stop(self) -> None:
        """Stop serving, close every plugin stream and remove kubelet.sock."""
        if self._server is None:
            return
        if self._dra is not None:
            await self._dra.stop()
        await self._stop_server()
        await self._drop_all("kubelet simulator stopped")
        self._ledger.stopped()
        if self.snapshot_file is not None:
            self.snapshot_file.unlink(missing_ok=True)

    async def restart(self) -> None:
        """Simulate a kubelet restart: wipe every socket, then serve a new kubelet.sock.

        The DRA side forgets every driver and scans plugins_registry afresh (its
        sockets are the plugins', so they stay): each plugin is dialed again.
        """
        if self._server is None:
            raise SimulatorError("kubelet simulator is not running")
        if self._dra is not None:
            await self._dra.stop()
        await self._stop_server()
        await self._drop_all("kubelet restarted")
        remove_sockets(self.directory)
        self._ledger.restarted()
        await self._serve()
        if self._dra is not None:
            self._dra.start()

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    # -- observing ---------------------------------------------------------------

    def snapshot(self) -> Snapshot:
        return self._ledger.snapshot()

    # A bounded default keeps a forgotten condition from hanging a test, so these
    # waits take `timeout` themselves rather than relying on an outer asyncio.timeout.
    async def wait_for(
        self,
        predicate: Predicate,
        *,
        timeout: float = 5.0,
    ) -> Snapshot:
        """Wait until `predicate(snapshot)` holds; TimeoutError after `timeout` seconds."""
        return await self._ledger.wait_for(predicate, within=timeout)

    async def wait_registered(
        self,
        resource: str,
        *,
        min_registrations: int = 1,
        timeout: float = 5.0,
    ) -> ResourceView:
        """Wait for a live registration of `resource` (and at least that many in total)."""

        def ready(snap: Snapshot) -> bool:
            view = snap.resource(resource)
            return (
                view is not None
                and view.registered
                and view.counters.registrations >= min_registrations
            )

        snap = await self.wait_for(ready, timeout=timeout)
        return _view(snap, resource)

    async def wait_devices(
        self,
        resource: str,
        predicate: DevicesPredicate | None = None,
        *,
        timeout: float = 5.0,
    ) -> ResourceView:
        """Wait until the latest list of a registered `resource` satisfies `predicate`.

        The default predicate is "at least one device".
        """
        check: DevicesPredicate = predicate if predicate is not None else bool

        def ready(snap: Snapshot) -> bool:
            view = snap.resource(resource)
            return view is not None and view.registered and check(view.devices)

        snap = await self.wait_for(ready, timeout=timeout)
        return _view(snap, resource)

    # -- calls a kubelet makes on a registered plugin ------------------------------

    async def options(self, resource: str) -> api_pb2.DevicePluginOptions:
        return await self._client(resource).options()

    async def allocate(
        self, resource: str, containers: Sequence[Sequence[str]]
    ) -> api_pb2.AllocateResponse:
        """One Allocate call with one container request per inner sequence of IDs."""
        return await self._client(resource).allocate(containers)

    async def preferred(
        self,
        resource: str,
        available: Sequence[str],
        must_include: Sequence[str],
        size: int,
    ) -> api_pb2.PreferredAllocationResponse:
        return await self._client(resource).preferred(
            available=available, must_include=must_include, size=size
        )

    async def pre_start(
        self, resource: str, device_ids: Sequence[str]
    ) -> api_pb2.PreStartContainerResponse:
        return await self._client(resource).pre_start(device_ids)

    # -- the DRA side ------------------------------------------------------------------

    async def wait_dra_registered(
        self, driver: str, *, min_registrations: int = 1, timeout: float = 5.0
    ) -> DraDriverView:
        """Wait for a live registration of DRA `driver` (and at least that many in total)."""

        def ready(snap: Snapshot) -> bool:
            view = snap.dra_driver(driver)
            return view is not None and view.registered and view.registrations >= min_registrations

        snap = await self.wait_for(ready, timeout=timeout)
        view = snap.dra_driver(driver)
        assert view is not None
        return view

    async def wait_dra_health(
        self, driver: str, device: str, health: str, *, timeout: float = 5.0
    ) -> DraDeviceHealth:
        """Wait until `driver`'s health stream says `health` (`Unhealthy`, ...) of `device`."""

        def said(snap: Snapshot) -> DraDeviceHealth | None:
            view = snap.dra_driver(driver)
            found = None if view is None else view.device_health(device)
            return found if found is not None and found.health == health else None

        found = said(await self.wait_for(lambda snap: said(snap) is not None, timeout=timeout))
        assert found is not None
        return found

    async def prepare(
        self, driver: str, claims: Sequence[ClaimRef]
    ) -> dra_v1.NodePrepareResourcesResponse:
        """NodePrepareResources on `driver`'s plugin, in the version chosen at registration."""
        return await self._dra_side().prepare(driver, claims)

    async def unprepare(
        self, driver: str, claims: Sequence[ClaimRef]
    ) -> dra_v1.NodeUnprepareResourcesResponse:
        return await self._dra_side().unprepare(driver, claims)

    def _dra_side(self) -> DraRegistry:
        if self._dra is None:
            raise DriverNotRegistered("the simulator watches no plugins_registry directory")
        return self._dra

    # -- registration server ---------------------------------------------------------

    async def _serve(self) -> None:
        unix_target(self.socket_path)  # the final path must fit in AF_UNIX, too
        if socket_is_live(self.socket_path):
            raise SimulatorError(f"another kubelet is serving {self.socket_path}")
        self.socket_path.unlink(missing_ok=True)
        # A real kubelet's socket appears already listening (Go's net.Listen
        # binds and listens in one call). gRPC binds at add_insecure_port but
        # listens only once started, so the server starts on a hidden name and
        # is renamed into place: a plugin never finds a kubelet.sock that
        # refuses connections, which no kubelet shows.
        staging = self.socket_path.with_name(f".{self.socket_path.name}.starting")
        staging.unlink(missing_ok=True)
        server = aio.server()
        api_pb2_grpc.add_RegistrationServicer_to_server(_Registrar(self), server)
        try:
            bound = server.add_insecure_port(unix_target(staging))
        except RuntimeError as exc:
            raise SimulatorError(f"cannot bind {self.socket_path}: {exc}") from exc
        if bound == 0:
            raise SimulatorError(f"cannot bind {self.socket_path}")
        try:
            await server.start()
            os.rename(staging, self.socket_path)
        except BaseException:
            await server.stop(None)
            staging.unlink(missing_ok=True)
            raise
        self._server = server
        self._socket_inode = self.socket_path.stat().st_ino
        self._ledger.serving(str(self.socket_path))

    async def _stop_server(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            await server.stop(self._stop_grace)
        with contextlib.suppress(FileNotFoundError):
            # Only our own socket: something else may have bound the path since.
            if self.socket_path.stat().st_ino == self._socket_inode:
                self.socket_path.unlink()
        self._socket_inode = None

    async def _register(
        self, request: api_pb2.RegisterRequest, context: _RegisterContext
    ) -> api_pb2.Empty:
        resource = request.resource_name
        reason = registration_error(
            version=request.version, resource_name=resource, endpoint=request.endpoint
        )
        if reason is not None:
            await self._reject(context, resource, reason)
        connected = await self._connect(request.endpoint)
        if isinstance(connected, str):
            await self._reject(context, resource, connected)
        client, options = connected
        self._next_registration += 1
        registration = Registration(self._next_registration, resource, client)
        previous = self._registrations.pop(resource, None)
        if previous is not None:
            close_stream(previous, self._ledger, "replaced by a new registration")
        self._registrations[resource] = registration
        self._ledger.registered(
            resource,
            endpoint=request.endpoint,
            options=options,
            registration=registration.id,
        )
        registration.task = asyncio.create_task(
            watch(registration, self._ledger), name=f"kubelet-sim ListAndWatch {resource}"
        )
        if previous is not None:
            await teardown(previous)
        return api_pb2.Empty()

    async def _reject(self, context: _RegisterContext, resource: str, reason: str) -> NoReturn:
        self._ledger.rejected(resource, reason)
        # A kubelet answers with a plain error, which gRPC reports as UNKNOWN.
        await context.abort(grpc.StatusCode.UNKNOWN, reason)

    async def _connect(self, endpoint: str) -> tuple[PluginClient, PluginOptions] | str:
        """Dial the plugin and fetch its options, or say why that failed."""
        path = self.directory / endpoint
        try:
            client = await PluginClient.connect(
                path, dial_timeout=self._dial_timeout, call_timeout=self._call_timeout
            )
        except (PluginCallError, ValueError) as exc:
            return f"failed to dial device plugin: {exc}"
        try:
            raw = await client.options()
        except PluginCallError as exc:
            await client.close()
            return f"failed to get device plugin options: {exc}"
        except BaseException:
            # Cancelled (the server is stopping): do not leak the channel.
            await client.close()
            raise
        options = PluginOptions(
            pre_start_required=raw.pre_start_required,
            get_preferred_allocation_available=raw.get_preferred_allocation_available,
        )
        return client, options

    # -- streams -------------------------------------------------------------------

    async def _drop_all(self, reason: str) -> None:
        registrations = list(self._registrations.values())
        self._registrations.clear()
        for registration in registrations:
            close_stream(registration, self._ledger, reason)
        for registration in registrations:
            await teardown(registration)

    def _client(self, resource: str) -> PluginClient:
        registration = self._registrations.get(resource)
        if registration is None:
            raise ResourceNotRegistered(f"resource {resource!r} is not registered")
        return registration.client

    def _write_snapshot(self, snapshot: Snapshot) -> None:
        if self.snapshot_file is None:
            return
        try:
            write_snapshot(self.snapshot_file, snapshot)
        except OSError as exc:
            # The in-memory state stays authoritative; the file is a convenience.
            self.snapshot_write_error = exc


def _view(snap: Snapshot, resource: str) -> ResourceView:
    view = snap.resource(resource)
    assert view is not None
    return view
