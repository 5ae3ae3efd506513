"""The lifecycle machine: the table in `table.py`, enforced by `transitions`.

The machine is synchronous and side-effect free: firing a trigger only moves
the state, appends to the history and logs the step (failures at WARNING,
steps that leave the state unchanged at DEBUG). That keeps `transitions`' callback and
cancellation rules out of the asyncio code entirely; the reconcile loop does
the work, then reports what happened.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from loguru import logger
from transitions import EventData, Machine, MachineError

from states.history import History, TransitionRecord, now_rfc3339
from states.names import State, Trigger
from states.table import FINAL, IGNORED, STATES, TRANSITIONS

_FAILURES = frozenset({Trigger.FAILED, Trigger.MPS_LOST})
_RETRY_NOTE = re.compile(r"\s*\(retrying in [^)]*\)$")


def _level(
    source: State, dest: State, trigger: Trigger, reason: str | None, before: str | None
) -> str:
    """How loudly a transition is logged.

    A failure (or entering `blocked_on_error`) is a WARNING: the process
    keeps running and retries, but someone may have to act. An internal
    transition (the state does not change: a health change while serving, a
    retry while waiting for MPS) is DEBUG, unless it brings a new reason,
    which is news (a changed retry delay alone is not).
    """
    if trigger in _FAILURES or dest is State.BLOCKED_ON_ERROR:
        return "WARNING"
    if dest == source:
        same = reason is None or (
            before is not None and _RETRY_NOTE.sub("", reason) == _RETRY_NOTE.sub("", before)
        )
        return "DEBUG" if same else "INFO"
    return "INFO"


class IllegalTrigger(RuntimeError):
    """A trigger that the table neither allows nor ignores in the current state."""


class _Model:
    """The object `transitions` moves between states; conditions read event data."""

    state: str

    def needs_mps(self, event: EventData) -> bool:
        return bool(event.kwargs.get("needs_mps", False))

    def serves_nothing(self, event: EventData) -> bool:
        return bool(event.kwargs.get("serves_nothing", False))


class Lifecycle:
    """Current state, reason, and history of the plugin process."""

    def __init__(self, *, history_limit: int = 100) -> None:
        self._model = _Model()
        self._machine = Machine(
            model=self._model,
            states=[{"name": str(s), "final": s in FINAL} for s in STATES],
            transitions=[dict(t) for t in TRANSITIONS],
            initial=str(State.INIT),
            auto_transitions=False,
            send_event=True,
            ignore_invalid_triggers=False,
            queued=False,
        )
        self.history = History(history_limit)
        self.since = now_rfc3339()
        self.reason: str | None = None
        # Called with every record (metrics); must be quick and must not fire triggers.
        self.listeners: list[Callable[[TransitionRecord], None]] = []

    @property
    def state(self) -> State:
        return State(self._model.state)

    def allowed(self, trigger: Trigger) -> bool:
        return bool(self._machine.get_transitions(trigger=str(trigger), source=self._model.state))

    def fire(
        self,
        trigger: Trigger,
        *,
        reason: str | None = None,
        needs_mps: bool = False,
        serves_nothing: bool = False,
        detail: Mapping[str, object] | None = None,
    ) -> TransitionRecord | None:
        """Report a fact; returns the history record, or None for an ignored pair.

        `reason` becomes the lifecycle's reason (shown on `/state`) for
        `failed`; any transition into `serving` clears it unless a reason is
        given (a rejected reconfiguration keeps serving but says why).

        Raises:
            IllegalTrigger: the pair is neither declared nor deliberately ignored.
        """
        source = self.state
        if (source, trigger) in IGNORED:
            return None
        if not self.allowed(trigger):
            raise IllegalTrigger(f"trigger {trigger} is not allowed in state {source}")
        try:
            moved: Any = self._model.trigger(  # type: ignore[attr-defined]
                str(trigger), needs_mps=needs_mps, serves_nothing=serves_nothing
            )
        except MachineError as err:
            raise IllegalTrigger(str(err)) from err
        if not moved:
            raise IllegalTrigger(f"no transition for {trigger} in state {source}")
        dest = self.state
        level = _level(source, dest, trigger, reason, self.reason)
        if dest != source:
            self.since = now_rfc3339()
        if trigger is Trigger.FAILED or reason is not None:
            self.reason = reason
        elif dest is State.SERVING and source is not State.SERVING:
            self.reason = None
        record = self.history.append(
            trigger=str(trigger),
            source=str(source),
            dest=str(dest),
            reason=reason,
            detail=detail or {},
        )
        for listener in self.listeners:
            listener(record)
        logger.log(
            level,
            "lifecycle {source} -> {dest} on {trigger}{why}",
            source=str(source),
            dest=str(dest),
            trigger=str(trigger),
            why=f": {reason}" if reason else "",
        )
        return record
