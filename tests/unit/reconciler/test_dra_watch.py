"""The DRA socket watch: a served socket gone is posted, until the loop has served it again.

Real watchfiles on temp directories, feeding the real mailbox. The DRA side
is a stand-in whose "sockets" are plain files: the watch never looks at a
socket itself, it asks the side (`sockets_disturbed`), and counts how often
it asked, which is the positive control for "nothing was posted": once the
watch has looked again after a change, anything it was going to post for it
is in the mailbox.
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from reconciler.app import sources
from reconciler.app.sources import dra_dir
from reconciler.app.sources.dra_dir import dra_dir_watcher
from reconciler.core.mailbox import Hint, Mailbox
from tests.waiting import eventually

WAIT = 10.0


@dataclass
class Sockets:
    """The DRA side as the watch sees it; a "socket" is disturbed while its file is missing."""

    files: tuple[Path, ...]
    serving: bool = True
    looks: int = 0

    def served_directories(self) -> tuple[Path, ...]:
        return tuple(dict.fromkeys(f.parent for f in self.files)) if self.serving else ()

    def sockets_disturbed(self) -> bool:
        self.looks += 1
        return self.serving and not all(f.exists() for f in self.files)

    def repair(self) -> None:
        for file in self.files:
            file.parent.mkdir(parents=True, exist_ok=True)
            file.touch()

    async def looked(self) -> None:
        """Wait until the watch has looked twice more: it has seen what changed before."""
        before = self.looks
        await eventually(lambda: self.looks >= before + 2, what="the watch to look", timeout=WAIT)


@dataclass
class Watch:
    sockets: Sockets
    mailbox: Mailbox

    async def hint(self) -> None:
        hints = await self.mailbox.drain(timeout=WAIT)
        assert [hint for hint, _ in hints] == [Hint.DRA]

    async def quiet(self) -> None:
        await self.sockets.looked()
        assert self.mailbox.depth == 0


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, ...]:
    return tmp_path / "registry" / "driver-reg.sock", tmp_path / "plugins" / "driver" / "dra.sock"


@pytest.fixture
async def watch(files: tuple[Path, ...], monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Watch]:
    monkeypatch.setattr(dra_dir, "RECHECK_MILLISECONDS", 100)  # the pause when idle
    monkeypatch.setattr(sources, "RECHECK_MILLISECONDS", 100)  # the watch's own wake-up
    sockets = Sockets(files)
    sockets.repair()
    mailbox = Mailbox()
    stop = asyncio.Event()
    task = asyncio.create_task(dra_dir_watcher(sockets=sockets, mailbox=mailbox, stop=stop))
    try:
        yield Watch(sockets, mailbox)
    finally:
        stop.set()
        await asyncio.wait_for(task, WAIT)


async def test_each_deleted_socket_is_posted_and_intact_ones_are_not(
    watch: Watch, files: tuple[Path, ...]
) -> None:
    await watch.quiet()
    for file in files:
        file.unlink()
        await watch.hint()
        watch.sockets.repair()  # what the pass does
        await watch.quiet()


async def test_a_socket_still_missing_is_posted_again_until_it_is_served(
    watch: Watch, files: tuple[Path, ...]
) -> None:
    files[1].unlink()
    await watch.hint()
    await watch.hint()  # the pass could not serve it: the next look says so again
    watch.sockets.repair()
    await watch.quiet()


async def test_a_directory_removed_and_re_created_is_watched_again(
    watch: Watch, files: tuple[Path, ...]
) -> None:
    shutil.rmtree(files[1].parent)
    await watch.hint()
    watch.sockets.repair()  # a new directory, a new inode
    await watch.quiet()
    files[1].unlink()
    await watch.hint()


async def test_nothing_is_posted_while_no_dra_socket_is_served(
    watch: Watch, files: tuple[Path, ...]
) -> None:
    watch.sockets.serving = False
    for file in files:
        file.unlink()
    await watch.quiet()  # nothing served: nothing disturbed, nothing watched
    watch.sockets.serving = True  # the node moved to DRA
    await watch.hint()
