"""The config watch: one non-recursive watch, and hints only for what can change the config.

Real watchfiles on temp directories, feeding the real mailbox (recording
what was posted). A change that must not post anything is checked against a
positive control rather than by waiting out a quiet period: the test then
touches the watched directory itself, an event the watch judges and never
acts on, and once the watch has judged it (events come in order) every
earlier event was judged too, so nothing posted by then means nothing posted.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

from watchfiles import Change

from reconciler.app.sources.config_dir import WatchTarget, config_dir_watcher, watch_target
from reconciler.core.mailbox import Hint, Mailbox
from tests.waiting import eventually

WAIT = 10.0


class RecordingMailbox(Mailbox):
    def __init__(self) -> None:
        super().__init__()
        self.posted: list[Hint] = []

    def post(self, hint: Hint, payload: object = None) -> None:
        self.posted.append(hint)
        super().post(hint, payload)


@dataclass(frozen=True)
class JudgedTarget(WatchTarget):
    """The real watch target, remembering each path the watch asked it about."""

    judged: list[str] = field(default_factory=list, compare=False)

    def relevant(self, change: Change, path: str) -> bool:
        self.judged.append(path)
        return super().relevant(change, path)


class Watch:
    def __init__(self, mailbox: RecordingMailbox, target: JudgedTarget) -> None:
        self.mailbox = mailbox
        self.target = target

    async def hint(self) -> None:
        """The next hint, which must be CONFIG and come within WAIT seconds."""
        hints = await self.mailbox.drain(timeout=WAIT)
        assert [hint for hint, _ in hints] == [Hint.CONFIG]

    async def quiet(self) -> None:
        """Nothing was posted for what changed since the last hint.

        The positive control: a touch of the watched directory itself, which
        the watch judges (never relevant) after every earlier event.
        """
        posted = len(self.mailbox.posted)
        directory = str(self.target.directory)
        looked = self.target.judged.count(directory)
        os.utime(directory)
        await eventually(
            lambda: self.target.judged.count(directory) > looked,
            what="the watch to judge a touch of its directory",
            timeout=WAIT,
        )
        assert len(self.mailbox.posted) == posted


def inotify_watches() -> int | None:
    """Inotify watches this process holds (Linux), or None when that cannot be read."""
    total = 0
    try:
        entries = os.listdir("/proc/self/fdinfo")
    except OSError:
        return None
    for entry in entries:
        try:
            text = Path("/proc/self/fdinfo", entry).read_text()
        except OSError:
            continue
        total += text.count("inotify wd:")
    return total


@contextlib.asynccontextmanager
async def watching(target: JudgedTarget) -> AsyncIterator[Watch]:
    """The real watcher running on `target`, once its first wake-up proved it live."""
    mailbox = RecordingMailbox()
    stop = asyncio.Event()
    task = asyncio.create_task(
        config_dir_watcher(target=target, mailbox=mailbox, stop=stop), name="config-watch"
    )
    watch = Watch(mailbox, target)
    try:
        await watch.hint()
        yield watch
    finally:
        stop.set()
        async with asyncio.timeout(WAIT):
            await task


def target(directory: str, file: Path | str) -> JudgedTarget:
    found = watch_target(directory, str(file))
    assert found is not None
    return JudgedTarget(found.directory, found.names)


def configmap(directory: Path, stamp: str, text: str) -> None:
    """Publish `text` as `config.yaml` the way the kubelet updates a ConfigMap volume."""
    data = directory / stamp
    data.mkdir()
    (data / "config.yaml").write_text(text)
    old = (directory / "..data").resolve() if (directory / "..data").exists() else None
    (directory / "..data_tmp").symlink_to(stamp)
    os.rename(directory / "..data_tmp", directory / "..data")
    if not (directory / "config.yaml").is_symlink():
        (directory / "config.yaml").symlink_to("..data/config.yaml")
    if old is not None:
        shutil.rmtree(old)


def test_what_is_watched_for_each_flag(tmp_path: Path) -> None:
    file = watch_target("", str(tmp_path / "x.yaml"))
    assert file == WatchTarget(tmp_path, frozenset({"x.yaml", "..data"}))
    assert watch_target(str(tmp_path), str(tmp_path / "ignored.yaml")) == WatchTarget(tmp_path)
    assert watch_target("", "") is None
    assert file.relevant(Change.modified, str(tmp_path / "x.yaml"))
    assert file.relevant(Change.added, str(tmp_path / "..data"))
    assert not file.relevant(Change.modified, str(tmp_path / "plugin.log"))
    assert not file.relevant(Change.modified, str(tmp_path / "sub" / "x.yaml"))
    directory = WatchTarget(tmp_path)
    assert directory.relevant(Change.added, str(tmp_path / "anything"))
    assert not directory.relevant(Change.added, str(tmp_path / "sub" / "deeper"))


async def test_one_watch_and_no_hint_for_a_busy_sibling(
    tmp_path: Path,
) -> None:
    for name in ("a", "b", "c"):
        (tmp_path / name / "nested").mkdir(parents=True)
    config = tmp_path / "x.yaml"
    config.write_text("version: v1\n")
    before = inotify_watches()
    async with watching(target("", config)) as watch:
        during = inotify_watches()
        if before is not None and during is not None:
            assert during - before == 1  # the directory only: not recursive
        log = tmp_path / "plugin.log"
        for line in range(20):
            with log.open("a") as stream:
                stream.write(f"line {line}\n")
        (tmp_path / "a" / "nested" / "x.yaml").write_text("not ours\n")
        await watch.quiet()
        config.write_text("version: v1\nflags: {migStrategy: mixed}\n")
        await watch.hint()


async def test_a_configmap_swap_posts_one_hint(
    tmp_path: Path,
) -> None:
    configmap(tmp_path, "..2024_01_01_00_00_00.1", "version: v1\n")
    async with watching(target("", tmp_path / "config.yaml")) as watch:
        configmap(tmp_path, "..2024_01_01_00_01_00.2", "version: v1\nflags: {}\n")
        await watch.hint()
        posted = len(watch.mailbox.posted)
        await watch.quiet()
        assert len(watch.mailbox.posted) == posted == 2  # the first wake-up and the swap


async def test_a_deleted_and_recreated_file_posts_one_hint(
    tmp_path: Path,
) -> None:
    config = tmp_path / "x.yaml"
    config.write_text("version: v1\n")
    async with watching(target("", config)) as watch:
        config.unlink()
        config.write_text("version: v1\nflags: {}\n")
        await watch.hint()
        await watch.quiet()
        assert len(watch.mailbox.posted) == 2


async def test_a_config_directory_hints_for_its_own_entries_not_nested_ones(
    tmp_path: Path,
) -> None:
    (tmp_path / "nested").mkdir()
    async with watching(target(str(tmp_path), "")) as watch:
        (tmp_path / "nested" / "deep.yaml").write_text("x\n")
        await watch.quiet()
        (tmp_path / "other.yaml").write_text("version: v1\n")
        await watch.hint()
