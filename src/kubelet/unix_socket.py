"""One grpc.aio server on one unix socket, bound so that stopping it never removes another's.

gRPC unlinks the path it bound when its server stops, whoever's socket is
there by then: during a rolling update the new pod's socket, or the one a
restarted kubelet's plugin watcher just dialled. So a socket is bound under a
hidden staging name (no longer than the final one, so whatever fits AF_UNIX
there fits here) and renamed into place once serving: the path gRPC remembers
is one nobody else uses, the kubelet never sees a socket that does not accept
connections yet, and `close()` removes the socket only while the file at the
path is still the one this server bound. Used by the device-plugin servers
and the DRA plugin alike.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from pathlib import Path

import grpc
from loguru import logger

from kubelet import paths
from kubelet.errors import ServeError


def ensure_directory(directory: Path) -> None:
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


class ServedSocket:
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

    async def serve(
        self,
        handlers: Sequence[grpc.GenericRpcHandler],
        *,
        timeout: float,
        create_directory: bool = True,
    ) -> None:
        """Bind, start, move into place and confirm the socket answers.

        `create_directory=False`: the directory is the kubelet's to create
        (the device-plugin directory); a missing one is a failed bind.

        Raises:
            ServeError: the directory, the bind or the first connection failed.
        """
        paths.check_length(self.path)
        if create_directory:
            ensure_directory(self.path.parent)
        if self.path.parent.is_dir() and not os.access(self.path.parent, os.W_OK | os.X_OK):
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
