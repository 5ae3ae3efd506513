"""Per-key retries: one failing actuator's backoff never sets the pace of another's."""

from __future__ import annotations

from foundation.backoff import Backoff
from foundation.errors import TransientError
from foundation.outcome import Change, Key, Kind, Outcome, Retries

CDI = Key(Kind.CDI)
GPU = Key(Kind.RESOURCE, "nvidia.com/gpu")
MPS = Key(Kind.MPS, "nvidia.com/gpu")


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_each_key_has_its_own_backoff_and_due_time() -> None:
    clock = Clock()
    retries = Retries(Backoff(initial=1.0, cap=8.0), clock)
    assert retries.next_due_in() is None
    assert [retries.failed(CDI) for _ in range(5)] == [1.0, 2.0, 4.0, 8.0, 8.0]
    assert retries.failed(GPU) == 1.0  # a fresh key starts at the bottom
    assert retries.next_due_in() == 1.0
    assert list(retries.pending()) == [CDI, GPU]
    clock.now += 1.0
    assert retries.may_attempt(GPU)  # due
    assert not retries.may_attempt(CDI)  # not due for another 7 s, whatever GPU does
    assert retries.next_due_in() == 0.0


def test_a_key_wanted_otherwise_is_attempted_before_it_is_due() -> None:
    retries = Retries(Backoff(initial=4.0, cap=8.0), Clock())
    retries.failed(GPU, wanted=("digest-a", 1))
    assert not retries.may_attempt(GPU, ("digest-a", 1))
    assert retries.may_attempt(GPU, ("digest-b", 1))  # the desired state moved on
    assert retries.may_attempt(CDI, ())  # a key that is not failing


def test_settle_forgets_what_converged_and_counts_what_did_not() -> None:
    retries = Retries(Backoff(initial=1.0, cap=60.0), Clock())
    retries.failed(CDI)
    retries.failed(CDI)
    error = TransientError("kubelet socket missing")
    retries.settle(Outcome(Kind.CDI, changes=frozenset({Change.WRITTEN})))
    retries.settle(Outcome(Kind.RESOURCE, "a", error=error))
    assert retries.attempts(CDI) == 0
    assert retries.attempts(Key(Kind.RESOURCE, "a")) == 1
    assert retries.pending() == {Key(Kind.RESOURCE, "a"): error}
    retries.settle(Outcome(Kind.RESOURCE, "a"))
    assert retries.pending() == {}
    assert retries.next_due_in() is None


def test_pending_and_due_times_by_kind() -> None:
    clock = Clock()
    retries = Retries(Backoff(initial=1.0, cap=60.0), clock)
    retries.failed(GPU)
    retries.failed(MPS)
    retries.failed(MPS)
    not_mps = frozenset(Kind) - {Kind.MPS}
    assert list(retries.pending(not_mps)) == [GPU]
    assert retries.next_due_in(frozenset({Kind.MPS})) == 2.0
    assert retries.next_due_in(not_mps) == 1.0
    retries.retain(lambda key: key.kind is not Kind.MPS)
    assert list(retries.pending()) == [GPU]


def test_outcome_describes_itself_for_the_lifecycle_reason() -> None:
    failed = Outcome(
        Kind.CDI, error=TransientError("cannot write CDI specs to /var/run/cdi: Read-only")
    )
    assert failed.describe() == "cdi: cannot write CDI specs to /var/run/cdi: Read-only"
    assert str(Outcome(Kind.MPS, "nvidia.com/gpu").key) == "mps:nvidia.com/gpu"
    assert not failed.converged
