"""Following control.log: from the first line, across late creation, truncation and removal."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import BinaryIO

from mps.tail import LogFollower
from tests.waiting import eventually


class Lines(list[str]):
    """The lines emitted so far; `wait_for` waits until there are ``count`` of them."""

    def __init__(self) -> None:
        super().__init__()
        self._grew = asyncio.Event()

    def emit(self, line: str) -> None:
        self.append(line)
        self._grew.set()

    async def wait_for(self, count: int) -> None:
        async with asyncio.timeout(5):
            while len(self) < count:
                self._grew.clear()
                await self._grew.wait()


def read_offset(path: Path) -> int | None:
    """How far this process has read `path` through a descriptor open for reading only."""
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}") != str(path):
                continue
            info = dict(
                line.split(":\t", 1)
                for line in Path(f"/proc/self/fdinfo/{fd}").read_text().splitlines()
            )
        except OSError:
            continue
        if int(info["flags"], 8) & os.O_ACCMODE == os.O_RDONLY:
            return int(info["pos"])
    return None


async def test_follows_from_the_first_line(tmp_path: Path) -> None:
    log = tmp_path / "control.log"
    log.write_text("one\ntwo\n")
    lines = Lines()
    follower = LogFollower(log, emit=lines.emit, interval=0.01)
    follower.start()
    try:
        await lines.wait_for(2)
        with log.open("a") as handle:
            handle.write("thr")
            handle.flush()
            await eventually(
                lambda: read_offset(log) == log.stat().st_size,
                what="the follower to read the partial line",
                detail=lambda: read_offset(log),
            )
            assert lines == ["one", "two"]  # a partial line waits for its end
            handle.write("ee\n")
        await lines.wait_for(3)
        assert lines == ["one", "two", "three"]
    finally:
        await follower.stop()
    assert not follower.running


async def test_waits_for_the_file_and_restarts_on_a_new_one(tmp_path: Path) -> None:
    log = tmp_path / "log" / "control.log"
    lines = Lines()
    follower = LogFollower(log, emit=lines.emit, interval=0.01)
    looked: list[None] = []
    missing = follower._open

    def opening() -> BinaryIO | None:
        looked.append(None)
        return missing()

    follower._open = opening  # type: ignore[method-assign]
    follower.start()
    try:
        await eventually(lambda: len(looked) >= 2, what="the follower to look for the file twice")
        log.parent.mkdir()
        log.write_text("first daemon\n")
        await lines.wait_for(1)
        log.unlink()
        log.write_text("second daemon\n")
        await lines.wait_for(2)
        log.write_text("")  # truncated
        log.write_text("x\n")
        await lines.wait_for(3)
    finally:
        await follower.stop()
    assert lines == ["first daemon", "second daemon", "x"]


async def test_stop_without_start_and_twice(tmp_path: Path) -> None:
    follower = LogFollower(tmp_path / "absent.log", emit=print)
    await follower.stop()
    follower.start()
    await follower.stop()
    await follower.stop()
    assert not follower.running
