"""What one actuator step reports, and the per-key retry schedule.

Every actuator (the health source, the CDI spec files, each resource server
with its registration, the DRA kubelet plugin, each MPS-shared resource's gate)
converges one piece of the node and reports an `Outcome` under its own key. The
loop never assumes a step worked: a key that is not converged stays pending,
names itself in the lifecycle reason and is retried on its own backoff, like the
items of a rate-limited work queue.

`Retries` keeps, per key, the failures so far, when the key is due again and
what it was asked to become when it last failed. A pass attempts a failing key
only once it is due or once what is wanted of it has changed, so one flaky
actuator never sets the pace of another's retries; a key that converges
forgets its failures.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import NamedTuple

from foundation.backoff import Backoff
from foundation.errors import PluginError


class Kind(StrEnum):
    """Which part of the node an outcome is about."""

    INPUTS = "inputs"  #: reading the config and the devices
    HEALTH = "health"  #: the device health source
    CDI = "cdi"  #: the CDI spec files
    RESOURCE = "resource"  #: one resource's server, device list and registration
    DRA = "dra"  #: the DRA kubelet plugin of one driver: its registration and DRAPlugin sockets
    MPS = "mps"  #: one MPS-shared resource's control daemon


class Change(StrEnum):
    """Something a step really did (for the history; never inferred from a plan)."""

    STARTED = "started"  #: a server for a resource that had none
    STOPPED = "stopped"  #: a resource no longer served (an empty list announced first)
    RESTARTED = "restarted"  #: another allocation behaviour: a fresh server
    UPDATED = "updated"  #: another device list, sent on the open streams
    PUBLISHED = "published"  #: the same devices with other health, sent on the open streams
    RECREATED = "recreated"  #: the socket served afresh (deleted underneath, or a new kubelet)
    REGISTERED = "registered"  #: registered with the kubelet
    WRITTEN = "written"  #: a CDI spec file written or replaced
    REMOVED = "removed"  #: a CDI spec file removed
    FOLLOWED = "followed"  #: the health source (re)started for another inventory or policy
    ADMITTED = "admitted"  #: an MPS daemon answers with the limits a resource is served with
    WITHDRAWN = "withdrawn"  #: an MPS daemon was lost: its resource is taken back


class Key(NamedTuple):
    """One actuator: a kind, and the resource it serves where there is one per resource."""

    kind: Kind
    name: str = ""

    def __str__(self) -> str:
        return f"{self.kind}:{self.name}" if self.name else str(self.kind)


@dataclass(frozen=True)
class Outcome:
    """The result of converging one actuator.

    `changes` is empty when the actuator already held what was wanted.
    `files` names the files a CDI step wrote or removed. `error` is None for a
    converged step.
    """

    kind: Kind
    name: str = ""
    changes: frozenset[Change] = frozenset()
    error: PluginError | None = None
    files: tuple[str, ...] = field(default=())

    @property
    def key(self) -> Key:
        return Key(self.kind, self.name)

    @property
    def converged(self) -> bool:
        return self.error is None

    def describe(self) -> str:
        return f"{self.key}: {self.error}" if self.error else f"{self.key}: pending"


def outcome(
    kind: Kind,
    name: str = "",
    *changes: Change,
    error: PluginError | None = None,
    files: tuple[str, ...] = (),
) -> Outcome:
    """An `Outcome`, with its changes listed as arguments."""
    return Outcome(kind, name, frozenset(changes), error, files)


@dataclass
class _Failing:
    attempts: int
    due: float
    wanted: Hashable
    error: PluginError | None


class Retries:
    """Per-key capped backoff, like a rate-limited work queue."""

    def __init__(self, backoff: Backoff, clock: Callable[[], float] = time.monotonic) -> None:
        self._backoff = backoff
        self._clock = clock
        self._failing: dict[Key, _Failing] = {}

    def failed(self, key: Key, wanted: Hashable = None, error: PluginError | None = None) -> float:
        """Record one more failure of `key`; returns the delay before its next attempt.

        `wanted` is what the key was asked to become: a later pass that wants
        something else of it attempts it at once.
        """
        before = self._failing.get(key)
        attempt = 0 if before is None else before.attempts
        delay = self._backoff.delay(attempt)
        self._failing[key] = _Failing(attempt + 1, self._clock() + delay, wanted, error)
        return delay

    def forget(self, key: Key) -> None:
        self._failing.pop(key, None)

    def settle(self, outcome: Outcome, wanted: Hashable = None) -> None:
        """Forget a converged key, count a failure for one that is not."""
        if outcome.converged:
            self.forget(outcome.key)
        else:
            self.failed(outcome.key, wanted, outcome.error)

    def may_attempt(self, key: Key, wanted: Hashable = None) -> bool:
        """Whether a pass should try `key` now: not failing, due, or wanted otherwise."""
        failing = self._failing.get(key)
        return failing is None or failing.due <= self._clock() or failing.wanted != wanted

    def attempts(self, key: Key) -> int:
        failing = self._failing.get(key)
        return 0 if failing is None else failing.attempts

    def pending(self, kinds: frozenset[Kind] | None = None) -> dict[Key, PluginError | None]:
        """Failing keys (of `kinds`, or all) and the last error of each, by key."""
        return {
            key: failing.error
            for key, failing in sorted(self._failing.items())
            if kinds is None or key.kind in kinds
        }

    def retain(self, keep: Callable[[Key], bool]) -> None:
        """Forget failing keys whose actuator is gone (`keep` says which remain)."""
        for key in [key for key in self._failing if not keep(key)]:
            del self._failing[key]

    def next_due_in(self, kinds: frozenset[Kind] | None = None) -> float | None:
        """Seconds until the earliest failing key (of `kinds`) is due; None when none is."""
        due = [
            failing.due
            for key, failing in self._failing.items()
            if kinds is None or key.kind in kinds
        ]
        return None if not due else max(0.0, min(due) - self._clock())
