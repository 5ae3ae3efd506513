"""What to send about this node, and when: deduplication, series and the rate limit.

Pure bookkeeping, no I/O and no clock of its own (every call takes the time),
so the rules can be tested without an API server and without sleeping. The
worker in `kube.events` owns one `EventBook` and asks it what to do next.

The rules, and the values chosen:

- **Deduplication.** An event is keyed by (type, reason, action, note). A
  repeat of a key already sent becomes a *series* update (`series.count`,
  `series.lastObservedTime`) of the existing Event object instead of a new
  object, as `events.k8s.io/v1` intends. The count is kept here, so it stays
  exact even when updates are deferred or one of them fails: the next one
  carries the total.
- **Rate limit.** One token bucket for the node, like client-go's event
  spam filter for one source and object: a burst of 25 writes, then one more
  every 5 minutes. Every write (a create or a series update) takes a token.
  What cannot go now waits rather than being thrown away: new events wait in
  a bounded backlog (64), repeats only raise their count. New events go
  before series updates, so a flapping GPU can delay but never starve a new
  failure. Beyond the backlog, new events are dropped and counted. At steady
  state a node therefore writes at most 12 times an hour, however much
  flaps.
- **Memory.** At most 256 keys are remembered (the least recently seen one
  that is not waiting is forgotten first), and a key not seen for an hour is
  forgotten: that is the API server's default event TTL, so its object is
  probably gone and the next occurrence starts a new one.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum

__all__ = [
    "Entry",
    "EventBook",
    "EventType",
    "Limits",
    "NodeEvent",
    "TokenBucket",
    "Work",
    "micro_time",
]


# A token promised by `ready_at` must be there at that time despite rounding.
_EPSILON = 1e-9


def micro_time(moment: datetime) -> str:
    """A MicroTime string (`2024-05-01T10:00:00.000001Z`), never without its fraction.

    The API server wants exactly six fractional digits, and the official client
    drops a zero fraction when it re-serialises a body (see `kube.event_api`),
    so a time on a whole second is moved by one microsecond.
    """
    moment = moment.astimezone(UTC)
    if moment.microsecond == 0:
        moment = moment.replace(microsecond=1)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class EventType(StrEnum):
    NORMAL = "Normal"
    WARNING = "Warning"


@dataclass(frozen=True)
class NodeEvent:
    """Something the plugin saw, as people will read it in `kubectl describe node`."""

    type: EventType
    reason: str  # UpperCamelCase, e.g. GPUUnhealthy
    action: str  # what the plugin was doing, e.g. HealthCheck
    note: str  # one line; cut to the API's 1 KiB when sent

    @property
    def key(self) -> tuple[str, str, str, str]:
        return (str(self.type), self.reason, self.action, self.note)


@dataclass(frozen=True)
class Limits:
    """The rate limit and the bounds on memory; see the module docstring."""

    burst: int = 25
    refill_seconds: float = 300.0
    queue: int = 256  # events handed over by the loop, not yet looked at
    backlog: int = 64  # new events waiting for a token
    remembered: int = 256  # keys kept for deduplication
    forget_after: float = 3600.0  # the API server's default event TTL

    def __post_init__(self) -> None:
        if self.burst < 1 or self.queue < 1 or self.backlog < 1 or self.remembered < 1:
            raise ValueError("burst, queue, backlog and remembered must be at least 1")
        if self.refill_seconds <= 0 or self.forget_after <= 0:
            raise ValueError("refill_seconds and forget_after must be positive")


class TokenBucket:
    """`burst` tokens, one more every `refill_seconds`; time is passed in."""

    def __init__(self, burst: int, refill_seconds: float, now: float) -> None:
        self._burst = float(burst)
        self._refill = refill_seconds
        self._tokens = float(burst)
        self._at = now

    def _fill(self, now: float) -> None:
        if now > self._at:
            self._tokens = min(self._burst, self._tokens + (now - self._at) / self._refill)
            self._at = now

    def take(self, now: float) -> bool:
        self._fill(now)
        if self._tokens >= 1.0 - _EPSILON:
            self._tokens = max(0.0, self._tokens - 1.0)
            return True
        return False

    def ready_at(self, now: float) -> float:
        """When the next token is there (`now` when one already is)."""
        self._fill(now)
        if self._tokens >= 1.0 - _EPSILON:
            return now
        return now + (1.0 - self._tokens) * self._refill


@dataclass
class Entry:
    """One key: its Event object (once created) and the occurrences seen."""

    event: NodeEvent
    first: datetime  # eventTime of the object
    last: datetime  # lastObservedTime
    seen_at: float  # monotonic time of the last occurrence
    count: int = 1  # occurrences observed
    sent: int = 0  # occurrences the API server has been told about
    name: str | None = None  # the Event object's name once created

    @property
    def waiting(self) -> bool:
        """Not on the server yet, or the server's count is behind."""
        return self.name is None or self.sent < self.count


