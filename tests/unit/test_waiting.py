"""The suite's one way to wait for a condition: what it returns and how it fails."""

from __future__ import annotations

import asyncio
import threading

import pytest

from tests.waiting import TimedOut, eventually, eventually_sync


async def test_returns_the_first_truthy_result_once_another_task_makes_it() -> None:
    seen: list[int] = []

    async def later() -> None:
        await asyncio.sleep(0)
        seen.append(7)

    task = asyncio.create_task(later())
    assert await eventually(lambda: seen[:1], what="a value") == [7]
    await task


async def test_a_coroutine_predicate_is_awaited() -> None:
    calls: list[None] = []

    async def third_time() -> bool:
        calls.append(None)
        return len(calls) == 3

    assert await eventually(third_time, what="the third call", interval=0) is True
    assert len(calls) == 3


async def test_times_out_naming_what_it_waited_for_and_the_last_value() -> None:
    with pytest.raises(TimedOut) as timed_out:
        await eventually(lambda: None, what="the kubelet to list 8 devices", timeout=0.05)
    assert str(timed_out.value) == "timed out after 0.05s waiting for the kubelet to list 8 devices"
    with pytest.raises(TimedOut, match=r"waiting for devices; last: \[\]$"):
        await eventually(lambda: [], what="devices", timeout=0.05)
    with pytest.raises(TimedOut, match=r"waiting for a count; last: 'three'$"):
        await eventually(lambda: "three" == "four" or None, what="a count", timeout=0.05,
                         detail=lambda: "three")  # fmt: skip


async def test_ignored_errors_mean_not_yet_and_the_last_one_is_shown() -> None:
    def refused() -> bool:
        raise ConnectionRefusedError("not listening")

    with pytest.raises(TimedOut, match=r"last attempt raised ConnectionRefusedError"):
        await eventually(refused, what="the port", timeout=0.05, ignoring=(OSError,))
    with pytest.raises(ConnectionRefusedError):  # anything else goes through at once
        await eventually(refused, what="the port", timeout=5)


def test_the_blocking_twin_waits_for_another_thread() -> None:
    done = threading.Event()
    threading.Timer(0.01, done.set).start()
    assert eventually_sync(done.is_set, what="the timer") is True
    with pytest.raises(TimedOut, match="waiting for nothing"):
        eventually_sync(lambda: None, what="nothing", timeout=0.05)
