"""Reading a small input file without ever blocking on it or running out of memory.

The plugin reads files that other people put in place: the config file (a
ConfigMap mount), the simulated events file and node profiles. A named pipe
at such a path blocks a plain `open()` until something writes to it, a
character device can be read forever, and a 200 MB file costs seconds of
parsing and hundreds of megabytes. `read_small_file` accepts regular files
only and at most `limit` bytes:

* `stat` first (following symlinks, so a ConfigMap's `..data/<key>` links
  work): anything but a regular file is refused without being opened,
  except the null device, which reads as empty (`--config-file /dev/null`
  is how some people say "no config file", as with the reference);
* then `open` with `O_NONBLOCK`, so a pipe swapped in after the `stat` still
  cannot block, and `fstat` the descriptor to check again what was opened;
* then read at most `limit + 1` bytes, so a file that grows while it is read
  is still refused rather than read whole.

A refusal is a `FileRejected` whose text is one short phrase; callers put it
into their own error type with the path, as they already do for `OSError`.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

__all__ = ["MIB", "FileRejected", "describe_kind", "read_small_file", "regular_file_fd"]

MIB = 1024 * 1024
_NULL_DEVICE = os.makedev(1, 3)  # Linux's /dev/null
_CHUNK = 64 * 1024

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a named pipe (FIFO)"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


class FileRejected(Exception):
    """The file cannot be used: missing, unreadable, not a regular file, or too large.

    ``reason`` is a short phrase such as ``No such file or directory`` or
    ``not a regular file (a named pipe (FIFO))``; ``too_large`` tells the two
    kinds of callers' messages apart (opening versus reading).
    """

    def __init__(self, reason: str, *, too_large: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.too_large = too_large


def describe_kind(mode: int) -> str:
    """What kind of file `mode` (an `st_mode`) describes, for messages."""
    for test, name in _KINDS:
        if test(mode):
            return name
    return "not a regular file"


def _reject_kind(mode: int) -> None:
    if stat.S_ISDIR(mode):
        # The same words as reading a directory gives, which users know.
        raise FileRejected(os.strerror(errno.EISDIR))
    if not stat.S_ISREG(mode):
        raise FileRejected(f"not a regular file ({describe_kind(mode)})")


def _size_text(limit: int) -> str:
    if limit % MIB == 0:
        return f"{limit // MIB} MiB"
    return f"{limit} bytes"


def _too_large(size: int | None, limit: int) -> FileRejected:
    found = f"{size} bytes" if size is not None else "more than that"
    return FileRejected(f"larger than the {_size_text(limit)} limit ({found})", too_large=True)


def _is_null_device(path: str | Path) -> bool:
    try:
        found = os.stat(path)
    except OSError:
        return False
    return stat.S_ISCHR(found.st_mode) and found.st_rdev == _NULL_DEVICE


def regular_file_fd(path: str | Path) -> int:
    """An open, non-blocking, read-only descriptor of the regular file at `path`.

    The caller closes it. Raises `FileRejected` for anything else.
    """
    try:
        _reject_kind(os.stat(path).st_mode)
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as error:
        raise FileRejected(error.strerror or type(error).__name__) from None
    try:
        _reject_kind(os.fstat(fd).st_mode)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_small_file(path: str | Path, *, limit: int) -> bytes:
    """The whole content of the regular file at `path`, if it is at most `limit` bytes.

    Raises:
        FileRejected: missing or unreadable, not a regular file, or over `limit`.
    """
    if _is_null_device(path):
        return b""
    fd = regular_file_fd(path)
    try:
        size = os.fstat(fd).st_size
        if size > limit:
            raise _too_large(size, limit)
        chunks: list[bytes] = []
        total = 0
        while total <= limit:
            chunk = os.read(fd, min(_CHUNK, limit + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
    except OSError as error:
        raise FileRejected(error.strerror or type(error).__name__) from None
    finally:
        os.close(fd)
    if total > limit:
        raise _too_large(None, limit)
    return b"".join(chunks)
