"""Waiting between labelling passes, and what ends the wait.

A pass is followed by a wait that ends in one of three ways: the sleep
interval ran out (label again), SIGHUP or a changed config (reload everything,
take a new timestamp, label again), or SIGINT/SIGTERM/SIGQUIT (clean up and
exit 0). The loop only sees a `Waiter`, so tests script the outcomes and never
sleep.

`SignalWaiter` blocks the four signals and collects them with
``sigtimedwait``: a signal that arrives during a pass is not lost and does not
interrupt the write of the features file; it ends the next wait at once.
While waiting it polls the config fingerprint (the chosen file and its
content) every ``poll`` seconds, so a ConfigMap update relabels the node even
without a signal.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Hashable
from enum import StrEnum
from typing import Protocol

__all__ = ["SIGNALS", "SignalWaiter", "Waiter", "Wake"]

SIGNALS = frozenset({signal.SIGHUP, signal.SIGINT, signal.SIGTERM, signal.SIGQUIT})
_LONGEST_SLICE = 3600.0


class Wake(StrEnum):
    TIMER = "timer"  # the sleep interval ran out
    RELOAD = "reload"  # SIGHUP, or the config changed
    STOP = "stop"  # SIGINT, SIGTERM or SIGQUIT


class Waiter(Protocol):
    def watch(self, fingerprint: Callable[[], Hashable] | None) -> None:
        """Report a change of ``fingerprint()`` (from its value now) as `Wake.RELOAD`."""
        ...

    def wait(self, timeout: float) -> Wake:
        """Wait at most ``timeout`` seconds (``math.inf``: no limit)."""
        ...


class SignalWaiter:
    """The real waiter: blocked signals, ``sigtimedwait``, config polling."""

    def __init__(self, *, poll: float = 1.0, clock: Callable[[], float] = time.monotonic) -> None:
        self._poll = poll
        self._clock = clock
        self._fingerprint: Callable[[], Hashable] | None = None
        self._baseline: Hashable = None

    def block_signals(self) -> None:
        """Hold the signals for `wait` (call once, from the main thread, before any pass)."""
        signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS)

    def watch(self, fingerprint: Callable[[], Hashable] | None) -> None:
        self._fingerprint = fingerprint
        self._baseline = fingerprint() if fingerprint is not None else None

    def _changed(self) -> bool:
        return self._fingerprint is not None and self._fingerprint() != self._baseline

    def wait(self, timeout: float) -> Wake:
        deadline = self._clock() + timeout
        while True:
            remaining = deadline - self._clock()
            if remaining <= 0:
                return Wake.TIMER
            step = min(remaining, _LONGEST_SLICE)
            if self._fingerprint is not None:
                step = min(step, self._poll)
            received = signal.sigtimedwait(SIGNALS, step)
            if received is not None:
                return Wake.RELOAD if received.si_signo == signal.SIGHUP else Wake.STOP
            if self._changed():
                return Wake.RELOAD
