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
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence

from resources.ids import strip_replica
from resources.options import AllocationPolicy


def greedy_pick(
    *,
    candidates: Sequence[str],
    needed: int,
    group_sizes: Mapping[str, int],
    physical: Mapping[str, str],
    policy: AllocationPolicy,
) -> list[str]:
    """Pick `needed` IDs from `candidates` (already in canonical order).

    Args:
        candidates: available IDs that are not required, without repeats.
        needed: how many to pick; at most `len(candidates)`.
        group_sizes: underlying device ID -> number of IDs the resource advertises for it.
        physical: candidate ID -> physical GPU UUID.
        policy: `distributed` or `packed`.
    """
    available = Counter(strip_replica(device_id) for device_id in candidates)
    allocated = {group: group_sizes.get(group, count) - count for group, count in available.items()}
    sign = -1 if policy is AllocationPolicy.PACKED else 1
    group_picks: Counter[str] = Counter()
    gpu_picks: Counter[str] = Counter()
    remaining = list(candidates)
    picked: list[str] = []
    for _ in range(needed):
        best_index = min(
            range(len(remaining)),
            key=lambda i: (
                sign * allocated[strip_replica(remaining[i])],
                group_picks[strip_replica(remaining[i])],
                gpu_picks[physical[remaining[i]]],
                i,
            ),
        )
        choice = remaining.pop(best_index)
        group = strip_replica(choice)
        allocated[group] += 1
        group_picks[group] += 1
        gpu_picks[physical[choice]] += 1
        picked.append(choice)
    return picked
