"""``mps-control-daemon mount-shm``: the tmpfs that MPS servers and clients share.

MPS clients and the server exchange memory through ``/dev/shm``. Every
container involved (the control daemon, the plugin, the workloads) gets the
host's ``<mps root>/shm`` there, so that directory must be a tmpfs of its own:
the init container mounts it, with Bidirectional propagation so the host and
the other containers see the mount. In order:

1. if ``<root>/shm`` is already a mount point, unmount it, and remove the
   (now empty) directory;
2. create it with mode 0755;
3. ``mount -t tmpfs -o rw,nosuid,nodev,noexec,relatime,size=<X> shm <root>/shm``
   where ``X`` is half of ``MemTotal`` from ``/proc/meminfo`` (integer
   division) followed by the first letter of its unit, e.g. ``32890880k``;
   ``65536k`` when that cannot be read.

Mounting needs root and ``mount(8)``; the programs and the ``/proc`` files are
injectable (`ShmTools`) so the exact command lines can be checked without
mounting anything.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from loguru import logger

from foundation.errors import TransientError
from mps.errors import one_line
from mps.layout import MpsLayout

__all__ = [
    "FALLBACK_SIZE",
    "MOUNT_OPTIONS",
    "MountError",
    "ShmTools",
    "is_mount_point",
    "mount_command",
    "mount_shm",
    "shm_size",
]

FALLBACK_SIZE = "65536k"
MOUNT_OPTIONS = ("rw", "nosuid", "nodev", "noexec", "relatime")


class MountError(TransientError):
    """Unmounting or mounting the shared memory directory failed."""


def shm_size(meminfo: str) -> str:
    """Half of ``MemTotal`` with the unit's first letter; `FALLBACK_SIZE` if it is not there."""
    for line in meminfo.splitlines():
        key, _, rest = line.partition(":")
        if key.strip() != "MemTotal":
            continue
        parts = rest.split()
        if len(parts) == 2 and parts[0].isdigit() and parts[1]:
            return f"{int(parts[0]) // 2}{parts[1][0]}"
    return FALLBACK_SIZE


def mount_command(target: Path, size: str, *, program: str = "mount") -> list[str]:
    """The tmpfs mount command line for ``target``."""
    options = ",".join((*MOUNT_OPTIONS, f"size={size}"))
    return [program, "-t", "tmpfs", "-o", options, "shm", str(target)]


def _unescape(field_text: str) -> str:
    # mountinfo escapes space, tab, newline and backslash as \ooo octal.
    out, index = [], 0
    while index < len(field_text):
        chunk = field_text[index : index + 4]
        if len(chunk) == 4 and chunk[0] == "\\" and chunk[1:].isdigit():
            out.append(chr(int(chunk[1:], 8)))
            index += 4
        else:
            out.append(field_text[index])
            index += 1
    return "".join(out)


def is_mount_point(target: Path, mountinfo: str) -> bool:
    """Whether ``target`` appears as a mount point in ``/proc/self/mountinfo`` text."""
    wanted = os.path.normpath(os.path.realpath(target))
    for line in mountinfo.splitlines():
        fields = line.split()
        if len(fields) > 4 and os.path.normpath(_unescape(fields[4])) == wanted:
            return True
    return False


def _run(argv: Sequence[str]) -> None:
    try:
        done = subprocess.run(list(argv), capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise MountError(f"error running {argv[0]}: {error}") from None
    if done.returncode != 0:
        output = one_line(done.stdout + " " + done.stderr)
        raise MountError(f"{' '.join(argv)} exited with status {done.returncode}: {output}")


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


@dataclass(frozen=True, kw_only=True)
class ShmTools:
    """The mount programs, the ``/proc`` files read, and how a command is run."""

    mount_program: str = "mount"
    umount_program: str = "umount"
    meminfo: Path = Path("/proc/meminfo")
    mountinfo: Path = Path("/proc/self/mountinfo")
    run: Callable[[Sequence[str]], None] = field(default=_run, compare=False)


def mount_shm(layout: MpsLayout, *, tools: ShmTools | None = None) -> list[str]:
    """Mount a fresh tmpfs at ``<root>/shm``; return the mount command it ran.

    Raises:
        MountError: unmounting the old tmpfs, creating the directory or
            mounting failed.
    """
    tools = tools or ShmTools()
    target = layout.shm
    if is_mount_point(target, _read(tools.mountinfo)):
        logger.info("unmounting the previous tmpfs at {}", target)
        tools.run([tools.umount_program, str(target)])
    if target.is_dir():
        try:
            target.rmdir()
        except OSError as error:
            # Leftover files of an unmounted directory are hidden by the new mount.
            logger.warning("keeping {}: {}", target, error.strerror)
    try:
        target.mkdir(mode=0o755, parents=True, exist_ok=True)
    except OSError as error:
        raise MountError(f"error creating directory {target}: {error.strerror}") from None
    command = mount_command(target, shm_size(_read(tools.meminfo)), program=tools.mount_program)
    logger.info("mounting tmpfs: {}", " ".join(command))
    try:
        tools.run(command)
    except MountError as error:
        raise MountError(f"error mounting {target} as tmpfs: {error}") from None
    return command
