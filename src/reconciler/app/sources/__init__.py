"""Event sources: each watches one thing and only posts hints into the mailbox."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, Callable
from pathlib import Path

from watchfiles import Change, awatch

# How often a socket watch wakes up without events, so a change it missed (its
# directory removed, or re-created under a new inode) is seen within that.
RECHECK_MILLISECONDS = 1000


async def pause_unless_stopped(stop: asyncio.Event, seconds: float) -> None:
    """Wait `seconds`, or less if `stop` is set meanwhile."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(seconds):
            await stop.wait()


def socket_watch(
    *directories: Path,
    stop: asyncio.Event,
    watch_filter: Callable[[Change, str], bool] | None = None,
) -> AsyncGenerator[set[tuple[Change, str]], None]:
    """Watch socket directories: changes quickly, and an empty wake-up every second."""
    return awatch(
        *directories,
        watch_filter=watch_filter,
        recursive=False,
        stop_event=stop,
        debounce=200,
        step=20,
        rust_timeout=RECHECK_MILLISECONDS,
        yield_on_timeout=True,
    )
