"""Jittered backoff, randomized watch lengths and the scalable clock."""

from __future__ import annotations

import random
import statistics
import threading
import time
from collections import Counter

import pytest

from foundation.backoff import Backoff
from kube.pacing import (
    DEFAULT_WATCH_TIMEOUTS,
    LABELLER_WATCH_TIMEOUTS,
    Clock,
    WatchTimeouts,
    jittered,
)

BACKOFF = Backoff(initial=1.0, cap=30.0)


@pytest.mark.parametrize("attempt", [0, 1, 3, 5, 10])
def test_jittered_delays_stay_between_a_floor_and_the_capped_exponential(attempt: int) -> None:
    rng = random.Random(attempt)
    ceiling = BACKOFF.delay(attempt)
    delays = [jittered(BACKOFF, attempt, rng) for _ in range(2000)]
    assert min(delays) >= 0.1
    assert max(delays) <= ceiling
    # Spread over the whole range, not bunched near one value.
    assert min(delays) < 0.1 + ceiling * 0.05
    assert max(delays) > ceiling * 0.95
    assert statistics.mean(delays) == pytest.approx((0.1 + ceiling) / 2, rel=0.05)


def test_a_fleet_does_not_retry_in_lockstep() -> None:
    # 1000 nodes lose their watch at the same instant; when does each try again?
    nodes = [random.Random(seed) for seed in range(1000)]
    retry_at = [0.0] * len(nodes)
    peaks = []
    for attempt in range(5):
        retry_at = [
            at + jittered(BACKOFF, attempt, rng) for at, rng in zip(retry_at, nodes, strict=True)
        ]
        peaks.append(Counter(int(at * 10) for at in retry_at).most_common(1)[0][1])
    # Plain exponential backoff puts all 1000 nodes in the same 100 ms at every
    # attempt. Jittered, the first retries spread over 0.1-1 s (the busiest 100 ms
    # holds under 15 % of the fleet) and every later attempt spreads them further.
    assert peaks[0] < 150, peaks
    assert peaks == sorted(peaks, reverse=True), peaks
    assert peaks[-1] < 30, peaks


def test_watch_timeouts_are_drawn_from_their_range() -> None:
    rng = random.Random(7)
    picks = [DEFAULT_WATCH_TIMEOUTS.pick(rng) for _ in range(2000)]
    assert min(picks) == 300
    assert max(picks) == 600
    assert statistics.mean(picks) == pytest.approx(450, rel=0.03)
    assert len(set(picks)) > 250  # not a handful of values a fleet would share
    labeller = [LABELLER_WATCH_TIMEOUTS.pick(rng) for _ in range(2000)]
    assert min(labeller) >= 900
    assert max(labeller) <= 1800


@pytest.mark.parametrize(("low", "high"), [(0, 10), (10, 5), (-1, 1)])
def test_watch_timeouts_reject_unusable_ranges(low: int, high: int) -> None:
    with pytest.raises(ValueError, match="low <= high"):
        WatchTimeouts(low, high)


class AskedEvent(threading.Event):
    """An event that remembers how long each wait was asked to last (and never waits)."""

    def __init__(self) -> None:
        super().__init__()
        self.asked: list[float | None] = []

    def wait(self, timeout: float | None = None) -> bool:
        self.asked.append(timeout)
        return self.is_set()


def test_a_scaled_clock_waits_and_counts_in_its_own_seconds() -> None:
    clock = Clock(scale=0.001)
    event = AskedEvent()
    assert not clock.wait(event, 100.0)  # 100 simulated seconds: 0.1 s of real time
    assert event.asked == [pytest.approx(0.1)]
    assert not clock.wait(event, -5.0)  # a deadline already past: no wait at all
    assert event.asked[-1] == 0.0
    event.set()
    assert clock.wait(event, 1e9)
    # Its own seconds: a thousand for each real one.
    before, now, after = time.monotonic(), clock.now(), time.monotonic()
    assert before / 0.001 <= now <= after / 0.001
    with pytest.raises(ValueError, match="positive"):
        Clock(scale=0)
