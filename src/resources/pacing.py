"""A search's deadline, and sharing the interpreter with the event loop while it runs.

Preferred-allocation searches run in a worker thread, beside the event loop
that answers Allocate and the probes. CPython lets one thread run at a time
and, left alone, takes the lock from a busy thread only every 5 ms (the
switch interval); each gRPC answer needs the loop to get it back a few
times, so a long search adds tens of milliseconds to an Allocate that
arrives meanwhile. A `Pacer` gives the lock away (`time.sleep(0)`) at least
every `YIELD_SECONDS` of search, which bounds that wait to about half a
millisecond for the price of a system call per half millisecond of work.
"""

from __future__ import annotations

import math
import time

__all__ = ["YIELD_SECONDS", "Pacer"]

YIELD_SECONDS = 0.0005


class Pacer:
    """Whether a deadline (a `time.perf_counter()` value, or None) has passed.

    Every look at the clock also lets other threads run if the search has
    held the interpreter for `YIELD_SECONDS` since the last time.
    """

    def __init__(self, deadline: float | None) -> None:
        self.deadline = deadline if deadline is not None else math.inf
        self._yielded = time.perf_counter()

    def expired(self) -> bool:
        now = time.perf_counter()
        if now - self._yielded >= YIELD_SECONDS:
            time.sleep(0)  # releases the GIL: a waiting event loop runs now
            self._yielded = now = time.perf_counter()
        return now > self.deadline
