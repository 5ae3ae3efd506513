"""Topology-aware preferred allocation of full GPUs (the reference's best-effort policy).

What the reference computes, for `size >= 2`: tile *all* available GPUs into
groups of `size`, take the best tiling (`resources.tiling`), and answer with
the best-scoring group of that tiling that holds the required GPUs (the
earliest on ties). A group's score is the sum of its pair scores
(`resources.topology`). Tiling everything, rather than picking the single best
group, keeps the GPUs left behind well connected for the next pod. For
`size == 1` the answer is the required GPU, else the first available one.
A padded group is never the answer (the reference can pick one and then
crashes on its placeholders).

The reference enumerates every tiling: 2 million for 16 GPUs in pairs. Here
the exact dynamic programme runs whenever its estimated cost fits a budget
(every request on nodes of up to 12 GPUs, and 16-GPU requests for 1, 2, 8 and
11 or more GPUs, and more sizes when several GPUs are required); otherwise a
local search gives a good tiling (`resources.tiling_search`).

Callers put the available list in a canonical order first, so answers do not
depend on the order the kubelet sends IDs in.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from resources.tiling import Weights, exact_tiling, pick, set_score, work_estimate
from resources.tiling_search import heuristic_tiling

# Estimated microseconds the exact programme may spend (see `exact_cost`).
COST_BUDGET = 45_000
# Measured share of the work left by each required GPU after the first.
REQUIRED_FACTOR = 0.4


@dataclass(frozen=True)
class Selection:
    members: tuple[int, ...]
    exact: bool
    tiling_score: int


def exact_cost(count: int, size: int, *, required: int = 0) -> float:
    """Rough cost of the exact programme in microseconds (measured in CPython 3.11).

    Each visited (state, group) pair costs about 1 us, more for large groups
    whose scores take longer to add up. Required GPUs prune groups: past the
    first, each one cuts the work by a factor of 2 to 3 on 16-GPU nodes.
    """
    return work_estimate(count, size) * _unit_cost(size) * REQUIRED_FACTOR ** max(0, required - 1)


def _unit_cost(size: int) -> float:
    """Microseconds per visited (state, group) pair."""
    return 0.7 + size / 3.5


def best_effort(
    weights: Weights, required: Collection[int], size: int, *, budget: float = COST_BUDGET
) -> Selection:
    """The reference's answer, exactly when affordable and by local search otherwise.

    Preconditions (checked by the caller): `1 <= size <= len(weights)`, the
    required positions are distinct, valid and no more than `size`.
    """
    count = len(weights)
    need = sorted(set(required))
    if size == 1:
        return Selection((need[0] if need else 0,), exact=True, tiling_score=0)
    if len(need) == size or size == count:
        members = tuple(need) if len(need) == size else tuple(range(count))
        return Selection(members, exact=True, tiling_score=set_score(weights, members))
    tiling = None
    cost = exact_cost(count, size, required=len(need))
    if cost <= budget:
        # The estimate is only approximate with required GPUs: cap the work at
        # twice the budget and fall back to the local search past that.
        tiling = exact_tiling(weights, need, size, budget=int(2 * budget / _unit_cost(size)) + 1)
    if tiling is None:
        tiling = heuristic_tiling(weights, need, size)
    return Selection(pick(tiling, need), exact=tiling.exact, tiling_score=tiling.score)
