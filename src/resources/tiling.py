"""Tilings of the available GPUs and the exact solver for the best one.

The reference's best-effort policy (see `resources.aligned`) tiles all
available GPUs into groups of the requested size, padding the last group with
placeholders when the count does not divide, and keeps the first tiling, in
its enumeration order, with the highest total score among those where one
unpadded group holds every required GPU.

`exact_tiling` finds that same tiling by dynamic programming over the set of
GPUs still to tile. Like the enumeration it always extends the group of the
lowest remaining GPU; among equal totals it keeps the group whose other
members come first in the enumeration's combination order (placeholders
after every real GPU), so it returns the very tiling the reference keeps.
Its cost is the number of (state, group) pairs it visits, which
`work_estimate` gives in closed form.

Positions are indices into the caller's list of available GPUs.
"""

from __future__ import annotations

import itertools
import math
import operator
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass
from typing import overload

from resources.pacing import Pacer

Weights = Sequence[Sequence[int]]
# Steps between two looks at the clock: a fraction of a millisecond of work.
_CLOCK_EVERY = 128


class SubMatrix(Sequence[Sequence[int]]):
    """The pair scores of some rows and columns of a larger matrix, cut row by row on demand.

    A pool of 2000 GPUs has 4 million pairs, but growing one group reads
    only the rows of its members; cutting each row when it is first read
    (with `itemgetter`, in C) keeps that cost proportional to what is read.
    Indexing is slower than a list's, so small pools are better copied whole.
    """

    def __init__(self, matrix: Weights, indices: Sequence[int]) -> None:
        self._matrix = matrix
        self._indices = list(indices)
        self._cut = operator.itemgetter(*self._indices)
        self._rows: dict[int, Sequence[int]] = {}

    def __len__(self) -> int:
        return len(self._indices)

    @overload
    def __getitem__(self, position: int) -> Sequence[int]: ...
    @overload
    def __getitem__(self, position: slice) -> Sequence[Sequence[int]]: ...
    def __getitem__(self, position: int | slice) -> Sequence[int] | Sequence[Sequence[int]]:
        if isinstance(position, slice):
            return [self[p] for p in range(len(self))[position]]
        row = self._rows.get(position)
        if row is None:
            row = self._rows[position] = self._cut(self._matrix[self._indices[position]])
        return row


@dataclass(frozen=True)
class Tile:
    """One group of a tiling: real members (ascending positions) and whether it is padded."""

    members: tuple[int, ...]
    padded: bool
    score: int


@dataclass(frozen=True)
class Tiling:
    tiles: tuple[Tile, ...]
    exact: bool

    @property
    def score(self) -> int:
        return sum(tile.score for tile in self.tiles)


class _OverBudget(Exception):
    pass


def set_score(weights: Weights, members: Sequence[int]) -> int:
    """Sum of the pair scores inside a group."""
    return sum(weights[a][b] for a, b in itertools.combinations(members, 2))


def work_estimate(count: int, size: int) -> int:
    """Exact number of (state, group) pairs `exact_tiling` visits with no required GPUs.

    A set of remaining GPUs is a reachable state when the removed ones split
    into groups whose lowest members all lie below the lowest remaining GPU;
    with `j` GPUs below it that holds whenever the number of removed groups is
    at most `j`. Required GPUs only ever remove groups, so this is also an
    upper bound for requests that have some.
    """
    if size <= 1 or size >= count:
        return 1
    pads = -count % size
    total = 0
    for left in range(1, count + 1):
        removed = count - left
        for pad_pending in (True, False) if pads else (False,):
            if pad_pending or not pads:
                if removed % size:
                    continue
                groups = removed // size
            else:
                full = removed - (size - pads)
                if full < 0 or full % size:
                    continue
                groups = full // size + 1
            if groups == 0:
                states = 1 if left == count else 0
            else:
                states = sum(math.comb(count - 1 - j, left - 1) for j in range(groups, removed + 1))
            shapes = math.comb(left - 1, size - 1)
            if pad_pending:
                shapes += math.comb(left - 1, size - 1 - pads)
            total += states * shapes
    return total


def pick(tiling: Tiling, required: Collection[int]) -> tuple[int, ...]:
    """The best unpadded group holding every required position (earliest on ties)."""
    need = set(required)
    best: Tile | None = None
    for tile in tiling.tiles:
        if tile.padded or not need.issubset(tile.members):
            continue
        if best is None or tile.score > best.score:
            best = tile
    return best.members if best is not None else ()


