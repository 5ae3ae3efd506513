"""One well-connected group of GPUs, grown greedily: preferred allocation on very large nodes.

The reference tiles every available GPU into groups and answers with the
best group of the best tiling (`resources.aligned`). Past a few dozen GPUs
even one pass of local search over a tiling costs more than the time budget
of an answer, and a tiling of hundreds of GPUs mostly decides groups that the
request does not ask about. So on large nodes the answer is grown directly:

* start from the required GPUs, or else from one seed GPU;
* repeatedly add the GPU whose links to the group add the most score (the
  lowest position on ties);
* without required GPUs, try seeds in order while time remains, skipping
  GPUs already in a grown group (they would mostly grow it again), and keep
  the best-scoring group (the earliest seed on ties).

Each growth keeps one running gain per GPU and adds a whole row of link
scores per member with `map`, so it costs O(size x GPUs) in C-level steps:
about a millisecond for 8 out of 512 GPUs. A growth that is still under way
at the deadline (a thousand out of two thousand GPUs) is completed with the
lowest free positions, so the time stays bounded and there is always an
answer.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Collection, Sequence

from resources.pacing import Pacer

__all__ = ["grow_group"]

# Far below any real gain (scores are at most a few thousand per pair), and
# still far below after every row has been added to it.
_TAKEN = -(1 << 62)


def _grow(
    weights: Sequence[Sequence[int]], start: Sequence[int], size: int, pacer: Pacer
) -> tuple[int, list[int]]:
    """The group grown from `start` to `size` members, and its score.

    Past `deadline` the group is completed with the lowest free positions
    instead, and the score returned is that of the part grown by then.
    """
    count = len(weights)
    gain = [0] * count
    for member in start:
        gain = list(map(operator.add, gain, weights[member]))
    score = sum(weights[a][b] for a, b in itertools.combinations(start, 2))
    for member in start:
        gain[member] = _TAKEN
    group = list(start)
    while len(group) < size:
        if pacer.expired():
            free = (p for p in range(count) if gain[p] > _TAKEN // 2)
            group.extend(itertools.islice(free, size - len(group)))
            break
        best = max(gain)
        pick = gain.index(best)
        score += best
        group.append(pick)
        gain = list(map(operator.add, gain, weights[pick]))
        gain[pick] = _TAKEN
    return score, group


def grow_group(
    weights: Sequence[Sequence[int]],
    required: Collection[int],
    size: int,
    *,
    deadline: float | None = None,
) -> tuple[tuple[int, ...], int]:
    """The members (ascending positions) and score of a good group of `size`.

    `weights` is the square matrix of pair scores (zero on the diagonal);
    `required` positions are always members. `deadline` is a
    `time.perf_counter()` value after which no further seed is tried and a
    growth under way is completed in position order.
    Preconditions: `len(required) <= size <= len(weights)`.
    """
    pacer = Pacer(deadline)
    need = sorted(set(required))
    if need:
        score, group = _grow(weights, need, size, pacer)
        return tuple(sorted(group)), score
    best: tuple[int, list[int]] | None = None
    covered: set[int] = set()
    for seed in range(len(weights)):
        if seed in covered:
            continue  # already in a grown group, which it would mostly grow again
        found = _grow(weights, [seed], size, pacer)
        covered.update(found[1])
        if best is None or found[0] > best[0]:
            best = found
        if pacer.expired():
            break
    assert best is not None
    return tuple(sorted(best[1])), best[0]
