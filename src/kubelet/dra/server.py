"""The DRA kubelet plugin's two sockets, held as one actuator of the reconcile loop.

`DraPluginServer` serves `pluginregistration.Registration` on
`<registrar dir>/<driver>-reg.sock` (what the kubelet's plugin watcher dials) and the
DRAPlugin service, v1 and v1beta1, on `<plugins dir>/<driver>/dra.sock` (the endpoint
the registration names). Like `kubelet.server.ResourceServer` it holds what it has
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

gRPC unlinks the path it bound when its server stops, whoever's socket is there by
then; each socket is therefore bound under a hidden staging name and renamed into
place, so the path gRPC remembers is one nobody else uses, and `stop()` removes a
socket only while it is still the one this server bound. The rename also means
the kubelet never sees a socket that does not accept connections yet.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from pathlib import Path

import grpc
from loguru import logger

from foundation.errors import PluginError
from foundation.outcome import Change, Kind, Outcome
from kubelet import paths
from kubelet.dra.registration import (
    KubeletStatus,
    RegistrationServicer,
    StatusObserver,
    registration_handler,
)
from kubelet.dra.servicer import DraServicer, dra_handlers
from kubelet.dra.types import Preparer, plugin_socket, registration_socket
from kubelet.errors import ServeError
from kubelet.servicer import RpcObserver

_Target = tuple[str, Path, Path]  # driver, registration socket, DRAPlugin socket


def _ensure_directory(directory: Path) -> None:
    """Create `directory` (and its parents) or say in one line why it cannot be."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise ServeError(f"cannot create directory {directory}: a file is in the way") from None
    except NotADirectoryError:
        raise ServeError(
            f"cannot create directory {directory}: a file is in the way of a parent"
        ) from None
    except OSError as err:
        raise ServeError(f"cannot create directory {directory}: {err.strerror}") from None


def _staging(path: Path) -> Path:
    # Hidden (the kubelet's plugin watcher ignores dot files) and no longer than
    # the final name, so whatever fits AF_UNIX at `path` fits here too.
    return path.with_name("." + path.name[1:])


class _Socket:
    """One grpc.aio server on one unix socket, known by the identity of its file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._server: grpc.aio.Server | None = None
        self._identity: tuple[int, int] | None = None

    @property
    def running(self) -> bool:
        return self._server is not None

    def intact(self) -> bool:
        """Served, and the file at the path is still the one this server bound."""
        return self._identity is not None and paths.socket_identity(self.path) == self._identity

    async def serve(self, handlers: Sequence[grpc.GenericRpcHandler], *, timeout: float) -> None:
        """Bind, start, move into place and confirm the socket answers.

        Raises:
            ServeError: the directory, the bind or the first connection failed.
        """
        paths.check_length(self.path)
        _ensure_directory(self.path.parent)
        if not os.access(self.path.parent, os.W_OK | os.X_OK):
            # Read-only (also for root, on a read-only mount): say so in our words
            # rather than in gRPC's, which name the staging path.
            raise ServeError(f"cannot bind {self.path}: its directory is not writable")
        staging = _staging(self.path)
        if os.path.lexists(staging):  # left by a run that stopped half-way
            paths.remove_stale(staging)
        server = grpc.aio.server()
        server.add_generic_rpc_handlers(tuple(handlers))
        try:
            bound = server.add_insecure_port(paths.address(staging))
        except RuntimeError as err:
            await server.stop(None)
            detail = str(err).split(";")[0]  # gRPC appends advice on its log verbosity
            raise ServeError(f"cannot bind {self.path}: {detail}") from err
        if bound == 0:
            await server.stop(None)
            raise ServeError(f"cannot bind {self.path}")
        await server.start()
        try:
            os.replace(staging, self.path)
        except OSError as err:
            await server.stop(None)
            paths.remove_stale(staging)
            raise ServeError(f"cannot serve {self.path}: {err.strerror}") from err
        self._server = server
        self._identity = paths.socket_identity(self.path)
        try:
            async with grpc.aio.insecure_channel(
                paths.address(self.path), options=[("grpc.use_local_subchannel_pool", 1)]
            ) as channel:
                await asyncio.wait_for(channel.channel_ready(), timeout)
        except TimeoutError as err:
            await self.close(0)
            raise ServeError(f"{self.path} did not answer within {timeout}s") from err

    async def close(self, grace: float | None) -> None:
        """Stop serving; remove the socket file only while it is still ours."""
        server, intact = self._server, self.intact()
        self._server = None
        self._identity = None
        if server is not None:
            await server.stop(grace)
        if intact:
            try:
                self.path.unlink(missing_ok=True)
            except OSError as err:
                logger.warning("cannot remove {path}: {err}", path=str(self.path), err=err.strerror)


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
        self._sockets: tuple[_Socket, _Socket] | None = None
        self.status = KubeletStatus()
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
                self._sockets = (_Socket(wanted[1]), _Socket(wanted[2]))
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

    async def _serve_plugin(self, driver: str, plugin: _Socket) -> Change:
        again = plugin.running
        await plugin.close(0)
        servicer = DraServicer(self._preparer, driver=driver, observe=self._observe)
        await plugin.serve(dra_handlers(servicer), timeout=self._timeout)
        logger.bind(driver=driver).debug(
            "serving DRAPlugin for {driver} on {path}", driver=driver, path=str(plugin.path)
        )
        return Change.RECREATED if again else Change.STARTED

    async def _serve_registration(
        self, driver: str, registration: _Socket, endpoint: Path
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
        before its endpoint stops answering.
        """
        sockets, self._sockets, self._target = self._sockets, None, None
        self.status.forget()
        for socket in sockets or ():
            await socket.close(grace)
