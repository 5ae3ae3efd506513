"""The mailbox coalesces repeated hints and hands them over in priority order."""

from __future__ import annotations

import asyncio
import threading

from reconciler.core.mailbox import Hint, Mailbox


async def test_repeated_hints_coalesce_and_come_out_by_priority() -> None:
    box = Mailbox()
    for _ in range(50):
        box.post(Hint.CONFIG)
    box.post(Hint.RETRY)
    box.post(Hint.SHUTDOWN)
    assert box.depth == 3
    drained = await box.drain()
    assert [hint for hint, _ in drained] == [Hint.SHUTDOWN, Hint.CONFIG, Hint.RETRY]
    assert box.depth == 0


async def test_latest_payload_wins() -> None:
    box = Mailbox()
    box.post(Hint.LABEL, "a")
    box.post(Hint.LABEL, "b")
    assert await box.drain() == [(Hint.LABEL, "b")]


async def test_drain_times_out_empty() -> None:
    box = Mailbox()
    assert await box.drain(timeout=0.01) == []


async def test_post_from_another_thread_wakes_the_consumer() -> None:
    box = Mailbox()
    thread = threading.Thread(target=box.post_threadsafe, args=(Hint.HEALTH, "GPU-x"))
    waiter = asyncio.create_task(box.drain(timeout=5))
    thread.start()
    assert await waiter == [(Hint.HEALTH, "GPU-x")]
    thread.join()
