"""The DRA kubelet plugin's two sockets, held as one actuator of the reconcile loop.

`DraPluginServer` serves `pluginregistration.Registration` on
`<registrar dir>/<driver>-reg.sock` (what the kubelet's plugin watcher dials) and the
DRAPlugin service, v1 and v1beta1, on `<plugins dir>/<driver>/dra.sock` (the endpoint
the registration names), with the device-health stream (`DRAResourceHealth`, v1beta1
and v1alpha1, `kubelet.dra.health_stream`) beside it. The server owns the stream's
`HealthFeed` (`health`): the reconcile loop publishes each new list there, and it
outlives a socket served afresh. Like `kubelet.server.ResourceServer` it holds what it has
actually done, the identity (inode, change time) of each socket file it bound, and
`converge()` does only the difference:

- nothing served yet, or another driver or directory wanted: serve both;
- the DRAPlugin socket deleted or replaced underneath: serve it afresh, and the
  registration socket too, so the kubelet registers the new endpoint again;
- the registration socket deleted or replaced: serve it afresh (the kubelet's
  watcher sees it appear and dials it again).

Nothing here waits for the kubelet: registration is the kubelet's move, and what
it said is kept in `status` (a refusal is retried by the kubelet, not by us).
A failed step (a path too long for AF_UNIX, a directory that cannot be created or
written, a file in the way) is a not-converged `Outcome` with a one-line error;
the next `converge()` picks up where this one stopped.

Each socket is a `kubelet.unix_socket.ServedSocket`: bound under a hidden name and
renamed into place, so stopping never removes a socket that is not this server's.
"""

from __future__ import annotations

from pathlib import Path

from loguru import logger

from foundation.errors import PluginError
from foundation.outcome import Change, Kind, Outcome
from kubelet.dra.health_stream import HealthFeed, HealthStreamServicer, health_handlers
from kubelet.dra.registration import (
    KubeletStatus,
    RegistrationServicer,
    StatusObserver,
    registration_handler,
)
from kubelet.dra.servicer import DraServicer, dra_handlers
from kubelet.dra.types import Preparer, plugin_socket, registration_socket
from kubelet.servicer import RpcObserver
from kubelet.unix_socket import ServedSocket

_Target = tuple[str, Path, Path]  # driver, registration socket, DRAPlugin socket


class DraPluginServer:
    """Serves one DRA driver's registration and DRAPlugin sockets; owns them while running."""

    def __init__(
        self,
        preparer: Preparer,
        *,
        timeout: float = 5.0,
        observe: RpcObserver | None = None,
        on_status: StatusObserver | None = None,
    ) -> None:
        self._preparer = preparer
        self._timeout = timeout
        self._observe = observe
        self._on_status = on_status
        self._target: _Target | None = None
        # (registration, DRAPlugin), set together with the target.
        self._sockets: tuple[ServedSocket, ServedSocket] | None = None
        self.status = KubeletStatus()
        self.health = HealthFeed()  # what the device-health stream sends
        self.last_error: str | None = None

    @property
    def driver(self) -> str | None:
        return None if self._target is None else self._target[0]

    @property
    def registration_socket(self) -> Path | None:
        return None if self._target is None else self._target[1]

    @property
    def plugin_socket(self) -> Path | None:
        return None if self._target is None else self._target[2]

    @property
    def running(self) -> bool:
        return self._sockets is not None and all(s.running for s in self._sockets)

    @staticmethod
    def _wanted(driver: str, registrar_dir: Path, plugins_dir: Path) -> _Target:
        return (
            driver,
            registration_socket(registrar_dir, driver).absolute(),
            plugin_socket(plugins_dir, driver).absolute(),
        )

    def pending(self, driver: str, registrar_dir: Path, plugins_dir: Path) -> bool:
        """Cheap, in memory plus two stats: does `converge()` have anything to do?"""
        return (
            self._target != self._wanted(driver, registrar_dir, plugins_dir)
            or self._sockets is None
            or not all(s.intact() for s in self._sockets)
        )

    def disturbed(self) -> bool:
        """A socket this server serves was deleted or replaced underneath it (two stats)."""
        return self._sockets is not None and any(
            s.running and not s.intact() for s in self._sockets
        )

    async def converge(self, driver: str, registrar_dir: Path, plugins_dir: Path) -> Outcome:
        """Serve `driver`'s two sockets in these directories, repairing what is gone."""
        changes: set[Change] = set()
        wanted = self._wanted(driver, registrar_dir, plugins_dir)
        try:
            if self._target is not None and self._target != wanted:
                served = self._sockets is not None and any(s.running for s in self._sockets)
                await self.stop()
                if served:
                    changes.add(Change.RESTARTED)
            if self._sockets is None:
                self._target = wanted
                self._sockets = (ServedSocket(wanted[1]), ServedSocket(wanted[2]))
            registration, plugin = self._sockets
            fresh_plugin = not plugin.intact()
            if fresh_plugin:
                changes.add(await self._serve_plugin(driver, plugin))
            if fresh_plugin or not registration.intact():
                changes.add(await self._serve_registration(driver, registration, plugin.path))
        except PluginError as err:
            self.last_error = str(err)
            return Outcome(Kind.DRA, driver, frozenset(changes), err)
        self.last_error = None
        if Change.RESTARTED in changes:
            changes.discard(Change.STARTED)
        return Outcome(Kind.DRA, driver, frozenset(changes))

    async def _serve_plugin(self, driver: str, plugin: ServedSocket) -> Change:
        again = plugin.running
        await plugin.close(0)
        servicer = DraServicer(self._preparer, driver=driver, observe=self._observe)
        watched = HealthStreamServicer(self.health, driver=driver)
        await plugin.serve(
            (*dra_handlers(servicer), *health_handlers(watched)), timeout=self._timeout
        )
        logger.bind(driver=driver).debug(
            "serving DRAPlugin for {driver} on {path}", driver=driver, path=str(plugin.path)
        )
        return Change.RECREATED if again else Change.STARTED

    async def _serve_registration(
        self, driver: str, registration: ServedSocket, endpoint: Path
    ) -> Change:
        again = registration.running
        await registration.close(0)
        self.status.forget()
        servicer = RegistrationServicer(
            driver=driver, endpoint=endpoint, status=self.status, on_status=self._on_status
        )
        await registration.serve((registration_handler(servicer),), timeout=self._timeout)
        logger.bind(driver=driver).info(
            "DRA driver {driver} waits for the kubelet on {path}",
            driver=driver,
            path=str(registration.path),
        )
        return Change.RECREATED if again else Change.STARTED

    async def stop(self, grace: float = 1.0) -> None:
        """Stop serving and remove both sockets (each only if it is still ours).

        The registration socket goes first, so the kubelet unregisters the driver
        before its endpoint stops answering. The health streams end first of all,
        so they do not hold the socket's grace period.
        """
        sockets, self._sockets, self._target = self._sockets, None, None
        self.status.forget()
        await self.health.end()
        for socket in sockets or ():
            await socket.close(grace)
