"""Per-key retries: one failing actuator's backoff never slows another's."""

from __future__ import annotations

from foundation.backoff import Backoff
from foundation.errors import TransientError
from foundation.outcome import Outcome, Retries


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_each_key_has_its_own_backoff() -> None:
    clock = Clock()
    retries = Retries(Backoff(initial=1.0, cap=8.0), clock)
    assert retries.next_due_in() is None
    assert [retries.failed("cdi") for _ in range(5)] == [1.0, 2.0, 4.0, 8.0, 8.0]
    assert retries.failed("resource:nvidia.com/gpu") == 1.0  # a fresh key starts at the bottom
    assert retries.next_due_in() == 1.0
    assert retries.pending == ("cdi", "resource:nvidia.com/gpu")
    clock.now += 0.25
    assert retries.next_due_in() == 0.75


def test_settle_forgets_what_converged_and_counts_what_did_not() -> None:
    retries = Retries(Backoff(initial=1.0, cap=60.0), Clock())
    retries.failed("cdi")
    retries.failed("cdi")
    error = TransientError("kubelet socket missing")
    retries.settle([Outcome.done("cdi", "wrote x"), Outcome.failed("resource:a", error)])
    assert retries.attempts("cdi") == 0
    assert retries.attempts("resource:a") == 1
    assert retries.pending == ("resource:a",)
    retries.settle([Outcome.done("resource:a")])
    assert retries.pending == ()
    assert retries.next_due_in() is None


def test_outcome_describes_itself_for_the_lifecycle_reason() -> None:
    failed = Outcome.failed(
        "cdi", TransientError("cannot write CDI specs to /var/run/cdi: Read-only")
    )
    assert failed.describe() == "cdi: cannot write CDI specs to /var/run/cdi: Read-only"
    assert Outcome("mps:nvidia.com/gpu", False).describe() == "mps:nvidia.com/gpu: pending"
