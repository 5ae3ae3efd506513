"""Watches the directory holding the config for any change.

A mounted ConfigMap is updated by swapping a `..data` symlink, so the file's
own path never sees a write event: the whole directory is watched instead,
recursively, and any change is only a hint. The loop re-reads, validates and
compares digests, so a burst of events (the swap touches several entries) is
one reconcile, and an event that changes nothing changes nothing.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from loguru import logger
from watchfiles import awatch

from reconciler.mailbox import Hint, Mailbox
from reconciler.sources import pause_unless_stopped

RECHECK_SECONDS = 1.0


async def config_dir_watcher(*, directory: Path, mailbox: Mailbox, stop: asyncio.Event) -> None:
    while not stop.is_set():
        if not directory.is_dir():
            # Not mounted yet: the watch started once it is posts the hint.
            await pause_unless_stopped(stop, RECHECK_SECONDS)
            continue
        established = False
        try:
            async for changes in awatch(
                directory,
                watch_filter=None,
                recursive=True,
                stop_event=stop,
                debounce=400,
                step=100,
                rust_timeout=1000,
                yield_on_timeout=True,
            ):
                # The first wake-up, even an empty one, proves the watch is live:
                # one hint then covers any edit made while it was being set up.
                if changes or not established:
                    logger.debug("config directory changed: {n} entries", n=len(changes))
                    mailbox.post(Hint.CONFIG)
                established = True
        except FileNotFoundError:
            logger.warning("config directory {dir} disappeared; waiting", dir=str(directory))


def config_directory(config_directory: str, config_file: str) -> Path | None:
    """The directory to watch: the ConfigMap directory, else the config file's own."""
    if config_directory:
        return Path(config_directory)
    if config_file:
        return Path(config_file).absolute().parent
    return None
