"""LatestValue broadcast semantics and backoff arithmetic."""

from __future__ import annotations

import asyncio

import pytest

from foundation.backoff import Backoff
from foundation.latest import LatestValue


async def test_follower_sees_current_then_newest_only() -> None:
    value = LatestValue(0)
    seen: list[int] = []
    got_first = asyncio.Event()

    async def follow() -> None:
        async for item in value.follow():
            seen.append(item)
            got_first.set()

    task = asyncio.create_task(follow())
    await got_first.wait()
    # Three quick updates before the follower runs again: it skips to the newest.
    await value.set(1)
    await value.set(2)
    await value.set(3)
    await value.close()
    await task
    assert seen[0] == 0
    assert seen[-1] == 3
    assert seen == sorted(seen)
    assert value.version == 3


async def test_value_set_right_before_close_is_delivered() -> None:
    value: LatestValue[tuple[str, ...]] = LatestValue(("a",))
    seen: list[tuple[str, ...]] = []
    started = asyncio.Event()

    async def follow() -> None:
        async for item in value.follow():
            seen.append(item)
            started.set()

    task = asyncio.create_task(follow())
    await started.wait()
    await value.set(())
    await value.close()
    await task
    assert seen == [("a",), ()]


async def test_follow_after_close_yields_current_and_ends() -> None:
    value = LatestValue("x")
    await value.close()
    assert [item async for item in value.follow()] == ["x"]


async def test_drained_waits_until_a_follower_has_taken_the_last_value() -> None:
    value = LatestValue(("gpu-0",))
    stream = value.follow()
    assert await anext(stream) == ("gpu-0",)
    await value.set(())
    await value.close()
    assert await value.drained(0.05) is False  # the follower has not asked for more yet
    waiting = asyncio.create_task(value.drained(5.0))
    assert await anext(stream) == ()  # the empty list is handed over
    assert not waiting.done()
    with pytest.raises(StopAsyncIteration):
        await anext(stream)  # asking for the next one ends the follower
    assert await waiting is True


async def test_drained_without_followers_is_at_once() -> None:
    value = LatestValue(0)
    await value.close()
    assert await value.drained(0.0) is True


@pytest.mark.parametrize(
    ("attempt", "expected"),
    [
        pytest.param(0, 1.0, id="first"),
        pytest.param(1, 2.0, id="second"),
        pytest.param(5, 32.0, id="sixth"),
        pytest.param(6, 60.0, id="capped"),
        pytest.param(10_000, 60.0, id="huge"),
    ],
)
def test_backoff_doubles_to_cap(attempt: int, expected: float) -> None:
    assert Backoff().delay(attempt) == expected


def test_backoff_rejects_negative_attempts() -> None:
    with pytest.raises(ValueError, match="attempt"):
        Backoff().delay(-1)
