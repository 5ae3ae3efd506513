"""What a runnable says of itself, as frozen values for `/state`.

Every thread and long-lived task of the plugin has one `RunnableStatus`: its
name, where it is (`RunState`), since when, and, when it is not plainly
running, why in one line. A part that is owned elsewhere answers with a
`Condition` (state and reason); `StatusCell` stamps the time it changed, so
`since` says when a thread ended, not when someone last looked.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

from states.history import now_rfc3339

Clock = Callable[[], str]


class RunState(StrEnum):
    PENDING = "pending"  # declared, not started yet (a watched part: not made yet)
    STARTING = "starting"  # its start is in progress (the loop: the first pass)
    RUNNING = "running"
    STOPPING = "stopping"
    STOPPED = "stopped"  # stopped when asked, or ended by itself without an error
    FAILED = "failed"  # its start or stop failed, or it ended with an error: see the reason


@dataclass(frozen=True)
class Condition:
    """What a part says of itself now: its state, and why when it is not plainly running."""

    state: RunState
    reason: str | None = None


RUNNING = Condition(RunState.RUNNING)
# A thread that ended without being asked to (its owner has not stopped it).
THREAD_ENDED = Condition(RunState.FAILED, "its thread ended")


@dataclass(frozen=True)
class RunnableStatus:
    """One entry of `/state`'s `runnables`."""

    name: str
    state: RunState
    since: str  # RFC 3339, when `state` (or `reason`) last changed
    reason: str | None = None

    def to_json(self) -> dict[str, object]:
        return {
            "name": self.name,
            "state": str(self.state),
            "since": self.since,
            "reason": self.reason,
        }


def one_line(error: BaseException) -> str:
    """An error as the one line a status shows: its type and the first line of its message."""
    lines = str(error).strip().splitlines()
    kind = type(error).__name__
    return f"{kind}: {lines[0]}" if lines else kind


class StatusCell:
    """A runnable's status, replaced whole when it changes; written on the event loop only."""

    def __init__(self, name: str, clock: Clock = now_rfc3339) -> None:
        self._clock = clock
        self.value = RunnableStatus(name, RunState.PENDING, clock())

    @property
    def state(self) -> RunState:
        return self.value.state

    def set(self, state: RunState, reason: str | None = None) -> RunnableStatus:
        """Move to `state`; `since` moves only when the state or the reason does."""
        value = self.value
        if (state, reason) != (value.state, value.reason):
            self.value = RunnableStatus(value.name, state, self._clock(), reason)
        return self.value

    def show(self, condition: Condition) -> RunnableStatus:
        return self.set(condition.state, condition.reason)
