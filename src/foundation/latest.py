"""A latest-value broadcast: one writer, any number of followers.

ListAndWatch streams and the inspection endpoint both need "the current value,
and wake me when it changes". A queue per reader would buffer stale lists; a
latest-value holder lets a slow reader skip straight to the newest list, which
is exactly what the kubelet wants (each ListAndWatch message is a full list).
A follower may also ask for the value again when nothing newer came for a while
(`follow(every=...)`): a keep-alive for a reader that ages what it was told (the
kubelet forgets a DRA device's health it has not heard of for a timeout).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from functools import partial
from typing import Generic, TypeVar

T = TypeVar("T")


class LatestValue(Generic[T]):
    """Holds one value and a version number; readers wait for newer versions."""

    def __init__(self, value: T) -> None:
        self._value = value
        self._version = 0
        self._closed = False
        self._changed = asyncio.Condition()
        self._followers = 0
        self._idle = asyncio.Event()
        self._idle.set()

    @property
    def value(self) -> T:
        return self._value

    @property
    def version(self) -> int:
        return self._version

    @property
    def followers(self) -> int:
        """How many `follow()` iterations are running now."""
        return self._followers

    async def set(self, value: T) -> None:
        """Publish a new value and wake every follower."""
        async with self._changed:
            self._value = value
            self._version += 1
            self._changed.notify_all()

    async def close(self) -> None:
        """End every `follow()` iteration; the value stays readable."""
        async with self._changed:
            self._closed = True
            self._changed.notify_all()

    def _newer_than(self, version: int) -> bool:
        return self._closed or self._version != version

    async def follow(self, *, every: float | None = None) -> AsyncGenerator[T, None]:
        """Yield the current value, then every newer one until `close()`.

        A reader that falls behind sees only the newest value, never a backlog;
        a value set just before `close()` is still delivered. With `every`, the
        current value is yielded again when no newer one came for `every` seconds.
        """
        self._followers += 1
        self._idle.clear()
        try:
            seen = self._version
            yield self._value
            while True:
                async with self._changed:
                    try:
                        async with asyncio.timeout(every):
                            await self._changed.wait_for(partial(self._newer_than, seen))
                    except TimeoutError:
                        pass  # nothing newer for `every` seconds: the same value again
                    else:
                        if self._version == seen:
                            return
                        seen = self._version
                    value = self._value
                yield value
        finally:
            self._followers -= 1
            if not self._followers:
                self._idle.set()

    async def drained(self, timeout: float) -> bool:
        """After `close()`: whether every follower took the last value and ended in `timeout`.

        A follower ends only when asked for the value after the last one, so a
        ListAndWatch stream that has ended has handed its last list to gRPC.
        """
        try:
            async with asyncio.timeout(timeout):
                await self._idle.wait()
        except TimeoutError:
            return False
        return True
