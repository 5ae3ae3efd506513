"""``mount-shm``: the size rule and the exact command lines (tests/e2e/mps runs the subcommand)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from mps.layout import MpsLayout
from mps.shm import (
    FALLBACK_SIZE,
    MountError,
    ShmTools,
    is_mount_point,
    mount_command,
    mount_shm,
    shm_size,
)

MEMINFO = """MemTotal:       65781760 kB
MemFree:        12345678 kB
MemAvailable:   23456789 kB
"""


@pytest.mark.parametrize(
    ("meminfo", "size"),
    [
        pytest.param(MEMINFO, "32890880k", id="kB"),
        pytest.param("MemTotal: 7 kB\n", "3k", id="odd-rounds-down"),
        pytest.param("MemFree: 1 kB\nMemTotal:   2048 MB\n", "1024M", id="other-unit-not-first"),
        pytest.param("", FALLBACK_SIZE, id="empty"),
        pytest.param("MemTotal: lots kB\n", FALLBACK_SIZE, id="not-a-number"),
        pytest.param("MemTotal: 1024\n", FALLBACK_SIZE, id="no-unit"),
    ],
)
def test_size_is_half_of_memtotal(meminfo: str, size: str) -> None:
    assert shm_size(meminfo) == size
    assert FALLBACK_SIZE == "65536k"


def test_mount_command_line() -> None:
    assert mount_command(Path("/mps/shm"), "32890880k") == [
        "mount",
        "-t",
        "tmpfs",
        "-o",
        "rw,nosuid,nodev,noexec,relatime,size=32890880k",
        "shm",
        "/mps/shm",
    ]


def mountinfo_line(mount_point: str) -> str:
    return f"412 30 0:52 / {mount_point} rw,nosuid,nodev,noexec,relatime - tmpfs shm rw,size=4k\n"


def test_mount_point_detection(tmp_path: Path) -> None:
    spaced = tmp_path / "with space"
    text = (
        "22 1 8:1 / / rw,relatime - ext4 /dev/sda1 rw\n"
        + mountinfo_line(str(tmp_path / "shm"))
        + mountinfo_line(str(spaced).replace(" ", "\\040"))
    )
    assert is_mount_point(tmp_path / "shm", text)
    assert is_mount_point(spaced, text)
    assert not is_mount_point(tmp_path / "other", text)
    assert not is_mount_point(tmp_path, text)


class Recorder:
    def __init__(self, fail: str | None = None) -> None:
        self.calls: list[list[str]] = []
        self.fail = fail

    def __call__(self, argv: Sequence[str]) -> None:
        self.calls.append(list(argv))
        if argv[0] == self.fail:
            raise MountError(f"{argv[0]} failed")


def tools(workdir: Path, run: Recorder, *, mounted: MpsLayout | None = None) -> ShmTools:
    meminfo = workdir / "meminfo"
    meminfo.write_text(MEMINFO)
    mountinfo = workdir / "mountinfo"
    mountinfo.write_text(mountinfo_line(str(mounted.shm)) if mounted else "")
    return ShmTools(meminfo=meminfo, mountinfo=mountinfo, run=run)


def test_fresh_mount(layout: MpsLayout, workdir: Path) -> None:
    run = Recorder()
    command = mount_shm(layout, tools=tools(workdir, run))
    assert layout.shm.is_dir()
    assert layout.shm.stat().st_mode & 0o777 == 0o755
    assert run.calls == [command]
    assert command == mount_command(layout.shm, "32890880k")


def test_existing_mount_is_unmounted_first(layout: MpsLayout, workdir: Path) -> None:
    layout.shm.mkdir()
    run = Recorder()
    mount_shm(layout, tools=tools(workdir, run, mounted=layout))
    assert run.calls == [["umount", str(layout.shm)], mount_command(layout.shm, "32890880k")]


def test_unmount_failure_stops(layout: MpsLayout, workdir: Path) -> None:
    layout.shm.mkdir()
    run = Recorder(fail="umount")
    with pytest.raises(MountError, match="umount failed"):
        mount_shm(layout, tools=tools(workdir, run, mounted=layout))
    assert run.calls == [["umount", str(layout.shm)]]


def test_mount_failure_is_reported(layout: MpsLayout, workdir: Path) -> None:
    run = Recorder(fail="mount")
    with pytest.raises(MountError) as caught:
        mount_shm(layout, tools=tools(workdir, run))
    assert str(caught.value) == f"error mounting {layout.shm} as tmpfs: mount failed"


def test_leftover_files_are_kept_and_mounted_over(layout: MpsLayout, workdir: Path) -> None:
    layout.shm.mkdir()
    (layout.shm / "leftover").write_text("x")
    run = Recorder()
    mount_shm(layout, tools=tools(workdir, run))
    assert (layout.shm / "leftover").exists()
    assert len(run.calls) == 1
