"""The prepared claims, on disk, so a restarted plugin answers the kubelet as before.

The kubelet prepares a claim once per pod start and retries on any error; it
unprepares it when the last pod using it is gone, possibly long after a
plugin restart. So what was prepared is kept in one JSON file beside the
plugin's socket, replaced atomically (temp file, fsync, rename, fsync of the
directory) on every change: a crash leaves the old file or the new one, never
half of one.

Reading it never blocks or trusts it: only a regular file of at most 8 MiB is
read (a FIFO or a device at the path is refused), and a file that is not a
checkpoint of this format is set aside as `<name>.corrupt` and reported once;
the plugin then starts with nothing prepared, and unpreparing a claim it no
longer knows still removes that claim's spec file (its name is derived from
the claim's uid), so nothing is left behind.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubelet.dra.types import ClaimRef, PreparedDevice

VERSION = 1
SIZE_LIMIT = 8 << 20


class CheckpointError(Exception):
    """The checkpoint file could not be read as one, or not written; one line."""


@dataclass(frozen=True)
class PreparedClaim:
    claim: ClaimRef
    devices: tuple[PreparedDevice, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "namespace": self.claim.namespace,
            "name": self.claim.name,
            "devices": [
                {
                    "requests": list(d.request_names),
                    "pool": d.pool_name,
                    "device": d.device_name,
                    "cdi": list(d.cdi_device_ids),
                }
                for d in self.devices
            ],
        }

    @classmethod
    def from_json(cls, uid: str, data: Any) -> PreparedClaim:
        if not isinstance(data, dict) or not isinstance(data.get("devices"), list):
            raise ValueError(f"claim {uid}: not a prepared claim")
        devices = tuple(
            PreparedDevice(
                request_names=tuple(str(r) for r in _list(d.get("requests"))),
                pool_name=str(d["pool"]),
                device_name=str(d["device"]),
                cdi_device_ids=tuple(str(c) for c in _list(d.get("cdi"))),
            )
            for d in data["devices"]
        )
        claim = ClaimRef(namespace=str(data["namespace"]), uid=uid, name=str(data["name"]))
        return cls(claim, devices)


def _list(value: Any) -> list[Any]:
    if not isinstance(value, list):
        raise ValueError("expected a list")
    return value


def load(path: Path) -> tuple[dict[str, PreparedClaim], str | None]:
    """The prepared claims by uid, and a problem to report (the file was set aside)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
    except FileNotFoundError:
        return {}, None
    except OSError as err:
        return {}, _set_aside(path, f"cannot open {path}: {err.strerror}")
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return {}, _set_aside(path, f"{path} is not a regular file")
        if info.st_size > SIZE_LIMIT:
            return {}, _set_aside(path, f"{path} is larger than {SIZE_LIMIT} bytes")
        with os.fdopen(fd, "rb", closefd=False) as handle:
            raw = handle.read(SIZE_LIMIT + 1)
    finally:
        os.close(fd)
    try:
        document = json.loads(raw)
        if not isinstance(document, dict) or document.get("version") != VERSION:
            raise ValueError(f"not a version {VERSION} checkpoint")
        claims = document.get("claims")
        if not isinstance(claims, dict):
            raise ValueError("no claims")
        return {uid: PreparedClaim.from_json(uid, data) for uid, data in claims.items()}, None
    except (ValueError, KeyError, TypeError) as err:
        return {}, _set_aside(path, f"{path} is not a checkpoint: {err}")


def _set_aside(path: Path, problem: str) -> str:
    aside = path.with_name(path.name + ".corrupt")
    with contextlib.suppress(OSError):
        os.replace(path, aside)
        return f"{problem}; set aside as {aside.name}, starting with no prepared claims"
    return f"{problem}; starting with no prepared claims"


def save(path: Path, claims: Mapping[str, PreparedClaim]) -> None:
    """Replace the checkpoint with `claims`, atomically.

    Raises:
        CheckpointError: the directory is missing, read-only or full (one line).
    """
    document = {
        "version": VERSION,
        "claims": {uid: claims[uid].to_json() for uid in sorted(claims)},
    }
    data = json.dumps(document, indent=1, sort_keys=True).encode() + b"\n"
    temp = ""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, path)
        directory = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)
    except OSError as err:
        if temp:
            with contextlib.suppress(OSError):
                os.unlink(temp)
        where = err.filename or path
        raise CheckpointError(f"cannot write the checkpoint {where}: {err.strerror}") from None
