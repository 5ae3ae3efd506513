"""What an edit costs the kubelet: re-registrations and capacity dips, per kind of edit.

Five kinds of config edit are applied to a running plugin, each from its own
start, while every change the simulated kubelet sees is recorded with its
time: the replica count, sharing turned on for one resource of a MIG node,
a rename (`renameByDefault`), the device list strategy, and the MIG strategy.

Two figures per kind:

* re-registrations: registrations the kubelet received because of the edit,
  over all resources;
* dip: the longest time during which the node advertised fewer healthy
  devices than both before and after the edit (so a list that legitimately
  shrinks is not a dip, but an empty moment on the way is), in total and for
  any resource that exists before and after.

The goal is zero of both for the first two kinds: those edits are in-place
list updates on the open streams.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from bench.proc import Plugin, plugin_args, simulator
from bench.report import Goal, Outcome, Row, Stat
from kubelet_sim import KubeletSimulator
from kubelet_sim.model import Snapshot

ZERO = Goal(Stat.MEDIAN, 0.0, inclusive=True)
SETTLE_SECONDS = 0.3


@dataclass(frozen=True)
class Edit:
    kind: str
    profile: str
    before: str
    after: str
    goal: bool  # zero re-registrations and no dip expected


def _sliced(resource: str, replicas: int, *, flags: str = "", rename: bool = False) -> str:
    return (
        f"version: v1\n{flags}sharing:\n  timeSlicing:\n"
        f"    renameByDefault: {str(rename).lower()}\n"
        f"    resources:\n    - name: {resource}\n      replicas: {replicas}\n"
    )


GPU = "nvidia.com/gpu"
MIXED = "flags:\n  migStrategy: mixed\n"
EDITS = (
    Edit("replicas", "dgx-a100", _sliced(GPU, 2), _sliced(GPU, 4), goal=True),
    Edit(
        "sharing_one_resource",
        "a100-mig-mixed",
        f"version: v1\n{MIXED}",
        _sliced(GPU, 3, flags=MIXED),
        goal=True,
    ),
    Edit("rename", "dgx-a100", _sliced(GPU, 2), _sliced(GPU, 2, rename=True), goal=False),
    Edit(
        "device_list_strategy",
        "dgx-a100",
        "version: v1\n",
        "version: v1\nflags:\n  plugin:\n    deviceListStrategy: volume-mounts\n",
        goal=False,
    ),
    Edit("mig_strategy", "a100-mig-mixed", "version: v1\n", f"version: v1\n{MIXED}", goal=False),
)


def healthy(snap: Snapshot) -> dict[str, int]:
    return {
        r.name: sum(1 for d in r.devices if d.health == "Healthy")
        for r in snap.resources
        if r.registered or r.devices
    }


def registrations(snap: Snapshot) -> int:
    return sum(r.counters.registrations for r in snap.resources)


def longest_dip(
    timeline: list[tuple[float, dict[str, int]]], floor: Mapping[str, int], end: float
) -> float:
    """Longest stretch (seconds) where some key counted below its floor."""
    longest = 0.0
    below_since: dict[str, float] = {}
    for at, counts in timeline:
        for key, limit in floor.items():
            low = counts.get(key, 0) < limit
            if low and key not in below_since:
                below_since[key] = at
            elif not low and key in below_since:
                longest = max(longest, at - below_since.pop(key))
    for since in below_since.values():
        longest = max(longest, end - since)
    return longest


async def _record(sim: KubeletSimulator, into: list[tuple[float, Snapshot]]) -> None:
    seen = sim.snapshot().version
    while True:
        snap = await sim.wait_for(lambda s, seen=seen: s.version > seen, timeout=3600)
        seen = snap.version
        into.append((time.monotonic(), snap))


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


async def measure(edit: Edit) -> tuple[int, float]:
    """(re-registrations, longest dip in ms) for one edit on a fresh plugin."""
    async with simulator() as sim:
        config = sim.directory / "config.yaml"
        config.write_text(edit.before)
        args = plugin_args(sim.directory, edit.profile, "--config-file", str(config))
        async with Plugin(args) as plugin:
            await plugin.wait_state(lambda s: s["state"] == "serving", timeout=60)
            await sim.wait_for(lambda s: bool(s.resources) and all(r.devices for r in s.resources))
            before = sim.snapshot()
            timeline: list[tuple[float, Snapshot]] = [(time.monotonic(), before)]
            recorder = asyncio.create_task(_record(sim, timeline))
            try:
                marks = len((await plugin.wait_state(lambda s: True))["history"])
                _write(config, edit.after)
                await plugin.wait_state(
                    lambda s: (
                        any(h["trigger"] == "reconfigured" for h in s["history"][marks - 1 :])
                        and s["reason"] is None
                    ),
                    timeout=30,
                )
                await asyncio.sleep(SETTLE_SECONDS)
            finally:
                recorder.cancel()
            after = sim.snapshot()
    end = time.monotonic()
    counts = [(at, healthy(snap)) for at, snap in timeline]
    first, last = healthy(before), healthy(after)
    floor = {name: min(first[name], last.get(name, 0)) for name in first if name in last}
    floor["*total*"] = min(sum(first.values()), sum(last.values()))
    totals = [(at, {**c, "*total*": sum(c.values())}) for at, c in counts]
    dip = longest_dip(totals, floor, end)
    return registrations(after) - registrations(before), dip * 1000


async def run(*, quick: bool) -> Outcome:
    rows: list[Row] = []
    details: dict[str, object] = {}
    for edit in EDITS:
        reregistered, dip_ms = await measure(edit)
        details[edit.kind] = {"reregistrations": reregistered, "dip_ms": dip_ms}
        goal = ZERO if edit.goal else None
        rows.append(
            Row.single(
                "capacity",
                f"capacity.{edit.kind}.reregistrations",
                "",
                reregistered,
                goal=goal,
                note=f"{edit.profile}: registrations caused by the edit",
            )
        )
        rows.append(
            Row.single(
                "capacity",
                f"capacity.{edit.kind}.dip",
                "ms",
                dip_ms,
                goal=goal,
                note="longest time below both the old and the new capacity",
            )
        )
    return Outcome(rows=rows, details=details)
