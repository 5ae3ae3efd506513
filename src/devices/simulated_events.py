"""Fault injection for the simulated backend: a JSON-lines file that a running plugin follows.

People testing their cluster's alerting need a GPU to fail on demand, on a
machine with no GPU. With `--mock-nvml-events PATH` the plugin follows PATH
like `tail -f` and turns each appended line into a health event:

    {"uuid": "GPU-...", "xid": 79}                XID 79 on the GPU (and its MIG devices)
    {"uuid": "GPU-...", "xid": 94, "gi": 1, "ci": 0}   XID on one MIG instance of the GPU
    {"uuid": "MIG-...", "xid": 94}                XID on one MIG device
    {"uuid": "...", "ecc": true}                  a double-bit ECC error
    {"uuid": "...", "lost": true}                 the device's NVML calls fail ...
    {"uuid": "...", "lost": false}                ... until this line
    {"uuid": "...", "reset": true}                the device was reset

A GPU whose profile says `healthEvents: false` is reported unmonitored when
watching starts, as the NVML watcher reports a GPU whose registration NVML
answers with Not Supported.

Reading starts at the end of the file as it is when watching starts, so
lines from an earlier run are not replayed; a file that is truncated or
replaced is read again from its start. A line is handled once its newline
has been written. A line that is not one of the above is logged and skipped:
a typo in a test must be visible, and must not stop the plugin. So is a line
longer than 64 KiB, and nothing at the path but a regular file is read (a
named pipe there would otherwise block the reader for good): see
`foundation.files`.

`lost` and `reset` also change what the simulated library's `probe` sees
(`simulated_faults.DeviceFaults`), so recovery runs the same re-probe path
as on real GPUs: a lost device fails its probe, a reset moves its generation
on. A lost GPU takes its MIG devices with it, and a reset of a GPU counts for
them too.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from loguru import logger

from devices.health import EventKind, HealthEvent, Post, ThreadedSource
from devices.model import Gpu, Inventory
from devices.simulated_faults import DeviceFaults as DeviceFaults  # re-exported for callers
from devices.xids import XidPolicy
from foundation.files import FileRejected, describe_kind, regular_file_fd

# One stat() of the events file every 50 ms: an injected event reaches the
# kubelet well within 100 ms, for a cost too small to show in idle CPU.
POLL_SECONDS = 0.05
_READ_LIMIT = 1 << 20  # bytes per read, so a huge append cannot stall the stop flag
MAX_LINE = 64 * 1024  # a longer line is skipped, so a file without newlines cannot fill memory
_ACTIONS = ("xid", "ecc", "lost", "reset")
_KEYS = frozenset({"uuid", "gi", "ci", *_ACTIONS})


def _clip(line: str, limit: int = 120) -> str:
    return line if len(line) <= limit else line[: limit - 3] + "..."


@dataclass(frozen=True)
class Injection:
    """One valid line of the events file."""

    uuid: str
    action: str  # one of _ACTIONS
    value: Any  # the XID, or the boolean of ecc/lost/reset
    gi: int | None = None
    ci: int | None = None


def _count(data: Mapping[str, Any], key: str) -> int | None:
    value = data.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{key!r} must be a whole number >= 0 (got {value!r})")
    return value


def parse_line(line: str, known: Mapping[str, object]) -> Injection:
    """Validate one line against the devices in `known`.

    Raises:
        ValueError: one line saying what is wrong.
    """
    try:
        data = json.loads(line)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not JSON: {exc.msg}") from exc
    if not isinstance(data, dict):
        raise ValueError("must be a JSON object")
    unknown = sorted(set(data) - _KEYS)
    if unknown:
        raise ValueError(f"unknown key {unknown[0]!r} (keys: uuid, {', '.join(_ACTIONS)}, gi, ci)")
    uuid = data.get("uuid")
    if not isinstance(uuid, str) or not uuid:
        raise ValueError("'uuid' (a GPU or MIG UUID) is required")
    if uuid not in known:
        raise ValueError(f"no device {uuid} on this node")
    actions = [key for key in _ACTIONS if key in data]
    if len(actions) != 1:
        raise ValueError(f"exactly one of {', '.join(_ACTIONS)} is required")
    action = actions[0]
    gi, ci = _count(data, "gi"), _count(data, "ci")
    if (gi is not None or ci is not None) and (action != "xid" or uuid.startswith("MIG-")):
        raise ValueError("'gi' and 'ci' go with 'xid' on a GPU UUID only")
    value = data[action]
    if action == "xid":
        value = _count(data, "xid")
    elif not isinstance(value, bool):
        raise ValueError(f"{action!r} must be true or false (got {value!r})")
    elif action in ("ecc", "reset") and not value:
        raise ValueError(f"{action!r} only takes true")
    return Injection(uuid=uuid, action=action, value=value, gi=gi, ci=ci)


class _Cursor:
    """Where reading of the events file stands, and how to tell that the file was rewritten.

    Appending is the contract, but people also truncate the file, rewrite it
    with an editor (a new inode) or `echo > file` it again. A new inode or a
    shorter file is noticed from `stat`; a rewrite to the same or a greater
    length is noticed because the bytes just before the read position changed.
    """

    _TAIL = 64

    def __init__(self, path: Path) -> None:
        self.path = path
        self._identity: tuple[int, int] | None = None
        self._offset = 0
        self._tail = b""  # the last bytes before `_offset`
        self._seen: tuple[int, int] | None = None  # (size, mtime) at the last look
        self._refused: tuple[int, int] | None = None  # what was not a regular file, warned once

    def _stat(self) -> os.stat_result | None:
        """The file's status, or None when there is no regular file to read."""
        try:
            found = self.path.stat()
        except OSError:
            return None
        if not stat.S_ISREG(found.st_mode):
            identity = (found.st_dev, found.st_ino)
            if identity != self._refused:
                logger.warning(
                    "{} is {}, not a regular file; ignored until it is one",
                    self.path,
                    describe_kind(found.st_mode),
                )
                self._refused = identity
            return None
        self._refused = None
        return found

    def _open(self) -> BinaryIO:
        try:
            return os.fdopen(regular_file_fd(self.path), "rb")
        except FileRejected as exc:
            raise OSError(exc.reason) from None

    def skip_to_end(self) -> None:
        stat = self._stat()
        if stat is None:
            return
        try:
            with self._open() as file:
                file.seek(max(0, stat.st_size - self._TAIL))
                self._tail = file.read(self._TAIL)
                self._offset = file.tell()
        except OSError:
            return
        self._identity = (stat.st_dev, stat.st_ino)
        self._seen = (stat.st_size, stat.st_mtime_ns)

    def _restart(self, identity: tuple[int, int] | None) -> None:
        if self._identity is not None and identity is not None:
            logger.info("{} was replaced or rewritten; reading it from the start", self.path)
        self._identity, self._offset, self._tail, self._seen = identity, 0, b"", None

    def read_new(self) -> bytes | None:
        """New bytes (b"" for none), or None when reading must start over."""
        stat = self._stat()
        if stat is None:
            self._restart(None)
            return b""
        identity = (stat.st_dev, stat.st_ino)
        if identity != self._identity or stat.st_size < self._offset:
            self._restart(identity)
            return None
        looked = (stat.st_size, stat.st_mtime_ns)
        if stat.st_size == self._offset and looked == self._seen:
            return b""
        self._seen = looked
        try:
            with self._open() as file:
                file.seek(self._offset - len(self._tail))
                if file.read(len(self._tail)) != self._tail:
                    self._restart(identity)
                    return None
                chunk = file.read(min(stat.st_size - self._offset, _READ_LIMIT))
        except OSError as exc:
            logger.warning("cannot read {}: {}", self.path, exc)
            return b""
        self._offset += len(chunk)
        self._tail = (self._tail + chunk)[-self._TAIL :]
        return chunk


