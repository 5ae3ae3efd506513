"""When to send the next request: jittered backoff, randomized watch lengths, scalable time.

Every node runs the plugin and the labeller, so whatever one process does
against the API server the fleet does ten thousand times. Two habits make
that expensive, and this module is where both are avoided:

- **Lockstep.** After an API-server restart every node sees its watch break
  at the same instant. Plain exponential backoff then has all of them retry
  together at 1, 2, 4 ... s, and each retry is a spike. `jittered` draws
  each delay uniformly between a tenth of the initial delay and the capped
  exponential value ("full jitter"), so the retries of a fleet spread over
  the whole interval and drift further apart with every attempt.
- **Short watches.** A watch that the server closes every minute is a new
  request a minute per node. `WatchTimeouts` draws each watch's
  `timeoutSeconds` uniformly from 5 to 10 minutes, as client-go's reflector
  does, so a quiet node opens about eight watches an hour and the fleet's
  reconnections never line up.

The labeller's watches (its Node, or its NodeFeature object) are drawn from
15 to 30 minutes instead (`LABELLER_WATCH_TIMEOUTS`). A watch's length costs
nothing in freshness: events arrive as they happen, whatever the length. It
only bounds how long one connection lives (so a fleet rebalances over API
servers that were added), which the API server itself does every 30 to 60
minutes for watches that name no timeout. The labeller reads its copy once a
pass, so the longer range keeps the plugin and the labeller together under
the budget of 12 requests per node and hour: about 8 + 2.7.
With a ConfigMap of named configs, the labeller and the MPS control daemon
also follow the node's config label; they only read it, so their node
watches take the same long range (the labeller's is shared with its Node
sink when it writes node labels).

`Clock` is the pace of the schedule: backoff pauses, watch lifetimes, the
spacing of lists. Production uses real time; the benchmark scales it so that
an hour of steady state runs in seconds with the same code and the same
settings (the emulated API server scales its watch timeouts by the same
factor). Socket timeouts are never scaled: they guard against dead
connections, which take real time whatever the pace.
"""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass

from foundation.backoff import Backoff

__all__ = [
    "DEFAULT_WATCH_TIMEOUTS",
    "LABELLER_WATCH_TIMEOUTS",
    "REAL_TIME",
    "Clock",
    "WatchTimeouts",
    "jittered",
]


@dataclass(frozen=True)
class Clock:
    """Seconds as the caller means them; `scale` real seconds pass per such second."""

    scale: float = 1.0

    def __post_init__(self) -> None:
        if self.scale <= 0:
            raise ValueError("scale must be positive")

    def now(self) -> float:
        return time.monotonic() / self.scale

    def wait(self, event: threading.Event, seconds: float) -> bool:
        """Wait up to `seconds` for `event`; True when it was set."""
        return event.wait(max(0.0, seconds * self.scale))


REAL_TIME = Clock()


@dataclass(frozen=True)
class WatchTimeouts:
    """The range each watch's server-side `timeoutSeconds` is drawn from."""

    low: int = 300
    high: int = 600

    def __post_init__(self) -> None:
        if not 1 <= self.low <= self.high:
            raise ValueError("watch timeouts need 1 <= low <= high (whole seconds)")

    def pick(self, rng: random.Random) -> int:
        return rng.randint(self.low, self.high)


DEFAULT_WATCH_TIMEOUTS = WatchTimeouts()
LABELLER_WATCH_TIMEOUTS = WatchTimeouts(900, 1800)


def jittered(backoff: Backoff, attempt: int, rng: random.Random) -> float:
    """A delay for retry number `attempt`, spread over (initial/10, backoff.delay(attempt))."""
    ceiling = backoff.delay(attempt)
    floor = min(ceiling, backoff.initial / 10)
    return rng.uniform(floor, ceiling)
