"""The one protocol every actuator implements, and the base of those with a single key.

An actuator owns one piece of the node and knows what it really holds:
`pending(desired)` is a cheap, in-memory "what I hold differs from what is
wanted", `converge(desired)` does the work and returns an `Outcome` per key
it attempted, `status()` is what it holds as a frozen value; `serves` and
`holds_nothing` let the declared order (`actuators.order`) keep a GPU from
being served through two kubelet APIs at once.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Protocol

from foundation.outcome import Key, Kind, Outcome, Retries
from reconciler.plan.desired import Desired

# What `Single.wanted` answers when the key holds what is wanted already.
NOTHING: Hashable = object()


class Actuator(Protocol):
    """One piece of the node, converged towards the desired state by difference.

    `kind` is the kind of the keys it settles (one key, or one per resource).
    """

    @property
    def kind(self) -> Kind: ...

    def pending(self, desired: Desired) -> bool:
        """Whether what it holds differs from what `desired` asks (cheap, in memory)."""
        ...

    async def converge(self, desired: Desired) -> list[Outcome]:
        """Do what is pending and due; an outcome per key attempted."""
        ...

    def serves(self, desired: Desired) -> bool:
        """Whether `desired` asks it to serve anything (for `SERVES_AFTER`)."""
        ...

    def holds_nothing(self) -> bool:
        """Whether it serves nothing now (for `SERVES_AFTER`)."""
        ...

    def status(self) -> object:
        """What it holds now, as a frozen value."""
        ...


class Single:
    """An actuator with one key: attempted when pending and due on that key's backoff."""

    key: Key

    def __init__(self, retries: Retries) -> None:
        self.retries = retries

    @property
    def kind(self) -> Kind:
        return self.key.kind

    def pending(self, desired: Desired) -> bool:
        wanted = self.wanted(desired)
        return wanted is not NOTHING and self.retries.may_attempt(self.key, wanted)

    def wanted(self, desired: Desired) -> Hashable:
        """What is wanted of the key now, or `NOTHING` when it holds that already."""
        raise NotImplementedError

    async def converge(self, desired: Desired) -> list[Outcome]:
        wanted = self.wanted(desired)
        done = await self.attempt(desired)
        for outcome in done:
            self.retries.settle(outcome, wanted)
        return done

    async def attempt(self, desired: Desired) -> list[Outcome]:
        raise NotImplementedError

    def serves(self, desired: Desired) -> bool:
        return False

    def holds_nothing(self) -> bool:
        return True
