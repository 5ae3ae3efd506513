"""The rules of what is written when: deduplication, series, the token bucket, memory.

Pure bookkeeping driven with explicit times, so the minutes-long refill of the
real limits is tested without waiting.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from kube.event_series import EventBook, EventType, Limits, NodeEvent, TokenBucket, Work

T0 = datetime(2024, 5, 1, 10, 0, 0, 500000, tzinfo=UTC)


def event(note: str, reason: str = "GPUUnhealthy") -> NodeEvent:
    return NodeEvent(EventType.WARNING, reason, "HealthCheck", note)


def write_all(book: EventBook, now: float) -> list[tuple[Work, str, int]]:
    """Perform every write allowed at `now`, as the worker would on success."""
    done = []
    while (work := book.next_work(now)) is not None:
        kind, entry = work
        if kind is Work.CREATE:
            book.created(entry, f"obj-{entry.event.note}", entry.count)
        else:
            book.updated(entry, entry.count)
        done.append((kind, entry.event.note, entry.count))
    return done


def test_bucket_gives_a_burst_then_one_token_per_refill() -> None:
    bucket = TokenBucket(burst=3, refill_seconds=300, now=0.0)
    assert [bucket.take(0.0) for _ in range(4)] == [True, True, True, False]
    assert bucket.ready_at(0.0) == pytest.approx(300.0)
    assert not bucket.take(299.0)
    assert bucket.take(300.0)
    # Idle time refills up to the burst, never beyond it.
    assert sum(bucket.take(10_000.0) for _ in range(10)) == 3


def test_repeats_become_one_series_with_an_exact_count() -> None:
    book = EventBook(Limits(), now=0.0)
    book.observe(event("gpu 3"), 0.0, T0)
    assert write_all(book, 0.0) == [(Work.CREATE, "gpu 3", 1)]
    for second in (1.0, 2.0, 3.0):
        book.observe(event("gpu 3"), second, T0)
    assert write_all(book, 3.0) == [(Work.UPDATE, "gpu 3", 4)]
    assert write_all(book, 4.0) == []


def test_a_repeat_before_the_create_is_created_as_a_series() -> None:
    book = EventBook(Limits(), now=0.0)
    book.observe(event("gpu 3"), 0.0, T0)
    book.observe(event("gpu 3"), 0.1, T0)
    assert write_all(book, 0.2) == [(Work.CREATE, "gpu 3", 2)]


def test_new_events_go_before_series_updates() -> None:
    book = EventBook(Limits(burst=2, refill_seconds=60), now=0.0)
    book.observe(event("flapping"), 0.0, T0)
    write_all(book, 0.0)
    for second in range(1, 20):
        book.observe(event("flapping"), float(second), T0)
    book.observe(event("new failure"), 20.0, T0)
    assert write_all(book, 20.0) == [(Work.CREATE, "new failure", 1)]
    assert book.due_at(20.0) == pytest.approx(60.0)
    assert write_all(book, 60.0) == [(Work.UPDATE, "flapping", 20)]


def test_at_steady_state_a_flapping_gpu_writes_at_most_once_per_refill() -> None:
    book = EventBook(Limits(), now=0.0)  # the shipped values: 25, then 1 per 5 min
    writes = 0
    for second in range(0, 3 * 3600, 30):  # unhealthy and back every 30 s for 3 hours
        book.observe(event("gpu 3"), float(second), T0)
        book.observe(event("gpu 3", reason="GPURecovered"), second + 15.0, T0)
        writes += len(write_all(book, second + 15.0))
    assert writes <= 25 + 3 * 12
    assert writes >= 3 * 12  # and it keeps the counts coming


def test_a_full_backlog_refuses_new_events_but_still_counts_repeats() -> None:
    book = EventBook(Limits(burst=1, refill_seconds=3600, backlog=2), now=0.0)
    assert book.observe(event("a"), 0.0, T0)
    write_all(book, 0.0)
    assert book.observe(event("b"), 1.0, T0)
    assert book.observe(event("c"), 1.0, T0)
    assert not book.observe(event("d"), 1.0, T0)
    assert book.observe(event("a"), 1.0, T0), "a repeat needs no room"
    assert book.observe(event("b"), 1.0, T0), "nor does a repeat of one that waits"
    entry = book.entry(event("b"))
    assert entry is not None
    assert entry.count == 2


def test_failed_create_is_forgotten_and_failed_update_keeps_counting() -> None:
    book = EventBook(Limits(), now=0.0)
    book.observe(event("a"), 0.0, T0)
    kind, entry = book.next_work(0.0) or pytest.fail("no work")
    book.failed(entry, entry.count)
    assert book.entry(event("a")) is None
    book.observe(event("a"), 1.0, T0)
    write_all(book, 1.0)
    book.observe(event("a"), 2.0, T0)
    kind, entry = book.next_work(2.0) or pytest.fail("no work")
    assert kind is Work.UPDATE
    book.failed(entry, entry.count)  # not retried...
    assert book.next_work(3.0) is None
    book.observe(event("a"), 4.0, T0)
    assert write_all(book, 4.0) == [(Work.UPDATE, "a", 3)]  # ...the next one carries the total


def test_keys_are_forgotten_after_the_event_ttl() -> None:
    book = EventBook(Limits(forget_after=3600), now=0.0)
    book.observe(event("a"), 0.0, T0)
    write_all(book, 0.0)
    book.observe(event("a"), 3601.0, T0)
    assert write_all(book, 3601.0) == [(Work.CREATE, "a", 1)]


def test_memory_is_bounded_and_never_loses_what_waits() -> None:
    book = EventBook(Limits(burst=100, refill_seconds=1, remembered=3, backlog=10), now=0.0)
    for note in ("a", "b", "c"):
        book.observe(event(note), 0.0, T0)
    write_all(book, 0.0)
    book.observe(event("d"), 1.0, T0)
    assert book.entry(event("a")) is None, "the least recently seen went"
    assert book.entry(event("d")) is not None


@pytest.mark.parametrize(
    "kwargs",
    [{"burst": 0}, {"queue": 0}, {"backlog": 0}, {"refill_seconds": 0}, {"forget_after": -1}],
)
def test_limits_refuse_values_that_would_stop_everything(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="must be"):
        Limits(**kwargs)  # type: ignore[arg-type]
