"""What a reconfiguration did, as the history and Events tell it.

Built from the outcomes the actuators reported, never from a comparison of
plans: a resource appears under `restarted` only if its server really was
restarted, under `updated` only if a new device list really went out on its
open stream.
"""

from __future__ import annotations

from collections.abc import Sequence

from foundation.outcome import Outcome
from reconciler.plan import Plan

_BUCKETS = {
    "started": "started",
    "stopped": "stopped",
    "restarted": "restarted",
    "updated": "updated",
    "published": "updated",
    "recreated": "reregistered",
}


def applied_detail(
    previous: Plan | None, plan: Plan, outcomes: Sequence[Outcome]
) -> dict[str, object]:
    """`changed`, the plan digests, and the resources per kind of change."""
    lists: dict[str, list[str]] = {
        "started": [],
        "stopped": [],
        "restarted": [],
        "updated": [],
        "reregistered": [],
    }
    cdi: list[str] = []
    for outcome in outcomes:
        kind, _, name = outcome.key.partition(":")
        if kind == "cdi":
            cdi.extend(outcome.changed)
            continue
        if kind != "resource":
            continue
        for change in outcome.changed:
            bucket = _BUCKETS.get(change)
            if bucket is not None and name not in lists[bucket]:
                lists[bucket].append(name)
    changed = previous is None or previous.digest != plan.digest or any(lists.values()) or bool(cdi)
    detail: dict[str, object] = {
        "changed": changed,
        "from": previous.digest if previous else None,
        "to": plan.digest,
    }
    detail.update(
        {
            bucket: sorted(names)
            for bucket, names in lists.items()
            if names or bucket != "reregistered"
        }
    )
    if cdi:
        detail["cdi"] = cdi
    return detail
