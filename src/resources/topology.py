"""Link scores between GPUs, as the topology-aware allocator weighs them.

For every pair of GPUs the score is the PCIe/P2P score of their common NVML
topology level plus 100 per NVLink lane between them (capped at 18 lanes):

    SYSTEM 10, NODE 20, HOSTBRIDGE 30, MULTIPLE 40, SINGLE 50, INTERNAL 60

The reference computes directed links and adds both entries of a pair; NVML
reports them symmetrically, so a single matrix, read from the lower-indexed
GPU's side, is kept. The matrix is frozen and hashable so it can travel inside
a `ResourceSet` and take part in its comparison.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

from devices.model import Gpu, P2PLevel

P2P_SCORES: Mapping[P2PLevel, int] = MappingProxyType(
    {
        P2PLevel.SYSTEM: 10,
        P2PLevel.NODE: 20,
        P2PLevel.HOSTBRIDGE: 30,
        P2PLevel.MULTIPLE: 40,
        P2PLevel.SINGLE: 50,
        P2PLevel.INTERNAL: 60,
    }
)
NVLINK_LANE_SCORE = 100
MAX_NVLINK_LANES = 18


def nvlink_score(lanes: int) -> int:
    return NVLINK_LANE_SCORE * min(max(lanes, 0), MAX_NVLINK_LANES)


def directed_score(source: Gpu, target: Gpu) -> int:
    """Score of the links NVML reports from `source` towards `target`."""
    level = source.p2p.get(target.index)
    p2p = P2P_SCORES[level] if level is not None else 0
    return p2p + nvlink_score(source.nvlinks.get(target.index, 0))


@dataclass(frozen=True)
class LinkScores:
    """Pair scores between GPUs, addressed by GPU UUID."""

    uuids: tuple[str, ...] = ()
    matrix: tuple[tuple[int, ...], ...] = ()

    def position(self, uuid: str) -> int | None:
        try:
            return self.uuids.index(uuid)
        except ValueError:
            return None

    def weights(self, uuids: Sequence[str]) -> list[list[int]]:
        """Square matrix of pair scores for `uuids`, in that order (0 when unknown)."""
        positions = [self.position(uuid) for uuid in uuids]
        rows: list[list[int]] = []
        for a in positions:
            rows.append(
                [
                    self.matrix[a][b] if a is not None and b is not None and a != b else 0
                    for b in positions
                ]
            )
        return rows


def link_scores(gpus: Sequence[Gpu]) -> LinkScores:
    """Pair scores between `gpus`, kept in the given order."""
    ordered = list(gpus)
    matrix: list[tuple[int, ...]] = []
    for a in ordered:
        row = []
        for b in ordered:
            if a is b:
                row.append(0)
            elif a.index <= b.index:
                row.append(directed_score(a, b))
            else:
                row.append(directed_score(b, a))
        matrix.append(tuple(row))
    return LinkScores(uuids=tuple(gpu.uuid for gpu in ordered), matrix=tuple(matrix))
