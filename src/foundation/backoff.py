"""Capped exponential backoff for retries (1 s doubling to 60 s by default)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Backoff:
    """Delay before retry number `attempt` (0-based): initial * 2**attempt, capped."""

    initial: float = 1.0
    cap: float = 60.0

    def delay(self, attempt: int) -> float:
        if attempt < 0:
            raise ValueError("attempt must be >= 0")
        # Avoid float overflow for very large attempt counts.
        if attempt > 62:
            return self.cap
        return float(min(self.cap, self.initial * (2**attempt)))
