"""Socket-file housekeeping in the device-plugin directory.

A starting kubelet deletes every socket in the directory (plugins take the new
`kubelet.sock` as their cue to re-register), but leaves other files such as its
checkpoint alone; and it must not steal the path from a kubelet that is still
serving. Both rules are filesystem facts, kept apart from the gRPC engine.
"""

from __future__ import annotations

import contextlib
import os
import socket
import stat
from pathlib import Path


def socket_is_live(path: Path) -> bool:
    """True when something accepts connections on `path` (a kubelet already running)."""
    try:
        if not stat.S_ISSOCK(os.lstat(path).st_mode):
            return False
    except FileNotFoundError:
        return False
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        try:
            probe.connect(str(path))
        except OSError:
            return False
    return True


def remove_sockets(directory: Path) -> None:
    """Delete every socket file in `directory`, as a starting kubelet does."""
    with os.scandir(directory) as entries:
        for entry in entries:
            with contextlib.suppress(FileNotFoundError):
                if stat.S_ISSOCK(entry.stat(follow_symlinks=False).st_mode):
                    os.unlink(entry.path)
