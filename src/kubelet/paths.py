"""Socket paths in the kubelet's device-plugin directory."""

from __future__ import annotations

import os
from pathlib import Path

from kubelet.errors import ServeError
from resources.model import socket_name

# sun_path is 108 bytes on Linux, including the terminating NUL.
MAX_UNIX_PATH = 107


def plugin_socket(kubelet_socket: str | Path, resource: str) -> Path:
    """The socket of `resource`, next to the kubelet's registration socket."""
    return Path(kubelet_socket).parent / socket_name(resource)


def check_length(path: Path) -> None:
    if len(os.fsencode(path)) > MAX_UNIX_PATH:
        raise ServeError(f"socket path too long for a unix socket ({MAX_UNIX_PATH} bytes): {path}")


def remove_stale(path: Path) -> None:
    """Remove a socket left behind by an earlier run; a missing file is fine."""
    try:
        path.unlink()
    except FileNotFoundError:
        pass
    except OSError as err:
        raise ServeError(f"cannot remove stale socket {path}: {err.strerror}") from err


def address(path: Path) -> str:
    """gRPC target of a unix socket: three slashes for an absolute path."""
    return f"unix://{path.resolve() if not path.is_absolute() else path}"


def socket_identity(path: Path) -> tuple[int, int] | None:
    """Inode and change time of a socket file, None when it is missing.

    The inode alone is not enough: a deleted inode number is often reused at
    once, so a re-created kubelet socket can have its predecessor's inode.
    """
    try:
        stat = os.stat(path)
    except OSError:
        return None
    if stat.st_nlink == 0:
        # Caught in the middle of its unlink: the change time is already the
        # deletion's, and the next socket may get the same inode within the
        # same clock tick. Read as gone, not as a new kubelet.
        return None
    return stat.st_ino, stat.st_ctime_ns
