"""Tiling without exhaustive search, and the reference's enumeration stated literally.

`heuristic_tiling` serves requests whose exact solution is too costly (16-GPU
nodes asked for 3 to 7 GPUs): a greedy tiling (best pair, then best marginal
gain), a positional one and a few shuffled ones are each improved by local
search -- the best swap of two GPUs between groups, or moving the padding to
another group -- until no move helps, and the best result is kept. The
shuffles come from a generator seeded by the input, so answers are
deterministic. `bench/preferred_allocation.py` measures how often this
reaches the exact answer.

With a `deadline` the search is an anytime one: it stops starting new starts
and cuts an improvement short once the clock passes it, and keeps the best
tiling found so far (a tiling cut short is still a valid one). The first
start is always built, so there is always an answer. Nodes of a few dozen
GPUs finish well before any deadline, so their answers stay deterministic;
past that the answer can depend on how fast the machine is.

`reference_tiling` enumerates every tiling in the reference's order. It is
exponential and only serves to check the other solvers.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Collection, Iterator

from resources.pacing import Pacer
from resources.tiling import Tile, Tiling, Weights, set_score

# Largest number of ways to move the padding that one local-search pass tries.
TRANSFER_CAP = 600
# Shuffled starting tilings the heuristic tries besides the greedy and positional ones.
RESTARTS = 12


def heuristic_tiling(
    weights: Weights,
    required: Collection[int],
    size: int,
    *,
    restarts: int = RESTARTS,
    deadline: float | None = None,
) -> Tiling:
    """A good tiling by local search from several starts (not always the reference's).

    Starts are a greedy tiling, a positional one and `restarts` shuffled ones
    drawn from a generator seeded by the input, so the answer is deterministic
    when there is no `deadline` (a `time.perf_counter()` value) or it is not
    reached. The best final tiling wins; the earliest start wins ties.
    """
    count = len(weights)
    pads = -count % size
    need = sorted(set(required))
    clock = _Clock(deadline)
    best: list[list[int]] | None = None
    best_score = -1
    for groups in _starts(weights, need, size, pads, restarts):
        _improve(weights, groups, set(need), size, pads, clock)
        score = sum(set_score(weights, group) for group in groups)
        if score > best_score:
            best, best_score = groups, score
        if clock.expired():
            break
    assert best is not None
    tiles = sorted(
        (Tile(tuple(sorted(g)), len(g) < size, set_score(weights, g)) for g in best),
        key=lambda tile: tile.members[0],
    )
    return Tiling(tuple(tiles), exact=False)


class _Clock:
    """A `Pacer` looked at only every EVERY-th step of a tight loop."""

    EVERY = 64

    def __init__(self, deadline: float | None) -> None:
        self._pacer = Pacer(deadline)
        self._steps = 0
        self._expired = False

    def expired(self) -> bool:
        if not self._expired:
            self._expired = self._pacer.expired()
        return self._expired

    def tick(self) -> bool:
        """`expired()`, looked at only on every EVERY-th call (cheap inside loops)."""
        self._steps += 1
        if self._steps % self.EVERY:
            return self._expired
        return self.expired()


def _starts(
    weights: Weights, need: list[int], size: int, pads: int, restarts: int
) -> Iterator[list[list[int]]]:
    """The starting tilings, built one at a time so a deadline can stop the list."""
    count = len(weights)
    yield _greedy_start(weights, need, size, pads)
    yield _positional_start(count, need, size)
    rng = random.Random(hash((count, size, tuple(need), tuple(map(tuple, weights)))))
    free = [p for p in range(count) if p not in set(need)]
    for _ in range(restarts):
        rng.shuffle(free)
        yield _positional_start(count, need, size, order=need + free)


def _greedy_start(weights: Weights, need: list[int], size: int, pads: int) -> list[list[int]]:
    remaining = set(range(len(weights)))
    groups: list[list[int]] = []

    def grow(group: list[int], target: int) -> None:
        remaining.difference_update(group)
        while len(group) < target:
            pick = max(sorted(remaining), key=lambda p: sum(weights[p][m] for m in group))
            group.append(pick)
            remaining.discard(pick)

    if need:
        group = list(need)
        grow(group, size)
        groups.append(group)
    while remaining:
        target = size if not pads or len(remaining) > size - pads else size - pads
        if target == 1 or len(remaining) == 1:
            group = [min(remaining)]
        else:
            ordered = sorted(remaining)
            pair = max(itertools.combinations(ordered, 2), key=lambda ab: weights[ab[0]][ab[1]])
            group = list(pair)
        grow(group, target)
        groups.append(group)
    return groups


def _positional_start(
    count: int, need: list[int], size: int, *, order: list[int] | None = None
) -> list[list[int]]:
    """Consecutive groups of `order` (required first); the last one takes the padding."""
    if order is None:
        order = need + [p for p in range(count) if p not in set(need)]
    return [order[i : i + size] for i in range(0, len(order), size)]


def _improve(
    weights: Weights,
    groups: list[list[int]],
    need: set[int],
    size: int,
    pads: int,
    clock: _Clock | None = None,
) -> None:
    """Best-improvement local search: swaps between groups, and moving the padding.

    Stops early, with `groups` still a valid tiling, once `clock` expires.
    """
    clock = clock if clock is not None else _Clock(None)
    count = len(weights)
    sums = [[sum(weights[x][m] for m in group) for group in groups] for x in range(count)]

    def move(x: int, source: int, target: int) -> None:
        groups[source].remove(x)
        groups[target].append(x)
        for y in range(count):
            sums[y][source] -= weights[y][x]
            sums[y][target] += weights[y][x]

    while True:
        best_delta = 0
        best_move: tuple[str, int, int, tuple[int, ...]] | None = None
        for g1, g2 in itertools.combinations(range(len(groups)), 2):
            for x in groups[g1]:
                if clock.tick():
                    return
                if x in need:
                    continue
                for y in groups[g2]:
                    if y in need:
                        continue
                    delta = (
                        sums[y][g1] - sums[x][g1] + sums[x][g2] - sums[y][g2] - 2 * weights[x][y]
                    )
                    if delta > best_delta:
                        best_delta, best_move = delta, ("swap", g1, g2, (x, y))
        padded = next((i for i, g in enumerate(groups) if len(g) < size), None)
        if pads and padded is not None:
            for donor, group in enumerate(groups):
                if donor == padded or need.intersection(group):
                    continue
                if math.comb(len(group), pads) > TRANSFER_CAP:
                    continue
                for moved in itertools.combinations(sorted(group), pads):
                    delta = sum(sums[s][padded] - sums[s][donor] for s in moved)
                    delta += 2 * set_score(weights, moved)
                    if delta > best_delta:
                        best_delta, best_move = delta, ("transfer", donor, padded, moved)
        if best_move is None:
            return
        kind, source, target, members = best_move
        if kind == "swap":
            x, y = members
            move(x, source, target)
            move(y, target, source)
        else:
            for s in members:
                move(s, source, target)


def reference_tiling(weights: Weights, required: Collection[int], size: int) -> Tiling:
    """The reference's enumeration, stated literally (exponential; for checking only).

    Every tiling of the padded list is generated in the reference's order; the
    first eligible one with the highest score is kept.
    """
    count = len(weights)
    pads = -count % size
    need = set(required)
    padded_list: list[int | None] = [*range(count), *([None] * pads)]
    best: list[list[int | None]] | None = None
    best_score = -1
    for tiling in _tilings(padded_list, size, pads):
        eligible = any(None not in group and need.issubset(group) for group in tiling)
        if not eligible:
            continue
        score = sum(set_score(weights, [p for p in g if p is not None]) for g in tiling)
        if best is None or score > best_score:
            best, best_score = tiling, score
    if best is None:
        return Tiling((), exact=True)
    tiles = tuple(
        Tile(
            tuple(sorted(p for p in group if p is not None)),
            None in group,
            set_score(weights, [p for p in group if p is not None]),
        )
        for group in best
    )
    return Tiling(tiles, exact=True)


def _tilings(items: list[int | None], size: int, pads: int) -> Iterator[list[list[int | None]]]:
    if len(items) == size:
        yield [items]
        return
    first, rest = items[0], items[1:]
    for picked in itertools.combinations(range(len(rest)), size - 1):
        group = [first, *(rest[i] for i in picked)]
        holes = group.count(None)
        if holes not in (0, pads):
            continue
        chosen = set(picked)
        remainder = [item for i, item in enumerate(rest) if i not in chosen]
        for tail in _tilings(remainder, size, pads):
            yield [group, *tail]
