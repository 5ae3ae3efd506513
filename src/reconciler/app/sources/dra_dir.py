"""Watches the DRA kubelet plugin's socket directories: one of its sockets deleted underneath.

The DRA plugin is dialed, not registering: nothing calls it when its
registration socket (in the kubelet's plugins_registry) or its DRAPlugin
socket (in the driver's plugins directory) is deleted by a cleanup script or
an operator, and the kubelet simply forgets the driver. So, while DRA sockets
are served, this source watches their directories and asks the DRA side
whether a socket it serves is gone or replaced (two stats); if so it posts the
`DRA` hint, and the pass serves the socket again and the kubelet registers the
driver anew, as a deleted device-plugin socket is repaired (`kubelet_dir`).

The watch only wakes the check; the check decides, and it also runs once a
second without events, so a deletion the watch missed (the directory itself
removed, or re-created under a new inode by the repair) is seen within that.
Posting is level-based and cheap: the hint is posted at every look that finds
a socket disturbed, coalesced in the mailbox, and the pass that handles it
either repairs the socket or stops serving it (a failure is then retried on
the loop's backoff), so either way the next look finds nothing to post.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Protocol

from reconciler.app.sources import RECHECK_MILLISECONDS, pause_unless_stopped, socket_watch
from reconciler.core.mailbox import Hint, Mailbox


class DraSockets(Protocol):
    """What the watch asks the DRA side (`reconciler.actuators.dra.DraSide`)."""

    def served_directories(self) -> tuple[Path, ...]: ...

    def sockets_disturbed(self) -> bool: ...


def _inodes(directories: tuple[Path, ...]) -> tuple[int, ...] | None:
    """The directories' inodes; None when one is missing (there is nothing to watch yet)."""
    try:
        return tuple(os.stat(directory).st_ino for directory in directories)
    except OSError:
        return None


async def dra_dir_watcher(*, sockets: DraSockets, mailbox: Mailbox, stop: asyncio.Event) -> None:
    def check() -> None:
        if sockets.sockets_disturbed():
            mailbox.post(Hint.DRA)

    while not stop.is_set():
        check()
        directories = sockets.served_directories()
        inodes = _inodes(directories)
        if not directories or inodes is None:
            await pause_unless_stopped(stop, RECHECK_MILLISECONDS / 1000)
            continue
        try:
            async for _ in socket_watch(*directories, stop=stop):
                check()
                if sockets.served_directories() != directories or _inodes(directories) != inodes:
                    break  # watch what is served now, where it is now
        except FileNotFoundError:
            continue  # removed while the watch started: looked at again at once
