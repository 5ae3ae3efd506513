"""What one actuator step reports, and the per-key retry schedule.

Every actuator (the CDI spec files, each resource server with its
registration, each MPS gate, the health source) converges one piece of the
node and reports an `Outcome` under its own key. The loop never assumes a step
worked: a key that is not converged stays pending, names itself in the
lifecycle reason and is retried on its own backoff, like a rate-limited work
queue; a key that converges forgets its failures, so one flaky actuator never
slows the retries of another.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from foundation.backoff import Backoff
from foundation.errors import PluginError


@dataclass(frozen=True)
class Outcome:
    """The result of converging one actuator.

    `key` names the actuator: `cdi`, `resource:<name>`, `mps:<name>`, `health`.
    `changed` lists what the step did (for the history); empty when the
    actuator already held the desired value.
    """

    key: str
    converged: bool
    error: PluginError | None = None
    changed: tuple[str, ...] = ()

    @classmethod
    def done(cls, key: str, *changed: str) -> Outcome:
        return cls(key, True, None, tuple(changed))

    @classmethod
    def failed(cls, key: str, error: PluginError, *changed: str) -> Outcome:
        return cls(key, False, error, tuple(changed))

    def describe(self) -> str:
        return f"{self.key}: {self.error}" if self.error else f"{self.key}: pending"


class Retries:
    """Per-key capped backoff: `failed(key)` pushes that key's next attempt out."""

    def __init__(self, backoff: Backoff, clock: Callable[[], float] = time.monotonic) -> None:
        self._backoff = backoff
        self._clock = clock
        self._attempts: dict[str, int] = {}
        self._due: dict[str, float] = {}

    def failed(self, key: str) -> float:
        """Record one more failure of `key`; returns the delay before its next attempt."""
        attempt = self._attempts.get(key, 0)
        delay = self._backoff.delay(attempt)
        self._attempts[key] = attempt + 1
        self._due[key] = self._clock() + delay
        return delay

    def forget(self, key: str) -> None:
        self._attempts.pop(key, None)
        self._due.pop(key, None)

    def settle(self, outcomes: Iterable[Outcome]) -> None:
        """Forget converged keys, count a failure for the others."""
        for outcome in outcomes:
            if outcome.converged:
                self.forget(outcome.key)
            else:
                self.failed(outcome.key)

    def attempts(self, key: str) -> int:
        return self._attempts.get(key, 0)

    @property
    def pending(self) -> tuple[str, ...]:
        return tuple(sorted(self._due))

    def next_due_in(self) -> float | None:
        """Seconds until the earliest pending key is due; None when nothing is pending."""
        if not self._due:
            return None
        return max(0.0, min(self._due.values()) - self._clock())