# What NVML answers when a GPU cannot be registered for events (`healthEvents: false`).
UNWATCHABLE = "nvmlDeviceRegisterEvents: Not Supported"


class SimulatedEventSource(ThreadedSource):
    """Follows the events file and posts what its new lines say."""

    def __init__(
        self,
        path: str | Path,
        *,
        faults: DeviceFaults,
        inventory: Inventory,
        policy: XidPolicy,
        poll_seconds: float = POLL_SECONDS,
    ) -> None:
        super().__init__("health-events-file")
        self.path = Path(path)
        self._faults = faults
        self._policy = policy
        self._poll = poll_seconds
        self._known: dict[str, object] = {}
        for gpu in inventory.gpus:
            self._known[gpu.uuid] = gpu
            self._known.update({mig.uuid: mig for mig in gpu.mig_devices})
        faults.bind(inventory)
        self._cursor = _Cursor(self.path)

    def start(self, post: Post) -> None:
        # The end of the file is taken now, not when the thread gets going, so a
        # line appended right after `start` returns is never mistaken for history.
        self._cursor.skip_to_end()
        logger.info("following {} for injected health events", self.path)
        super().start(post)

    def _report_watching(self, post: Post) -> None:
        """The GPUs that cannot be watched, as the NVML watcher reports them when it registers."""
        unwatchable = self._faults.unwatchable()
        for uuid in sorted(u for u, d in self._known.items() if isinstance(d, Gpu)):
            if uuid in unwatchable:
                logger.warning("Device {} is too old to support healthchecking.", uuid)
                post(HealthEvent(EventKind.UNMONITORED, uuid, detail=UNWATCHABLE))

    def _run(self, post: Post) -> None:
        self._report_watching(post)
        pending = b""
        overlong = False  # inside a line already reported as too long
        while not self._stopping.is_set():
            chunk = self._cursor.read_new()
            if chunk is None:  # the file was replaced or rewritten: start over
                pending, overlong = b"", False
                continue
            if not chunk:
                self._stopping.wait(self._poll)
                continue
            *lines, pending = (pending + chunk).split(b"\n")
            for raw in lines:
                if overlong:
                    overlong = False  # the end of a line already skipped
                elif len(raw) > MAX_LINE:
                    self._skip_long_line()
                else:
                    self._handle(raw.decode("utf-8", errors="replace").strip(), post)
            if len(pending) > MAX_LINE:
                if not overlong:
                    self._skip_long_line()
                pending, overlong = b"", True

    def _skip_long_line(self) -> None:
        logger.warning("{}: skipped a line longer than {} bytes", self.path, MAX_LINE)

    def _handle(self, line: str, post: Post) -> None:
        if not line:
            return
        try:
            injection = parse_line(line, self._known)
        except ValueError as exc:
            logger.warning("{}: skipped {!r}: {}", self.path, _clip(line), exc)
            return
        uuid, action = injection.uuid, injection.action
        if action == "xid":
            xid = int(injection.value)
            if self._policy.is_disabled(xid):
                logger.info("{}: XID {} is disabled for health checks", self.path, xid)
                return
            event = HealthEvent(
                EventKind.XID, uuid, xid=xid, gi=injection.gi, ci=injection.ci, detail="injected"
            )
        elif action == "ecc":
            event = HealthEvent(EventKind.ECC, uuid, detail="injected")
        elif action == "lost":
            self._faults.set_lost(uuid, bool(injection.value))
            kind = EventKind.LOST if injection.value else EventKind.FOUND
            event = HealthEvent(kind, uuid, detail="injected")
        else:
            self._faults.reset(uuid)
            event = HealthEvent(EventKind.RESET, uuid, detail="injected")
        logger.info("injected health event: {}", event.describe())
        post(event)
