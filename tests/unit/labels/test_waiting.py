"""The real waiter: timer, signals collected with sigtimedwait, config polling."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator

import pytest

from labels.waiting import SIGNALS, SignalWaiter, Wake


@pytest.fixture
def blocked() -> Iterator[None]:
    """Block the waiter's signals for the test, then restore the previous mask."""
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS)
    try:
        yield
    finally:
        # Drop anything still pending before unblocking, so nothing is delivered late.
        while signal.sigtimedwait(SIGNALS, 0) is not None:
            pass
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def test_timer(blocked: None) -> None:
    assert SignalWaiter().wait(0.02) is Wake.TIMER
    assert SignalWaiter().wait(0) is Wake.TIMER


@pytest.mark.parametrize(
    ("signum", "wake"),
    [
        pytest.param(signal.SIGHUP, Wake.RELOAD, id="hup"),
        pytest.param(signal.SIGTERM, Wake.STOP, id="term"),
        pytest.param(signal.SIGINT, Wake.STOP, id="int"),
        pytest.param(signal.SIGQUIT, Wake.STOP, id="quit"),
    ],
)
def test_signals_end_the_wait(blocked: None, signum: signal.Signals, wake: Wake) -> None:
    # Aimed at this thread, where it is blocked: sent to the process, it could
    # land on another thread (gRPC, the timeout guard) and end the test run.
    signal.pthread_kill(threading.get_ident(), signum)  # pending until collected
    assert SignalWaiter().wait(30) is wake


def test_config_change_ends_the_wait(blocked: None) -> None:
    state = {"version": 1, "polls": 0}

    def fingerprint() -> int:
        state["polls"] += 1
        if state["polls"] == 3:
            state["version"] = 2
        return state["version"]

    waiter = SignalWaiter(poll=0.001)
    waiter.watch(fingerprint)
    assert waiter.wait(30) is Wake.RELOAD
    waiter.watch(fingerprint)  # a new baseline: unchanged from here on
    assert waiter.wait(0.02) is Wake.TIMER