class Work(StrEnum):
    CREATE = "create"
    UPDATE = "update"


class EventBook:
    """Keys seen, the backlog of new events, and the bucket that paces writes."""

    def __init__(self, limits: Limits, now: float) -> None:
        self.limits = limits
        self._bucket = TokenBucket(limits.burst, limits.refill_seconds, now)
        self._entries: OrderedDict[tuple[str, str, str, str], Entry] = OrderedDict()
        self._backlog: deque[Entry] = deque()

    def observe(self, event: NodeEvent, now: float, wall: datetime) -> bool:
        """Count one occurrence; False when it is new and the backlog is full (dropped)."""
        key = event.key
        entry = self._entries.get(key)
        if entry is not None and self._expired(entry, now):
            del self._entries[key]  # its object has probably expired meanwhile
            entry = None
        if entry is not None:
            entry.count += 1
            entry.last, entry.seen_at = wall, now
            self._entries.move_to_end(key)
            return True
        if len(self._backlog) >= self.limits.backlog:
            return False
        entry = Entry(event=event, first=wall, last=wall, seen_at=now)
        self._entries[key] = entry
        self._backlog.append(entry)
        self._trim()
        return True

    def next_work(self, now: float) -> tuple[Work, Entry] | None:
        """The next write to make now, its token taken; None when none is due or allowed."""
        work = self._peek()
        if work is None or not self._bucket.take(now):
            return None
        if work[0] is Work.CREATE:
            self._backlog.popleft()
        return work

    def due_at(self, now: float) -> float | None:
        """When `next_work` will have something; None when nothing is waiting."""
        if self._peek() is None:
            return None
        return self._bucket.ready_at(now)

    def created(self, entry: Entry, name: str, count: int) -> None:
        entry.name, entry.sent = name, count

    def updated(self, entry: Entry, count: int) -> None:
        entry.sent = count

    def failed(self, entry: Entry, count: int) -> None:
        """A write failed: it is not retried, later occurrences carry the count on."""
        if entry.name is None:
            self._entries.pop(entry.event.key, None)  # the next occurrence starts afresh
        else:
            entry.sent = count

    @property
    def backlog(self) -> int:
        return len(self._backlog)

    def entry(self, event: NodeEvent) -> Entry | None:
        return self._entries.get(event.key)

    def _expired(self, entry: Entry, now: float) -> bool:
        return entry.name is not None and now - entry.seen_at > self.limits.forget_after

    def _peek(self) -> tuple[Work, Entry] | None:
        if self._backlog:
            return Work.CREATE, self._backlog[0]
        stale = next(
            (e for e in self._entries.values() if e.name is not None and e.sent < e.count), None
        )
        return None if stale is None else (Work.UPDATE, stale)

    def _trim(self) -> None:
        while len(self._entries) > self.limits.remembered:
            victim = next((k for k, e in self._entries.items() if not e.waiting), None)
            if victim is None:
                return  # everything remembered is still waiting: the backlog bounds it
            del self._entries[victim]
