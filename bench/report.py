"""Rows of figures, their goals, the printed table and the JSON file.

Every measurement ends as one `Row`: a name, a unit, how many samples, the
median and the 99th percentile. Rows that are single numbers (a message size)
carry that number in both columns, and ratio rows carry the ratio of the two
medians and of the two p99s, so every row reads the same way and the JSON has
one shape. A `Goal` names the statistic it judges, so "p99 < 1 s" and
"ratio <= 1.5 at the median" are checked, and a miss is reported with its size
rather than as a bare failure: these are figures to read, not tests.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class Stat(StrEnum):
    MEDIAN = "median"
    P99 = "p99"


@dataclass(frozen=True)
class Goal:
    """`stat` of the row must be below (or at most, with `inclusive`) `limit`."""

    stat: Stat
    limit: float
    inclusive: bool = False

    def met(self, row: Row) -> bool:
        value = row.value(self.stat)
        return value <= self.limit if self.inclusive else value < self.limit

    def describe(self, unit: str) -> str:
        op = "<=" if self.inclusive else "<"
        return f"{self.stat} {op} {_number(self.limit)} {unit}".rstrip()


def percentile(samples: Sequence[float], fraction: float) -> float:
    """Nearest-rank percentile: a value that was actually observed."""
    ordered = sorted(samples)
    rank = max(1, math.ceil(fraction * len(ordered)))
    return ordered[rank - 1]


@dataclass(frozen=True)
class Row:
    group: str
    name: str
    unit: str
    count: int
    median: float
    p99: float
    goal: Goal | None = None
    note: str = ""

    @classmethod
    def of(
        cls,
        group: str,
        name: str,
        unit: str,
        samples: Sequence[float],
        *,
        goal: Goal | None = None,
        note: str = "",
    ) -> Row:
        if not samples:
            raise ValueError(f"row {name} has no samples")
        return cls(
            group,
            name,
            unit,
            len(samples),
            statistics.median(samples),
            percentile(samples, 0.99),
            goal,
            note,
        )

    @classmethod
    def single(
        cls,
        group: str,
        name: str,
        unit: str,
        value: float,
        *,
        goal: Goal | None = None,
        note: str = "",
    ) -> Row:
        return cls(group, name, unit, 1, value, value, goal, note)

    @classmethod
    def ratio(
        cls,
        group: str,
        name: str,
        top: Row,
        bottom: Row,
        *,
        goal: Goal | None = None,
        note: str = "",
    ) -> Row:
        return cls(
            group,
            name,
            "x",
            min(top.count, bottom.count),
            top.median / bottom.median,
            top.p99 / bottom.p99,
            goal,
            note or f"{top.name} / {bottom.name}",
        )

    def value(self, stat: Stat) -> float:
        return self.median if stat is Stat.MEDIAN else self.p99

    @property
    def met(self) -> bool | None:
        return None if self.goal is None else self.goal.met(self)

    def miss(self) -> str | None:
        """One line saying by how much the goal is missed, or None."""
        if self.goal is None or self.goal.met(self):
            return None
        value = self.value(self.goal.stat)
        over = value - self.goal.limit
        share = f" ({over / self.goal.limit:.0%} over)" if self.goal.limit else ""
        return (
            f"{self.name}: {self.goal.stat} {_number(value)} {self.unit}, goal "
            f"{self.goal.describe(self.unit)}; missed by {_number(over)} {self.unit}{share}"
        )

    def to_dict(self) -> dict[str, Any]:
        goal = None
        if self.goal is not None:
            goal = {
                "stat": str(self.goal.stat),
                "limit": self.goal.limit,
                "inclusive": self.goal.inclusive,
                "met": self.met,
            }
        return {
            "group": self.group,
            "name": self.name,
            "unit": self.unit,
            "count": self.count,
            "median": self.median,
            "p99": self.p99,
            "goal": goal,
            "note": self.note,
        }


@dataclass
class Outcome:
    """What one benchmark group produced: rows, plus free-form details for the JSON."""

    rows: list[Row] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)
    skipped: str | None = None


def _number(value: float) -> str:
    if value == 0 or abs(value) >= 100:
        return f"{value:.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    if abs(value) >= 0.1:
        return f"{value:.2f}"
    return f"{value:.3g}"


HEADERS = ("row", "n", "median", "p99", "unit", "goal", "", "note")


def render(rows: Sequence[Row]) -> str:
    """The one table: a line per row, goals marked ok or MISS."""
    body = [
        (
            row.name,
            str(row.count),
            _number(row.median),
            _number(row.p99),
            row.unit,
            row.goal.describe(row.unit) if row.goal else "",
            {None: "", True: "ok", False: "MISS"}[row.met],
            row.note,
        )
        for row in rows
    ]
    widths = [max(len(cells[i]) for cells in (HEADERS, *body)) for i in range(len(HEADERS))]
    rule = "  ".join("-" * w for w in widths)
    lines = [rule, "  ".join(h.ljust(w) for h, w in zip(HEADERS, widths, strict=True)), rule]
    lines += ["  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)) for cells in body]
    lines.append(rule)
    return "\n".join(line.rstrip() for line in lines)
