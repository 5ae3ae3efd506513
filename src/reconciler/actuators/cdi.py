"""The CDI spec files as an actuator: observed on disk, converged by difference.

Order is what keeps a container runtime from ever meeting an unknown CDI
name: a device list is published only once every name its Allocate answers
can contain is defined by a spec on disk, and a name is removed only once no
published list uses it. `converge()` therefore writes the desired specs
*plus* the devices of the specs it wrote earlier whose names are still in
use; called again after the servers moved on, with a smaller `in_use`, the
same function prunes them. Each file is read back and compared before it is
written, so a file deleted or edited underneath the plugin is repaired, and
an unchanged file is never rewritten.

Blocking file I/O: the loop runs `write()` in a worker thread and `apply()`s
what it found, so only the loop's thread writes the files held.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from foundation.errors import TransientError
from foundation.outcome import Change, Key, Kind, Outcome, Retries
from reconciler.actuators.protocol import NOTHING, Single
from reconciler.plan.desired import Desired
from resources.cdi_files import Spec, spec_file_name, write_spec


class CdiWriteError(TransientError):
    """The CDI spec directory is missing, read-only or full."""


def defined_names(spec: Spec) -> frozenset[str]:
    """The qualified device names a spec defines (`<kind>=<name>`)."""
    kind = spec.get("kind", "")
    return frozenset(f"{kind}={device.get('name')}" for device in spec.get("devices", ()))


def _with_devices(spec: Spec, devices: Iterable[dict[str, Any]]) -> Spec:
    out = dict(spec)
    out["devices"] = list(devices)
    return out


class CdiSpecs:
    """The spec files this process manages, as last written and read back."""

    def __init__(self) -> None:
        self._held: dict[Path, Spec] = {}
        # What each file looked like once written or read back: a stat that
        # differs means someone else touched it.
        self._stamps: dict[Path, tuple[int, int, int]] = {}

    def held(self) -> tuple[str, ...]:
        """The spec files this process manages now, by name."""
        return tuple(sorted(path.name for path in self._held))

    def names(self) -> frozenset[str]:
        """Every qualified name defined by a spec this process has on disk."""
        return frozenset().union(*(defined_names(spec) for spec in self._held.values()))

    def targets(
        self, directory: str, specs: Sequence[Spec], in_use: frozenset[str]
    ) -> dict[Path, Spec | None]:
        """File -> the spec it should hold (None: remove it)."""
        wanted: dict[Path, Spec | None] = {}
        for spec in map(_plain, specs):
            path = Path(directory) / spec_file_name(spec)
            held = self._held.get(path)
            new = defined_names(spec)
            kept = [] if held is None else self._still_used(held, in_use, exclude=new)
            wanted[path] = _with_devices(spec, [*spec.get("devices", ()), *kept]) if kept else spec
        for path, held in self._held.items():
            if path in wanted:
                continue
            kept = self._still_used(held, in_use, exclude=frozenset())
            wanted[path] = _with_devices(held, kept) if kept else None
        return wanted

    @staticmethod
    def _still_used(
        spec: Spec, in_use: frozenset[str], *, exclude: frozenset[str]
    ) -> list[dict[str, Any]]:
        kind = spec.get("kind", "")
        return [
            device
            for device in spec.get("devices", ())
            if f"{kind}={device.get('name')}" in in_use - exclude
        ]

    def pending(self, directory: str, specs: Sequence[Spec], in_use: frozenset[str]) -> bool:
        """Does the last write differ from what is wanted now, or was a file touched since?

        In memory, plus one stat per file.
        """
        return any(
            self._held.get(path) != spec
            or (spec is not None and _stamp(path) != self._stamps.get(path))
            for path, spec in self.targets(directory, specs, in_use).items()
        )

    def converge(self, directory: str, specs: Sequence[Spec], in_use: frozenset[str]) -> Outcome:
        """Write, replace or remove spec files until the directory holds what is wanted.

        `in_use`: names that published device lists refer to; their devices
        stay defined even when the desired specs no longer have them. Both
        halves run on the caller's thread here; the loop instead runs `write`
        in a worker thread and `apply`s its answer itself, so that only the
        loop's thread writes this object's fields.
        """
        return self.apply(self.write(directory, specs, in_use))

    def write(self, directory: str, specs: Sequence[Spec], in_use: frozenset[str]) -> Written:
        """The files' side of `converge` (blocking); reads this object, writes none of it."""
        held, stamps = dict(self._held), dict(self._stamps)
        changes: set[Change] = set()
        files: list[str] = []
        error: CdiWriteError | None = None
        try:
            for path, spec in self.targets(directory, specs, in_use).items():
                if spec is None:
                    path.unlink(missing_ok=True)
                    held.pop(path, None)
                    stamps.pop(path, None)
                    changes.add(Change.REMOVED)
                    files.append(f"removed {path.name}")
                    continue
                if _read(path) != spec:
                    write_spec(path.parent, spec)
                    changes.add(Change.WRITTEN)
                    files.append(f"wrote {path.name}")
                held[path] = spec
                stamps[path] = _stamp(path)
        except OSError as err:
            where = err.filename or directory
            error = CdiWriteError(f"cannot write CDI specs to {where}: {err.strerror}")
        outcome = Outcome(Kind.CDI, "", frozenset(changes), error, tuple(files))
        return Written(outcome, held, stamps)

    def apply(self, written: Written) -> Outcome:
        """Take what a `write` found (on the loop's thread); its outcome."""
        self._held, self._stamps = written.held, written.stamps
        return written.outcome


