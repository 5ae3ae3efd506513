"""What the fault suites measure on a running plugin: its process, its metrics, its kubelet view.

Leaks show up outside the process long before they show up inside it, so the
suites read `/proc/<pid>` (open descriptors, threads, resident memory) rather
than trusting the plugin to count its own resources. Waits poll a condition
with a deadline, never sleep for a fixed time, and fail with what was last
seen so a leak report names the descriptors that piled up.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from kubelet_sim import Snapshot
from tests.waiting import eventually


@dataclass(frozen=True)
class Usage:
    """One reading of a process's operating-system resources."""

    fds: int
    threads: int
    rss_kib: int
    # Descriptors by kind and threads by name, read only for a baseline
    # (`settled_usage`): a later failure then says which kind grew, not only
    # how many there are.
    kinds: Counter[str] = field(default_factory=Counter, compare=False, repr=False)
    thread_names: Counter[str] = field(default_factory=Counter, compare=False, repr=False)


def _status_field(pid: int, name: str) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith(name + ":"):
                return int(line.split()[1])
    raise LookupError(f"{name} not in /proc/{pid}/status")


def usage(pid: int) -> Usage:
    return Usage(
        fds=len(os.listdir(f"/proc/{pid}/fd")),
        threads=_status_field(pid, "Threads"),
        rss_kib=_status_field(pid, "VmRSS"),
    )


def fd_kinds(pid: int) -> Counter[str]:
    """Open descriptors by kind (`socket`, `anon_inode:[eventfd]`, a path...), for reports."""
    kinds: Counter[str] = Counter()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue  # closed while we looked
        kinds[re.sub(r":\[\d+\]$", "", target)] += 1
    return kinds


def thread_names(pid: int) -> Counter[str]:
    """Threads by name (`event_engine`, `grpc_global_tim`, `python`...), for reports."""
    names: Counter[str] = Counter()
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/comm") as comm:
                names[comm.read().strip()] += 1
        except OSError:
            continue  # ended while we looked
    return names


async def wait_usage(
    pid: int,
    predicate: Callable[[Usage], bool],
    *,
    timeout: float = 5.0,
    baseline: Usage | None = None,
) -> Usage:
    """Read `/proc/<pid>` until `predicate` holds; fail with the last reading and the fds.

    With a `baseline` from `settled_usage`, the failure also names the kinds of
    descriptor that grew since it.
    """
    readings: list[Usage] = []

    def holds() -> Usage | None:
        readings[:] = [usage(pid)]
        return readings[0] if predicate(readings[0]) else None

    return await eventually(
        holds,
        what="the process usage to settle",
        timeout=timeout,
        interval=0.05,
        detail=lambda: _usage_report(readings[-1], fd_kinds(pid), thread_names(pid), baseline),
    )


def _usage_report(
    last: Usage, kinds: Counter[str], names: Counter[str], baseline: Usage | None
) -> str:
    report = f"{last}; fds: {dict(kinds)}; threads: {dict(names)}"
    if baseline is not None:
        grown = dict(kinds - baseline.kinds)  # only the kinds that grew
        report += f"; grown since the baseline ({baseline.fds} fds): {grown}"
        more = dict(names - baseline.thread_names)
        report += f"; threads grown since the baseline ({baseline.threads}): {more}"
        # The baseline's own kinds too: a kind that shrank while another grew
        # (a socket swapped for a pipe) shows only side by side.
        report += f"; baseline fds: {dict(baseline.kinds)}"
        report += f"; baseline threads: {dict(baseline.thread_names)}"
    return report


async def settled_usage(pid: int, *, readings: int = 10, timeout: float = 30.0) -> Usage:
    """A reading once descriptors and threads held still for `readings` polls in a row.

    It carries the descriptors by kind and the threads by name, so that a
    later `wait_usage` failure against it says which grew.
    """
    last = [usage(pid)]
    same = [0]

    def still() -> Usage | None:
        now = usage(pid)
        held = (now.fds, now.threads) == (last[0].fds, last[0].threads)
        same[0] = same[0] + 1 if held else 0
        last[0] = now
        return now if same[0] >= readings else None

    settled = await eventually(
        still,
        what=f"descriptors and threads to hold still for {readings} readings",
        timeout=timeout,
        interval=0.05,
        detail=lambda: f"{last[0]}; fds: {dict(fd_kinds(pid))}",
    )
    return replace(settled, kinds=fd_kinds(pid), thread_names=thread_names(pid))


_SAMPLE = re.compile(
    r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>[^}]*)\})? (?P<value>\S+)$"
)


def metric(text: str, name: str, **labels: str) -> float:
    """The sum of every sample of `name` whose labels include `labels` (0 when none)."""
    total = 0.0
    for line in text.splitlines():
        found = _SAMPLE.match(line)
        if found is None or found["name"] != name:
            continue
        have = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', found["labels"] or ""))
        if all(have.get(key) == value for key, value in labels.items()):
            total += float(found["value"])
    return total


def advertised(snapshot: Snapshot) -> dict[str, tuple[str, ...]]:
    """What the kubelet can schedule: registered resources with their device IDs, in order."""
    return {
        view.name: tuple(device.id for device in view.devices)
        for view in snapshot.resources
        if view.registered and view.devices
    }
