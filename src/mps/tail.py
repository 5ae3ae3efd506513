"""Follow a control daemon's ``control.log`` into this process's log.

The reference runs ``tail -n +1 -f`` on the file with its output on stdout.
Following the file in-process gives the same lines (from the first one, then
each new one) without a child process that could outlive the daemon, and each
line is tagged with its resource. The file may not exist yet, may be
truncated or replaced when a daemon restarts, and may disappear when the log
directory is removed on stop; none of these stops the follower or raises,
because losing log lines must never affect the daemons.

The control daemon logs every client it serves, and the health check is a
client every few seconds, so the file grows by the same few lines forever.
`RepeatFilter` tells such routine lines (seen before, once their time stamp
is set aside) from news, so a steady daemon stays quiet in this process's
log while anything new (a new MPS server, an error) still shows.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

__all__ = ["LogFollower", "RepeatFilter"]

# ``[2024-05-01 10:00:00.123 Control 4711] ``: what changes between repeats of a line.
_STAMP = re.compile(r"^\[[^\]]*\]\s*")


class RepeatFilter:
    """Says whether a log line is news: its text, time stamp aside, not seen lately.

    Remembers the last ``capacity`` distinct lines, so memory stays bounded
    however long the daemon runs.
    """

    def __init__(self, capacity: int = 256) -> None:
        self._seen: OrderedDict[str, None] = OrderedDict()
        self._capacity = capacity

    def is_new(self, line: str) -> bool:
        key = _STAMP.sub("", line)
        if key in self._seen:
            self._seen.move_to_end(key)
            return False
        self._seen[key] = None
        if len(self._seen) > self._capacity:
            self._seen.popitem(last=False)
        return True


class LogFollower:
    """Calls ``emit`` with every line of ``path``, from the first, until stopped."""

    def __init__(self, path: Path, *, emit: Callable[[str], None], interval: float = 0.25) -> None:
        self.path = path
        self._emit = emit
        self._interval = interval
        self._task: asyncio.Task[None] | None = None

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def start(self) -> None:
        if not self.running:
            self._task = asyncio.get_running_loop().create_task(
                self._follow(), name=f"follow {self.path}"
            )

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is None:
            return
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    async def _follow(self) -> None:
        # The file is kept open between polls, like ``tail -f``: while it is
        # open its inode cannot be reused, so a replaced file is always told
        # apart from the one being read.
        handle: BinaryIO | None = None
        partial = b""
        try:
            while True:
                if handle is None:
                    handle, partial = self._open(), b""
                if handle is not None:
                    partial = self._drain(handle, partial)
                    if self._replaced(handle):
                        handle.close()
                        handle = None
                        continue
                await asyncio.sleep(self._interval)
        finally:
            if handle is not None:
                handle.close()

    def _open(self) -> BinaryIO | None:
        try:
            return open(self.path, "rb")
        except OSError:
            return None

    def _replaced(self, handle: BinaryIO) -> bool:
        try:
            current = os.stat(self.path)
        except OSError:
            return os.fstat(handle.fileno()).st_nlink == 0
        opened = os.fstat(handle.fileno())
        return (current.st_dev, current.st_ino) != (opened.st_dev, opened.st_ino)

    def _drain(self, handle: BinaryIO, partial: bytes) -> bytes:
        if os.fstat(handle.fileno()).st_size < handle.tell():
            handle.seek(0)  # truncated: start again from its first line
            partial = b""
        data = handle.read()
        if not data:
            return partial
        lines = (partial + data).split(b"\n")
        for line in lines[:-1]:
            self._emit(line.decode(errors="replace").rstrip("\r"))
        return lines[-1]
