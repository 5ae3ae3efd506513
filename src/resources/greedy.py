"""Preferred allocation of replicas and MIG devices: the distributed and packed policies.

Candidates are grouped by their underlying device (the ID without its `::n`
replica suffix: the physical GPU for replicated GPUs, the MIG device for MIG
devices). A group's *allocated* count is its size in the resource minus its
candidates, so replicas already in use, unhealthy ones and the required ones
all count as taken. Each pick then takes the first candidate ordered by:

1. the policy on the group's allocated count -- `distributed`: fewest first
   (spread over devices); `packed`: most first (fill a device before the next);
2. fewer picks from the same group in this request first;
3. fewer picks from the same physical GPU in this request first, so that MIG
   devices, which each form their own group, still spread over GPUs on ties;
4. the canonical candidate order (the resource's device order).

Steps 1-2 are the reference's comparator; the reference breaks exact ties
arbitrarily (an unstable sort over map order), steps 3-4 make the answer
deterministic.

All candidates of one group share their keys for steps 1-3, so each group is
a queue of its candidates in order and a heap orders the groups: a pick costs
O(log groups), not a scan of every candidate, and a request for thousands of
replicas out of tens of thousands stays in milliseconds. A pick raises the
physical GPU's count for every group on that GPU; their heap entries are then
stale but too small, and are refreshed when they come to the top, which is
enough because those keys only ever grow.
"""

from __future__ import annotations

import heapq
from collections import Counter, deque
from collections.abc import Mapping, Sequence

from resources.options import AllocationPolicy


def greedy_pick(
    *,
    candidates: Sequence[str],
    needed: int,
    group_sizes: Mapping[str, int],
    group_of: Mapping[str, str],
    physical: Mapping[str, str],
    policy: AllocationPolicy,
) -> list[str]:
    """Pick `needed` IDs from `candidates` (already in canonical order).

    Args:
        candidates: available IDs that are not required, without repeats.
        needed: how many to pick; at most `len(candidates)`.
        group_sizes: underlying device ID -> number of IDs the resource advertises for it.
        group_of: candidate ID -> its underlying device ID (the ID without a replica suffix).
        physical: candidate ID -> physical GPU UUID.
        policy: `distributed` or `packed`.
    """
    queues: dict[str, deque[tuple[int, str]]] = {}
    for position, device_id in enumerate(candidates):
        queues.setdefault(group_of[device_id], deque()).append((position, device_id))
    allocated = {group: group_sizes.get(group, len(q)) - len(q) for group, q in queues.items()}
    gpu_of = {group: physical[q[0][1]] for group, q in queues.items()}
    sign = -1 if policy is AllocationPolicy.PACKED else 1
    group_picks: Counter[str] = Counter()
    gpu_picks: Counter[str] = Counter()

    def key(group: str) -> tuple[int, int, int, int]:
        return (
            sign * allocated[group],
            group_picks[group],
            gpu_picks[gpu_of[group]],
            queues[group][0][0],
        )

    heap = [(key(group), group) for group in queues]
    heapq.heapify(heap)
    picked: list[str] = []
    while len(picked) < needed and heap:
        stored, group = heapq.heappop(heap)
        current = key(group)
        if current != stored:  # another group's pick moved this one back
            heapq.heappush(heap, (current, group))
            continue
        _, choice = queues[group].popleft()
        allocated[group] += 1
        group_picks[group] += 1
        gpu_picks[gpu_of[group]] += 1
        picked.append(choice)
        if queues[group]:
            heapq.heappush(heap, (key(group), group))
    return picked
