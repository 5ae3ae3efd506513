"""Bounded record of lifecycle transitions, for `/state` and for tests."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime


@dataclass(frozen=True)
class TransitionRecord:
    trigger: str
    source: str
    dest: str
    at: str  # RFC 3339, UTC
    monotonic: float
    reason: str | None = None
    detail: Mapping[str, object] = field(default_factory=dict)

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = {
            "trigger": self.trigger,
            "source": self.source,
            "dest": self.dest,
            "at": self.at,
            "reason": self.reason,
        }
        if self.detail:
            out["detail"] = dict(self.detail)
        return out


def now_rfc3339() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class History:
    def __init__(self, limit: int = 100) -> None:
        self._records: deque[TransitionRecord] = deque(maxlen=limit)

    def append(
        self,
        *,
        trigger: str,
        source: str,
        dest: str,
        reason: str | None,
        detail: Mapping[str, object],
    ) -> TransitionRecord:
        record = TransitionRecord(
            trigger=trigger,
            source=source,
            dest=dest,
            at=now_rfc3339(),
            monotonic=time.monotonic(),
            reason=reason,
            detail=dict(detail),
        )
        self._records.append(record)
        return record

    def snapshot(self) -> tuple[TransitionRecord, ...]:
        return tuple(self._records)