@dataclass(frozen=True)
class Written:
    """What one `CdiSpecs.write` left on disk, as a value for `CdiSpecs.apply`."""

    outcome: Outcome
    held: dict[Path, Spec]
    stamps: dict[Path, tuple[int, int, int]]


def _stamp(path: Path) -> tuple[int, int, int]:
    """Identity, size and modification time of a file; zeros when it is missing."""
    try:
        info = os.lstat(path)
    except OSError:
        return (0, 0, 0)
    return (info.st_ino, info.st_size, info.st_mtime_ns)


def _plain(spec: Spec) -> Spec:
    """The spec as JSON would read it back (lists, not tuples), so comparisons are exact."""
    value: Spec = json.loads(json.dumps(spec))
    return value


def _read(path: Path) -> Spec | None:
    """The spec in `path` as parsed JSON; None when missing or unreadable as a spec."""
    try:
        with open(path, "rb", opener=_nofollow) as handle:
            value = json.loads(handle.read(8 << 20))
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return None  # a damaged file: rewrite it
    return value if isinstance(value, dict) else None


def _nofollow(path: str, flags: int) -> int:
    # A FIFO or a device planted at the spec path must not block the worker.
    return os.open(path, flags | os.O_NONBLOCK | os.O_NOFOLLOW)


CDI = Key(Kind.CDI)


class CdiWrite(Single):
    """The desired specs on disk, keeping every name a published list still uses (names first)."""

    key = CDI

    def __init__(
        self, retries: Retries, cdi: CdiSpecs, in_use: Callable[[], frozenset[str]]
    ) -> None:
        super().__init__(retries)
        self.cdi = cdi
        self.in_use = in_use  # the names the servers' current answers can contain

    def wanted(self, desired: Desired) -> Hashable:
        directory = desired.config.flags.cdi_spec_dir
        in_use = self.in_use()
        if not self.cdi.pending(directory, desired.cdi, in_use):
            return NOTHING
        return (directory, desired.cdi, in_use)

    def status(self) -> object:
        return self.cdi.held()

    async def attempt(self, desired: Desired) -> list[Outcome]:
        directory = desired.config.flags.cdi_spec_dir
        in_use = self.in_use()
        # The files are written in a thread; what was written is applied here, on the loop.
        written = await asyncio.to_thread(self.cdi.write, directory, desired.cdi, in_use)
        return [self.cdi.apply(written)]


class CdiPrune(CdiWrite):
    """Names the servers no longer use come off disk, once no published list refers to them.

    Not after a failed write this pass: the write is retried first, on its backoff.
    """

    def wanted(self, desired: Desired) -> Hashable:
        if self.retries.attempts(CDI):
            return NOTHING
        return super().wanted(desired)
