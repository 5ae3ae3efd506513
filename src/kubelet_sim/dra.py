"""The kubelet's DRA side: its plugin watcher on plugins_registry and its DRA plugin manager.

A DRA kubelet plugin does not call the kubelet; it puts a registration socket in
plugins_registry and waits to be dialed. `DraRegistry` does what the kubelet does
with such a socket: dial it, `GetInfo`, check what the plugin says (type
`DRAPlugin`, a driver name, a DRAPlugin version the kubelet speaks, an absolute
endpoint), dial the endpoint, and answer `NotifyRegistrationStatus` (registered,
or not with the reason). Once a driver is registered it watches the driver's
device-health stream (`DRAResourceHealth.NodeWatchResources`): in the versions
the plugin lists (v1beta1 before v1alpha1), or, when it lists none, trying
v1beta1 then v1alpha1 (the first kubelets with the feature called v1alpha1
whatever the list said). The latest list is kept per driver in the snapshot;
a plugin that does not serve the stream (UNIMPLEMENTED in each version) is
noted once and left alone, and a stream that ends is opened again only by the
driver's next registration. A registration socket that disappears unregisters
its driver (and ends its health stream); one re-created at the same path (a
new inode) is dialed again, as the kubelet's watcher sees a new file. `stop()`
then `start()` is a kubelet restart: everything is forgotten and the directory
is scanned afresh.

The directory is polled (a scan of one small directory every `poll` seconds):
the simulator does not use the file-watching library, which only the reconciler
imports (an import contract), and a poll delay of tens of milliseconds is far
below what a plugin can observe.
A socket that does not accept connections yet, or a call that fails on the way,
is retried on the next scan (recorded once per reason); a plugin refused for what
it said is not retried until its socket changes.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import grpc
from grpc import aio

from kubelet.api.dra.v1 import api_pb2 as dra_v1
from kubelet.api.dra_health.v1beta1 import api_pb2 as health_v1beta1
from kubelet.api.pluginregistration.v1 import api_pb2 as registration_pb2
from kubelet.dra.types import PLUGIN_TYPE, ClaimRef
from kubelet.paths import socket_identity
from kubelet_sim.client import PluginCallError
from kubelet_sim.dra_client import (
    KUBELET_SERVICES,
    DraClient,
    RegistrationClient,
    choose_service,
    health_services,
    watch_health,
)
from kubelet_sim.ledger import Ledger
from kubelet_sim.model import DraDeviceHealth
from kubelet_sim.sockets import socket_is_live

Identity = tuple[int, int]
NOT_SERVED = "not served by the plugin"
_WORDS = {health_v1beta1.HEALTHY: "Healthy", health_v1beta1.UNHEALTHY: "Unhealthy"}


class DriverNotRegistered(LookupError):
    """A DRA call named a driver that has no live registration."""


@dataclass(slots=True)
class _Plugin:
    driver: str
    socket: Path
    client: DraClient
    health: asyncio.Task[None] | None = None  # the device-health stream's watcher

    async def close(self) -> None:
        """Stop watching its health, then hang up (no grace: at once, even on a dead peer)."""
        watcher, self.health = self.health, None
        if watcher is not None:
            watcher.cancel()
            await asyncio.wait({watcher})
        await self.client.close()


class _Refused(Exception):
    """What the plugin said is not acceptable; the reason goes back in NotifyRegistrationStatus."""


def _versions_error(driver: str, endpoint: str, versions: Sequence[str]) -> str:
    prefix = f"invalid supported gRPC versions of DRA driver plugin {driver} at endpoint {endpoint}"
    if not versions:
        return f"{prefix}: empty list of supported gRPC services (aka supported versions)"
    return (
        f"{prefix}: none of services supported by the plugin ({list(versions)}) "
        f"are supported by the kubelet ({list(KUBELET_SERVICES)})"
    )


class DraRegistry:
    """Watches one plugins_registry directory and keeps a client per registered driver."""

    def __init__(
        self,
        directory: Path,
        ledger: Ledger,
        *,
        poll: float = 0.05,
        dial_timeout: float = 3.0,
        call_timeout: float = 5.0,
    ) -> None:
        self.directory = directory
        self._ledger = ledger
        self._poll = poll
        self._dial_timeout = dial_timeout
        self._call_timeout = call_timeout
        self._seen: dict[Path, Identity] = {}  # sockets registered or refused, as found
        self._complaints: dict[Path, tuple[Identity, str]] = {}  # last retry reason recorded
        self._plugins: dict[str, _Plugin] = {}
        self._task: asyncio.Task[None] | None = None

    # -- lifecycle -----------------------------------------------------------------

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="kubelet-sim plugins_registry")

    async def stop(self) -> None:
        """Stop watching and close every plugin connection; nothing is remembered."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.wait({task})
        plugins = list(self._plugins.values())
        self._plugins.clear()
        self._seen.clear()
        self._complaints.clear()
        for plugin in plugins:
            await plugin.close()

    async def _run(self) -> None:
        while True:
            await self.scan()
            await asyncio.sleep(self._poll)

    # -- calls on a registered plugin ------------------------------------------------

    def client(self, driver: str) -> DraClient:
        plugin = self._plugins.get(driver)
        if plugin is None:
            raise DriverNotRegistered(f"DRA driver {driver} is not registered")
        return plugin.client

    async def prepare(
        self, driver: str, claims: Sequence[ClaimRef]
    ) -> dra_v1.NodePrepareResourcesResponse:
        return await self.client(driver).prepare(claims)

    async def unprepare(
        self, driver: str, claims: Sequence[ClaimRef]
    ) -> dra_v1.NodeUnprepareResourcesResponse:
        return await self.client(driver).unprepare(claims)

    # -- the watcher -----------------------------------------------------------------

    def _sockets(self) -> dict[Path, Identity]:
        """The registration sockets there now; hidden files are ignored, as the kubelet does."""
        found: dict[Path, Identity] = {}
        try:
            entries = list(os.scandir(self.directory))
        except OSError:
            return found  # not there (yet): nothing registered
        for entry in entries:
            if entry.name.startswith("."):
                continue
            with contextlib.suppress(OSError):
                if not stat.S_ISSOCK(entry.stat(follow_symlinks=False).st_mode):
                    continue
                identity = socket_identity(Path(entry.path))
                if identity is not None:
                    found[Path(entry.path)] = identity
        return found

    async def scan(self) -> None:
        """One look at the directory: unregister what went, register what came."""
        present = self._sockets()
        for path, identity in list(self._seen.items()):
            if present.get(path) != identity:
                del self._seen[path]
                gone = "removed" if path not in present else "replaced"
                await self._unregister(path, f"registration socket {path.name} {gone}")
        for path in [p for p in self._complaints if p not in present]:
            del self._complaints[path]
        for path, identity in sorted(present.items()):
            if path not in self._seen:
                await self._register(path, identity)

    async def _unregister(self, socket: Path, reason: str) -> None:
        for driver, plugin in list(self._plugins.items()):
            if plugin.socket == socket:
                del self._plugins[driver]
                self._ledger.dra_deregistered(driver, reason)
                await plugin.close()

    def _complain(self, path: Path, identity: Identity, reason: str) -> None:
        """A failure retried on the next scan: recorded once per socket and reason."""
        if self._complaints.get(path) != (identity, reason):
            self._complaints[path] = (identity, reason)
            self._ledger.dra_rejected(path.name, reason)

    async def _register(self, path: Path, identity: Identity) -> None:
        if not socket_is_live(path):
            self._complain(path, identity, f"nothing accepts connections on {path}")
            return
        try:
            async with await RegistrationClient.connect(
                path, dial_timeout=self._dial_timeout, call_timeout=self._call_timeout
            ) as registration:
                info = await registration.get_info()
                try:
                    client = await self._admit(path, info)
                except _Refused as refused:
                    self._seen[path] = identity
                    self._complaints.pop(path, None)
                    # Told first, recorded after: whoever waits on the record finds
                    # the plugin already told.
                    await registration.notify(False, str(refused))
                    self._ledger.dra_rejected(info.name or path.name, str(refused))
                    return
                try:
                    await registration.notify(True)
                except BaseException:
                    await client.close()
                    raise
        except (PluginCallError, ValueError) as exc:
            self._complain(path, identity, f"registration via {path.name} failed: {exc}")
            return
        self._seen[path] = identity
        self._complaints.pop(path, None)
        await self._accept(path, info, client)

    async def _admit(self, path: Path, info: registration_pb2.PluginInfo) -> DraClient:
        """Check the plugin's answer and dial its endpoint, as the kubelet's DRA handler does.

        Raises:
            _Refused: the reason the kubelet would give the plugin.
        """
        if info.type != PLUGIN_TYPE:
            raise _Refused(f"no handler registered for plugin type: {info.type} at socket {path}")
        if not info.name:
            raise _Refused(f"DRA driver name is empty (socket {path})")
        endpoint = info.endpoint or str(path)
        versions = tuple(info.supported_versions)
        service = choose_service(versions)
        if service is None:
            raise _Refused(_versions_error(info.name, endpoint, versions))
        if not os.path.isabs(endpoint):
            raise _Refused(f"endpoint {endpoint} of DRA driver {info.name} is not an absolute path")
        if not socket_is_live(Path(endpoint)):  # a refused dial answers at once; gRPC would wait
            raise _Refused(
                f"cannot dial DRA driver {info.name} at {endpoint}: "
                "nothing accepts connections there"
            )
        try:
            return await DraClient.connect(
                Path(endpoint),
                service=service,
                dial_timeout=self._dial_timeout,
                call_timeout=self._call_timeout,
            )
        except (PluginCallError, ValueError) as exc:
            raise _Refused(f"cannot dial DRA driver {info.name} at {endpoint}: {exc}") from None

    async def _accept(
        self, path: Path, info: registration_pb2.PluginInfo, client: DraClient
    ) -> None:
        """Record a registration and watch its health; a newer one replaces the older."""
        previous = self._plugins.get(info.name)
        plugin = self._plugins[info.name] = _Plugin(info.name, path, client)
        versions = tuple(info.supported_versions)
        registration = self._ledger.dra_registered(
            info.name,
            endpoint=str(client.socket_path),
            versions=versions,
            service=client.service,
            socket=str(path),
        )
        plugin.health = asyncio.create_task(
            self._watch_health(info.name, registration, client, versions),
            name=f"kubelet-sim health of {info.name}",
        )
        if previous is not None:
            await previous.close()

    async def _watch_health(
        self, driver: str, registration: int, client: DraClient, versions: Sequence[str]
    ) -> None:
        """Follow the driver's device-health stream until it ends or the registration goes."""
        for service in health_services(versions):
            call = watch_health(client, service)
            try:
                async for response in call:
                    devices = tuple(_device_health(d) for d in response.devices)
                    self._ledger.dra_health_received(
                        driver, registration, service=service, devices=devices
                    )
            except aio.AioRpcError as exc:
                if exc.code() is grpc.StatusCode.UNIMPLEMENTED:
                    continue  # not this version: the next one, if any
                note = f"{service} failed: {exc.code().name}: {exc.details()}"
            else:
                note = f"{service} ended by the plugin"
            finally:
                call.cancel()
            self._ledger.dra_health_ended(driver, registration, note)
            return
        self._ledger.dra_health_ended(driver, registration, NOT_SERVED)


def _device_health(device: health_v1beta1.DeviceHealth) -> DraDeviceHealth:
    return DraDeviceHealth(
        pool=device.device.pool_name,
        device=device.device.device_name,
        health=_WORDS.get(device.health, "Unknown"),
        message=device.message,
        last_updated=device.last_updated_time,
        timeout=device.health_check_timeout_seconds,
    )
