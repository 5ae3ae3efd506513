"""Watches the kubelet's device-plugin directory: a re-created `kubelet.sock`, or one of ours gone.

A kubelet restart wipes the directory and creates `kubelet.sock` anew; that
is the signal to re-create our sockets and register again. One of our own
sockets deleted underneath us (a cleanup script, an operator) is the same
hint: the loop asks each server whether its socket is still the one it
bound, and serves and registers afresh the ones that are not. The watch compares
the socket's identity (inode and change time) rather than trusting single
events: a create that happened while the watch was starting, or one merged
with its delete, is still seen within one timeout. Posting is cheap and
idempotent: the loop re-registers only when the socket really is a new one.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from loguru import logger
from watchfiles import Change

from kubelet.paths import socket_identity
from reconciler.app.sources import RECHECK_MILLISECONDS, pause_unless_stopped, socket_watch
from reconciler.core.mailbox import Hint, Mailbox


def _ours(base: str) -> bool:
    """A plugin socket name (`nvidia-<resource>.sock`), see `resources.model.socket_name`."""
    return base.startswith("nvidia-") and base.endswith(".sock")


async def kubelet_dir_watcher(
    *, kubelet_socket: Path, mailbox: Mailbox, stop: asyncio.Event
) -> None:
    directory = kubelet_socket.parent
    name = kubelet_socket.name
    seen: tuple[int, int] | None = None

    def wanted(change: Change, path: str) -> bool:
        base = Path(path).name
        if change == Change.added:
            return base == name
        return change == Change.deleted and _ours(base)

    def check() -> None:
        nonlocal seen
        identity = socket_identity(kubelet_socket)
        if identity is not None and identity != seen:
            if seen is not None:
                logger.info("kubelet socket {path} was re-created", path=str(kubelet_socket))
            mailbox.post(Hint.KUBELET)
        seen = identity

    while not stop.is_set():
        check()
        if not directory.is_dir():
            # The directory itself may appear later (kubelet not installed yet).
            await pause_unless_stopped(stop, RECHECK_MILLISECONDS / 1000)
            continue
        try:
            async for changes in socket_watch(directory, stop=stop, watch_filter=wanted):
                if any(change == Change.deleted for change, _ in changes):
                    mailbox.post(Hint.KUBELET)
                check()
        except FileNotFoundError:
            logger.warning("kubelet directory {dir} disappeared; waiting", dir=str(directory))
