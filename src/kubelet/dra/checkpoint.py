"""The prepared claims, on disk, so a restarted plugin answers the kubelet as before.

The kubelet prepares a claim once per pod start and retries on any error; it
unprepares it when the last pod using it is gone, possibly long after a
plugin restart. So what was prepared is kept in one JSON file beside the
plugin's socket, replaced atomically (temp file, fsync, rename, fsync of the
directory) on every change: a crash leaves the old file or the new one, never
half of one.

Each claim is recorded in two phases, as NVIDIA's DRA driver does:
`PrepareStarted` before anything of it exists on the node (its devices
chosen, nothing written), then `PrepareCompleted` once its spec is written.
An entry still `PrepareStarted` at start-up is what a crash left half done,
and is rolled back (`kubelet.dra.recovery`). The file also names the boot it
was written in (`/proc/sys/kernel/random/boot_id`): after a reboot, nothing
it lists is prepared any more.

Reading it never blocks or trusts it: only a regular file of at most 8 MiB is
read (a FIFO or a device at the path is refused), and a file that is not a
checkpoint of this format is set aside as `<name>.corrupt` and reported; the
plugin then starts with nothing prepared. Version 1 files (one phase, no
boot) are read as completed claims of this boot, so an upgrade loses nothing.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from kubelet.dra.types import ClaimRef, PreparedDevice

FILE_NAME = "checkpoint.json"
VERSION = 2
READABLE = frozenset({1, VERSION})
SIZE_LIMIT = 8 << 20
BOOT_ID = Path("/proc/sys/kernel/random/boot_id")


class CheckpointError(Exception):
    """The checkpoint file could not be read as one, or not written; one line."""


class Phase(StrEnum):
    STARTED = "PrepareStarted"  # devices chosen; the spec may or may not exist yet
    COMPLETED = "PrepareCompleted"  # the spec is written: the kubelet may have the answer


@dataclass(frozen=True)
class MigRecord:
    """A MIG instance a claim's prepare creates (dynamic MIG), recorded before it is made.

    `gi` and `ci` are None until the creation returned: a crash in between
    leaves an instance found by its placement (GPU, profile, start).
    """

    device: str  # the placement device's name in the slices
    gpu_uuid: str
    profile_id: int
    start: int
    gi: int | None = None
    ci: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "device": self.device,
            "gpu": self.gpu_uuid,
            "profileId": self.profile_id,
            "start": self.start,
            "gi": self.gi,
            "ci": self.ci,
        }

    @classmethod
    def from_json(cls, data: Any) -> MigRecord:
        if not isinstance(data, dict):
            raise ValueError("not a MIG record")
        gi, ci = data.get("gi"), data.get("ci")
        return cls(
            device=str(data["device"]),
            gpu_uuid=str(data["gpu"]),
            profile_id=_int(data["profileId"]),
            start=_int(data["start"]),
            gi=None if gi is None else _int(gi),
            ci=None if ci is None else _int(ci),
        )


def _int(value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < 1 << 32:
        raise ValueError(f"{value!r} is not an instance or profile number")
    return value


@dataclass(frozen=True)
class PreparedClaim:
    claim: ClaimRef
    devices: tuple[PreparedDevice, ...]
    phase: Phase = Phase.COMPLETED
    mig: tuple[MigRecord, ...] = ()  # the MIG instances its prepare creates

    def to_json(self) -> dict[str, Any]:
        document: dict[str, Any] = {
            "namespace": self.claim.namespace,
            "name": self.claim.name,
            "phase": str(self.phase),
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
        if self.mig:
            document["mig"] = [record.to_json() for record in self.mig]
        return document

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
        mig = tuple(MigRecord.from_json(r) for r in _list(data.get("mig", [])))
        return cls(claim, devices, Phase(data.get("phase", Phase.COMPLETED)), mig)


@dataclass(frozen=True)
class Checkpoint:
    """What one file holds: the boot it was written in ("" unknown) and the claims by uid."""

    boot_id: str
    claims: Mapping[str, PreparedClaim]


def _list(value: Any) -> list[Any]:
    if not isinstance(value, list):
        raise ValueError("expected a list")
    return value


def current_boot_id(path: Path = BOOT_ID) -> str:
    """This boot's id, or "" where the kernel does not say (then no boot is told apart)."""
    try:
        return path.read_text(encoding="ascii", errors="replace").strip()[:64]
    except OSError:
        return ""


def checkpoint_path(plugins_dir: Path, driver: str) -> Path:
    """`<plugins dir>/<driver>/checkpoint.json`, beside the driver's DRAPlugin socket."""
    return plugins_dir / driver / FILE_NAME


def load(path: Path) -> tuple[Checkpoint | None, str | None]:
    """The checkpoint (None: there is none), and a problem to report (the file was set aside)."""
    found, problem = _read(path)
    return found, None if problem is None else _set_aside(path, problem)


def peek(path: Path) -> Checkpoint | None:
    """The checkpoint as the file says now, None if there is none or it is damaged.

    Read only: setting a damaged file aside is the claim preparer's.
    """
    return _read(path)[0]


def _read(path: Path) -> tuple[Checkpoint | None, str | None]:
    """The checkpoint, or what is wrong with the file; changes nothing."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
    except FileNotFoundError:
        return None, None
    except OSError as err:
        return None, f"cannot open {path}: {err.strerror}"
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return None, f"{path} is not a regular file"
        if info.st_size > SIZE_LIMIT:
            return None, f"{path} is larger than {SIZE_LIMIT} bytes"
        try:
            with os.fdopen(fd, "rb", closefd=False) as handle:
                raw = handle.read(SIZE_LIMIT + 1)
        except OSError as err:
            return None, f"cannot read {path}: {err.strerror}"
    finally:
        os.close(fd)
    try:
        document = json.loads(raw)
        if not isinstance(document, dict) or document.get("version") not in READABLE:
            raise ValueError(f"not a version {VERSION} checkpoint")
        claims = document.get("claims")
        boot_id = document.get("bootId", "")
        if not isinstance(claims, dict) or not isinstance(boot_id, str):
            raise ValueError("no claims")
        return Checkpoint(
            boot_id, {uid: PreparedClaim.from_json(uid, data) for uid, data in claims.items()}
        ), None
    except (ValueError, KeyError, TypeError) as err:
        return None, f"{path} is not a checkpoint: {err}"


def _set_aside(path: Path, problem: str) -> str:
    aside = path.with_name(path.name + ".corrupt")
    with contextlib.suppress(OSError):
        os.replace(path, aside)
        return f"{problem}; set aside as {aside.name}, starting with no prepared claims"
    return f"{problem}; starting with no prepared claims"


def temporary_files(path: Path) -> list[Path]:
    """Temp files `save` left behind when it was killed before its rename."""
    try:
        return [p for p in path.parent.iterdir() if p.name.startswith(f".{path.name}.")]
    except OSError:
        return []


def _nothing() -> None:
    pass


def save(
    path: Path,
    claims: Mapping[str, PreparedClaim],
    *,
    boot_id: str,
    before_rename: Callable[[], None] = _nothing,
) -> None:
    """Replace the checkpoint with `claims`, atomically.

    `before_rename` runs once the new file is written and synced: a kill point.

    Raises:
        CheckpointError: the directory is missing, read-only or full (one line).
    """
    document = {
        "version": VERSION,
        "bootId": boot_id,
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
        before_rename()
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
