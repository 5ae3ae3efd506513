"""Watches the config file's own directory, and only the entries that can change the config.

What is watched (`watch_target`):

* `--config-directory DIR` (a mounted ConfigMap with one file per named
  config): DIR, and every entry directly in it, since any of them may be the
  selected config, including the `..data` symlink that Kubernetes swaps to
  update a ConfigMap volume atomically.
* `--config-file PATH`: the directory holding PATH, and only the entries
  named like PATH or `..data`. A ConfigMap mounted as a directory updates
  PATH (a symlink to `..data/<key>`) only by swapping `..data`, so the file's
  own name never sees an event; an editor that saves by writing a new file
  and renaming it over PATH, or a file deleted and created again, shows up
  under PATH's name.

The watch is never recursive: one inotify watch, whatever else lives beside
the file (a config in `/tmp` must not cost a watch per directory of `/tmp`,
nor wake the plugin whenever a log file there grows).

Every relevant event is only a hint: the loop re-reads, validates and
compares, so a burst of events (the swap touches several entries) is one
reconcile, and an event that changes nothing changes nothing. A PATH that is
itself a symlink to a file elsewhere (other than through `..data`) is not
followed; edits of its target are picked up on the next SIGHUP.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path

from loguru import logger
from watchfiles import Change, awatch

from reconciler.app.sources import pause_unless_stopped
from reconciler.core.mailbox import Hint, Mailbox

RECHECK_SECONDS = 1.0
# The entry a ConfigMap volume swaps to publish new content.
CONFIGMAP_DATA = "..data"


@dataclass(frozen=True)
class WatchTarget:
    """A directory to watch, and which of its entries matter (None: all of them)."""

    directory: Path
    names: frozenset[str] | None = None

    def relevant(self, change: Change, path: str) -> bool:
        """Whether an event on `path` may change the config."""
        entry = Path(path)
        if entry.parent != self.directory:
            return False  # the directory itself, or something below an entry
        return self.names is None or entry.name in self.names


def watch_target(config_directory: str, config_file: str) -> WatchTarget | None:
    """What to watch for the given flags; None when no file is configured."""
    if config_directory:
        return WatchTarget(Path(config_directory).absolute())
    if config_file:
        path = Path(config_file).absolute()
        return WatchTarget(path.parent, frozenset({path.name, CONFIGMAP_DATA}))
    return None


async def config_dir_watcher(*, target: WatchTarget, mailbox: Mailbox, stop: asyncio.Event) -> None:
    directory = target.directory
    while not stop.is_set():
        if not directory.is_dir():
            # Not mounted yet: the watch started once it is posts the hint.
            await pause_unless_stopped(stop, RECHECK_SECONDS)
            continue
        watch = awatch(
            directory,
            watch_filter=target.relevant,
            recursive=False,
            stop_event=stop,
            debounce=400,
            step=100,
            rust_timeout=int(RECHECK_SECONDS * 1000),
            yield_on_timeout=True,
        )
        # One hint for whatever changed before this watch: the loop reads it
        # only after the watch is in place (the first step below sets it up
        # before the loop can run), so an edit is either read or seen.
        mailbox.post(Hint.CONFIG)
        try:
            async for changes in watch:
                if changes:
                    logger.debug("config changed: {n} entries", n=len(changes))
                    mailbox.post(Hint.CONFIG)
        except FileNotFoundError:
            logger.warning("config directory {dir} disappeared; waiting", dir=str(directory))
