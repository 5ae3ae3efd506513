"""A private mount namespace that shows the plugin process a fake node's host files.

The plugin reads three things from fixed host paths that a test cannot
point elsewhere with a flag: the PCI functions' `drm/` directories and NUMA
nodes under `/sys`, the MIG capability table at
`/proc/driver/nvidia-caps/mig-minors`, and, when the driver root has no
`dev/` of its own (the split dev-root layout), the device nodes under its
own `/dev`. Reading the machine's real ones would make the test depend on
the machine (and find no GPU there).

`unshare --mount` gives the process its own mount table, private so
nothing propagates back: the fake sysfs is bind-mounted on `/sys`, a tmpfs
on `/proc/driver` holds the MIG table, and a fake `/dev` (with `null`,
`zero`, `random` and `urandom` beside the GPU nodes) is bind-mounted on
`/dev`; then the plugin is exec'd in place of the shell, so the process the
test signals is the plugin itself. This needs root (CAP_SYS_ADMIN and
CAP_MKNOD); `namespace_problem` says why it cannot be done so the tests can
skip with that reason.
"""

from __future__ import annotations

import functools
import os
import shlex
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterable
from pathlib import Path

from devices.model import Gpu

from .fakeroot import make_dev_nodes

# What a process expects in any /dev: (name, major, minor).
BASIC_NODES = (("null", 1, 3), ("zero", 1, 5), ("random", 1, 8), ("urandom", 1, 9))
MIG_MINORS = "/proc/driver/nvidia-caps/mig-minors"


@functools.cache
def namespace_problem() -> str | None:
    """Why a private mount namespace with these mounts cannot be made here, or None."""
    if os.geteuid() != 0:
        return "not root: cannot make a private mount namespace for the fake /sys and /dev"
    if shutil.which("unshare") is None or shutil.which("mount") is None:
        return "unshare or mount (util-linux) is not installed"
    with tempfile.TemporaryDirectory(prefix="ns-probe-") as scratch:
        node = Path(scratch) / "null"
        try:
            os.mknod(node, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        except OSError as error:
            return f"cannot mknod a device node ({error.strerror})"
        script = (
            f"mount --bind {shlex.quote(scratch)} /sys"
            f" && mount -t tmpfs -o mode=0755 fake-proc-driver /proc/driver"
            f" && mount --bind {shlex.quote(scratch)} /dev && echo x > /dev/null"
        )
        try:
            done = subprocess.run(
                ["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
                capture_output=True,
                text=True,
                timeout=20,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as error:
            return f"unshare --mount failed: {error}"
    if done.returncode != 0:
        reason = done.stderr.strip().splitlines()[-1:] or ["no output"]
        return f"cannot mount in a private namespace: {reason[0]}"
    return None


def make_private_dev(base: Path, gpus: Iterable[Gpu]) -> Path:
    """A host `/dev` for the split layout: the GPUs' nodes plus the basic ones; returns it."""
    make_dev_nodes(base, gpus, drm=True)
    dev = base / "dev"
    for name, major, minor in BASIC_NODES:
        os.mknod(dev / name, 0o666 | stat.S_IFCHR, os.makedev(major, minor))
        os.chmod(dev / name, 0o666)  # mknod's mode is filtered by the umask
    for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0")):
        (dev / name).symlink_to(target)
    (dev / "stdout").symlink_to("/proc/self/fd/1")
    (dev / "stderr").symlink_to("/proc/self/fd/2")
    return dev


def wrapper(sysfs: Path, mig_minors: Path, dev: Path | None = None) -> list[str]:
    """The command prefix that runs its arguments with the fake `/sys`, MIG table and `/dev`."""
    steps = [
        f"mount --bind {shlex.quote(str(sysfs))} /sys",
        "mount -t tmpfs -o mode=0755 fake-proc-driver /proc/driver",
        "mkdir -p /proc/driver/nvidia-caps",
        f"cp {shlex.quote(str(mig_minors))} {MIG_MINORS}",
    ]
    if dev is not None:
        steps.append(f"mount --bind {shlex.quote(str(dev))} /dev")
    script = "set -e\n" + "\n".join(steps) + '\nexec "$@"\n'
    return ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", script, "sh"]
