"""Preferred allocation of replicas and MIG devices: the distributed and packed policies.

Candidates are grouped by their underlying device (the ID without its `::n`
replica suffix: the physical GPU for replicated GPUs, the MIG device for MIG
devices). A group's *allocated* count is its size in the resource minus its
candidates, so replicas already in use (the kubelet leaves them out of
`available`), unhealthy ones and the required ones all count as taken; a
physical GPU's *busy* count is the same over all the resource's IDs on it,
plus what this request has picked there. Each pick then takes the first
candidate ordered by:

0. with `distinctDevices` only: fewer IDs of the same group already in this
   request (required or picked) first, so the answer holds as many distinct
   devices as the candidates allow;
1. the policy on the group's allocated count -- `distributed`: fewest first
   (spread over devices); `packed`: most first (fill a device before the next);
2. fewer picks from the same group in this request first;
3. the physical GPU's busy count, fewest first: ties go to devices with
   nothing allocated yet, so MIG devices, which each form their own group,
   go to a GPU none of whose devices is in use, and spread over GPUs;
4. the canonical candidate order (the resource's device order).

Steps 1-2 are the reference's comparator (v0.20.0 added step 2: "prefer
distinct physical GPUs when breaking distributed-allocation ties"); the
reference breaks exact ties arbitrarily (an unstable sort over map order),
steps 3-4 make the answer deterministic.

All candidates of one group share their keys for steps 0-3, so each group is
a queue of its candidates in order and a heap orders the groups: a pick costs
O(log groups), not a scan of every candidate, and a request for thousands of
replicas out of tens of thousands stays in milliseconds. A pick raises the
physical GPU's busy count for every group on that GPU; their heap entries are
then stale but too small, and are refreshed when they come to the top, which
is enough because those keys only ever grow.
"""

from __future__ import annotations

import heapq
from collections import Counter, deque
from collections.abc import Iterable, Mapping, Sequence

from resources.options import AllocationPolicy


def greedy_pick(
    *,
    candidates: Sequence[str],
    needed: int,
    group_sizes: Mapping[str, int],
    group_of: Mapping[str, str],
    physical: Mapping[str, str],
    policy: AllocationPolicy,
    gpu_sizes: Mapping[str, int] | None = None,
    required: Iterable[str] = (),
    distinct: bool = False,
) -> list[str]:
    """Pick `needed` IDs from `candidates` (already in canonical order).

    Args:
        candidates: available IDs that are not required, without repeats.
        needed: how many to pick; at most `len(candidates)`.
        group_sizes: underlying device ID -> number of IDs the resource advertises for it.
        group_of: candidate ID -> its underlying device ID (the ID without a replica suffix).
        physical: candidate ID -> physical GPU UUID.
        policy: `distributed` or `packed`.
        gpu_sizes: physical GPU UUID -> number of IDs the resource advertises on
            it; without it, a GPU counts as busy only with this request's picks.
        required: the groups of the request's required IDs (one per ID).
        distinct: prefer groups this request holds nothing of yet (step 0).
    """
    queues: dict[str, deque[tuple[int, str]]] = {}
    for position, device_id in enumerate(candidates):
        queues.setdefault(group_of[device_id], deque()).append((position, device_id))
    allocated = {group: group_sizes.get(group, len(q)) - len(q) for group, q in queues.items()}
    gpu_of = {group: physical[q[0][1]] for group, q in queues.items()}
    on_offer = Counter(physical[device_id] for device_id in candidates)
    busy: Counter[str] = Counter()
    if gpu_sizes is not None:
        busy.update({gpu: gpu_sizes.get(gpu, n) - n for gpu, n in on_offer.items()})
    sign = -1 if policy is AllocationPolicy.PACKED else 1
    held: Counter[str] = Counter(required) if distinct else Counter()
    group_picks: Counter[str] = Counter()

    def key(group: str) -> tuple[int, int, int, int, int]:
        return (
            held[group],
            sign * allocated[group],
            group_picks[group],
            busy[gpu_of[group]],
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
        busy[gpu_of[group]] += 1
        if distinct:
            held[group] += 1
        picked.append(choice)
        if queues[group]:
            heapq.heappush(heap, (key(group), group))
    return picked
