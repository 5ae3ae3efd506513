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

The reference enumerates every tiling: 2 million for 16 GPUs in pairs, and
far beyond any time at a few dozen GPUs. Here every answer is bounded in time
at any node size, in three tiers:

1. The exact dynamic programme, when its estimated cost fits `COST_BUDGET`
   (every request on nodes of up to 12 GPUs, 16-GPU requests for 1, 2, 8 and
   11 or more GPUs, more sizes when several GPUs are required), and only
   within `EXACT_SECONDS` of wall-clock time.
2. Otherwise, on nodes of up to `TILING_SEARCH_MAX` GPUs, a local search over
   tilings (`resources.tiling_search`) for at most `SEARCH_SECONDS`.
3. On larger nodes, one group grown greedily from the required GPUs or from
   seed GPUs (`resources.growth`), again for at most `SEARCH_SECONDS` beyond
   the first growth, which always completes.

The answer is the same on every run for nodes that finish within the budgets
(all real ones); on nodes of hundreds of GPUs a later seed may or may not be
reached in time. Callers put the available list in a canonical order first,
so answers do not depend on the order the kubelet sends IDs in.
"""

from __future__ import annotations

import time
from collections.abc import Collection
from dataclasses import dataclass

from resources.growth import grow_group
from resources.tiling import Weights, exact_tiling, pick, set_score, work_estimate
from resources.tiling_search import heuristic_tiling

# Estimated microseconds the exact programme may spend (see `exact_cost`).
COST_BUDGET = 45_000
# Measured share of the work left by each required GPU after the first.
REQUIRED_FACTOR = 0.4
# Wall-clock limits of the exact programme and of the search after it.
EXACT_SECONDS = 0.05
SEARCH_SECONDS = 0.05
# Beyond this many GPUs the exact programme is never tried (its state space is
# every subset; the estimate itself would be a number too large for a float).
EXACT_MAX_COUNT = 48
# Beyond this many GPUs a local search over whole tilings is too slow for the
# budget and the answer group is grown directly.
TILING_SEARCH_MAX = 64


@dataclass(frozen=True)
class Selection:
    """The chosen positions; `tiling_score` scores the tiling they came from
    (the group alone when it was grown on a large node)."""

    members: tuple[int, ...]
    exact: bool
    tiling_score: int


def exact_cost(count: int, size: int, *, required: int = 0) -> float:
    """Rough cost of the exact programme in microseconds (measured in CPython 3.11).

    Each visited (state, group) pair costs about 1 us, more for large groups
    whose scores take longer to add up. Required GPUs prune groups: past the
    first, each one cuts the work by a factor of 2 to 3 on 16-GPU nodes.
    Infinite past `EXACT_MAX_COUNT` GPUs.
    """
    if count > EXACT_MAX_COUNT:
        return float("inf")
    work = work_estimate(count, size)
    return float(work) * _unit_cost(size) * REQUIRED_FACTOR ** max(0, required - 1)


def _unit_cost(size: int) -> float:
    """Microseconds per visited (state, group) pair."""
    return 0.7 + size / 3.5


def best_effort(
    weights: Weights,
    required: Collection[int],
    size: int,
    *,
    budget: float = COST_BUDGET,
    exact_seconds: float = EXACT_SECONDS,
    search_seconds: float = SEARCH_SECONDS,
) -> Selection:
    """The reference's answer, exactly when affordable and by search otherwise.

    Never takes much longer than `exact_seconds + search_seconds`, whatever
    the size of `weights`. Preconditions (checked by the caller):
    `1 <= size <= len(weights)`, the required positions are distinct, valid
    and no more than `size`.
    """
    count = len(weights)
    need = sorted(set(required))
    if size == 1:
        return Selection((need[0] if need else 0,), exact=True, tiling_score=0)
    if len(need) == size or size == count:
        members = tuple(need) if len(need) == size else tuple(range(count))
        return Selection(members, exact=True, tiling_score=set_score(weights, members))
    tiling = None
    if exact_cost(count, size, required=len(need)) <= budget:
        # The estimate is only approximate with required GPUs: cap the work at
        # twice the budget, and the time at `exact_seconds`, and search past that.
        tiling = exact_tiling(
            weights,
            need,
            size,
            budget=int(2 * budget / _unit_cost(size)) + 1,
            deadline=time.perf_counter() + exact_seconds,
        )
    if tiling is not None:
        return Selection(pick(tiling, need), exact=True, tiling_score=tiling.score)
    deadline = time.perf_counter() + search_seconds
    if count > TILING_SEARCH_MAX:
        members, score = grow_group(weights, need, size, deadline=deadline)
        return Selection(members, exact=False, tiling_score=score)
    tiling = heuristic_tiling(weights, need, size, deadline=deadline)
    return Selection(pick(tiling, need), exact=tiling.exact, tiling_score=tiling.score)