def exact_tiling(
    weights: Weights,
    required: Collection[int],
    size: int,
    *,
    budget: int | None = None,
    deadline: float | None = None,
) -> Tiling | None:
    """The tiling the reference keeps, or None when it runs out of budget first.

    `budget` caps the (state, group) pairs visited; `deadline` is a
    `time.perf_counter()` value past which the search gives up.
    """
    count = len(weights)
    pads = -count % size
    req_mask = _mask(required)
    pad_key = tuple(range(count, count + pads))
    memo: dict[int, tuple[int, tuple[int, bool, int] | None]] = {}
    scores: dict[int, int] = {}
    work = 0
    # The work count at which to look at the clock next (and let the event loop run).
    next_look = _CLOCK_EVERY
    pacer = Pacer(deadline)

    def group_score(group_mask: int, members: Sequence[int]) -> int:
        # Groups share suffixes, so scoring by "first member + cached rest" makes
        # each new group cost O(size) instead of O(size^2).
        cached = scores.get(group_mask)
        if cached is None:
            if len(members) < 2:
                cached = 0
            else:
                row = weights[members[0]]
                rest = members[1:]
                cached = sum(row[p] for p in rest) + group_score(
                    group_mask & ~(1 << members[0]), rest
                )
            scores[group_mask] = cached
        return cached

    def shapes(mask: int, low: int, pad: bool) -> Iterator[tuple[tuple[int, ...], bool]]:
        """Groups of the lowest remaining position: (other members, padded)."""
        rest = [p for p in range(low + 1, count) if mask >> p & 1]
        pending = mask & req_mask
        if pending:
            others_required = [p for p in rest if req_mask >> p & 1]
            free = [p for p in rest if not req_mask >> p & 1]
            if req_mask >> low & 1:
                for extra in itertools.combinations(free, size - 1 - len(others_required)):
                    yield tuple(sorted((*others_required, *extra))), False
                return
            required_count = len(others_required)
            if size - 1 - required_count >= 0:
                for extra in itertools.combinations(free, size - 1 - required_count):
                    yield tuple(sorted((*others_required, *extra))), False
            rest = free
        for others in itertools.combinations(rest, size - 1):
            yield others, False
        if pad and size - 1 - pads >= 0:
            for others in itertools.combinations(rest, size - 1 - pads):
                yield others, True

    def solve(mask: int, pad: bool) -> int:
        nonlocal work, next_look
        key = mask << 1 | pad
        known = memo.get(key)
        if known is not None:
            return known[0]
        if mask == 0:
            memo[key] = (-1 if pad else 0, None)
            return memo[key][0]
        low = (mask & -mask).bit_length() - 1
        left = mask.bit_count()
        if left == (size - pads if pad else size):
            # The last group is forced; skip enumerating its single shape.
            work += 1
            if pad and mask & req_mask:
                memo[key] = (-1, None)
            else:
                score = group_score(mask, _members(mask))
                memo[key] = (score, (mask, pad, score))
            return memo[key][0]
        best, choice = -1, None
        best_order: tuple[int, ...] = ()
        for others, padded in shapes(mask, low, pad):
            work += 1
            if budget is not None and work > budget:
                raise _OverBudget
            if work >= next_look:
                next_look = work + _CLOCK_EVERY
                if pacer.expired():
                    raise _OverBudget
            group_mask = 1 << low
            for p in others:
                group_mask |= 1 << p
            below = solve(mask & ~group_mask, pad and not padded)
            if below < 0:
                continue
            score = group_score(group_mask, (low, *others))
            total = score + below
            order = others + pad_key if padded else others
            if total > best or (total == best and order < best_order):
                best, best_order, choice = total, order, (group_mask, padded, score)
        memo[key] = (best, choice)
        return best

    try:
        if solve((1 << count) - 1, pads > 0) < 0:
            return Tiling((), exact=True)
    except _OverBudget:
        return None
    tiles = []
    mask, pad = (1 << count) - 1, pads > 0
    while mask:
        step = memo[mask << 1 | pad][1]
        assert step is not None
        group_mask, padded, score = step
        tiles.append(Tile(_members(group_mask), padded, score))
        mask &= ~group_mask
        pad = pad and not padded
    return Tiling(tuple(tiles), exact=True)


def _mask(positions: Collection[int]) -> int:
    mask = 0
    for p in positions:
        mask |= 1 << p
    return mask


def _members(mask: int) -> tuple[int, ...]:
    return tuple(p for p in range(mask.bit_length()) if mask >> p & 1)
