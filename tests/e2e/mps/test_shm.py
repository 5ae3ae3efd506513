"""The `mount-shm` subcommand of the MPS daemon, run as a process."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from mps.layout import MpsLayout

MEMINFO = """MemTotal:       65781760 kB
MemFree:        12345678 kB
MemAvailable:   23456789 kB
"""


def mountinfo_line(mount_point: str) -> str:
    return f"412 30 0:52 / {mount_point} rw,nosuid,nodev,noexec,relatime - tmpfs shm rw,size=4k\n"


RECORDING_PROGRAM = """#!{python}
import json, sys
with open({log!r}, "a") as handle:
    handle.write(json.dumps(sys.argv) + "\\n")
sys.exit({status})
"""


def recording_program(path: Path, log: Path, status: int = 0) -> Path:
    path.write_text(RECORDING_PROGRAM.format(python=sys.executable, log=str(log), status=status))
    path.chmod(0o755)
    return path


def run_mount_shm(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mps", "mount-shm", *args],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
        env={"PATH": "/usr/bin:/bin"},
    )


def test_mount_shm_subcommand(layout: MpsLayout, workdir: Path) -> None:
    log = workdir / "calls.jsonl"
    mount = recording_program(workdir / "mount", log)
    umount = recording_program(workdir / "umount", log)
    meminfo = workdir / "meminfo"
    meminfo.write_text(MEMINFO)
    mountinfo = workdir / "mountinfo"
    mountinfo.write_text(mountinfo_line(str(layout.shm)))
    layout.shm.mkdir()
    done = run_mount_shm(
        "--mps-container-root", str(layout.root),
        "--mount-command", str(mount),
        "--umount-command", str(umount),
        "--meminfo", str(meminfo),
        "--mountinfo", str(mountinfo),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    assert calls == [
        [str(umount), str(layout.shm)],
        [str(mount), "-t", "tmpfs", "-o", "rw,nosuid,nodev,noexec,relatime,size=32890880k",
         "shm", str(layout.shm)],
    ]  # fmt: skip


def test_mount_shm_subcommand_failure_exits_1(layout: MpsLayout, workdir: Path) -> None:
    mount = recording_program(workdir / "mount", workdir / "calls.jsonl", status=32)
    done = run_mount_shm(
        "--mps-container-root", str(layout.root),
        "--mount-command", str(mount),
        "--meminfo", str(workdir / "absent"),
        "--mountinfo", str(workdir / "absent"),
    )  # fmt: skip
    assert done.returncode == 1
    assert f"error mounting {layout.shm} as tmpfs" in done.stderr
    assert "exited with status 32" in done.stderr
    assert "size=65536k" in (workdir / "calls.jsonl").read_text()
