"""GetPreferredAllocation at node sizes no profile has, in-process, in CPU time.

The nodes are synthetic (no inventory, no NVML): boards of NVLinked GPUs on
two sockets, so that a node with 4 million GPU pairs is built in a fraction
of a second. The figures are the calling thread's CPU time, so a busy machine
does not inflate them: the search's own deadlines are wall-clock, so under
load it only ever spends less CPU.

* A pair from a whole node of 2048 GPUs (before the search had budgets: 5 s at
  256 GPUs, over 30 s at 512, an OverflowError at about 1500), against
  `EXACT_SECONDS + SEARCH_SECONDS` plus half a second of slack.
* 2048 of 16384 time-sliced replicas (1024 GPUs x 16), distributed: linear in
  the offer (it was a scan of every candidate for each pick, minutes).
"""

from __future__ import annotations

import functools
import random
import time

from bench.report import Goal, Outcome, Row, Stat
from resources.aligned import EXACT_SECONDS, SEARCH_SECONDS
from resources.allocation import Allocator
from resources.builder import Behaviour, ResourceSet
from resources.model import PluginDevice
from resources.options import AllocationPolicy, SharingStrategy
from resources.topology import LinkScores

SEED = 20240601
# What a call may cost beyond its two budgets: sorting the offer, cutting
# rows of the score matrix, and the step that notices the deadline.
SLACK_SECONDS = 0.5
PAIR_GOAL = Goal(Stat.P99, (EXACT_SECONDS + SEARCH_SECONDS + SLACK_SECONDS) * 1000)
REPLICAS_GOAL = Goal(Stat.P99, 2000.0)


def gpu(index: int) -> str:
    return f"GPU-{index:08x}-0000-0000-0000-000000000000"


def device(device_id: str, physical: str, index: int) -> PluginDevice:
    return PluginDevice(id=device_id, uuid=physical, gpu_uuid=physical, index=str(index), paths=())


@functools.cache
def whole_gpus(count: int, board: int) -> Allocator:
    """`count` GPUs: NVLink (6 lanes) within boards of `board`, NODE within a half, else SYSTEM."""
    half = max(1, count // 2)
    rows = []
    for i in range(count):
        row = [10] * count
        start = i // half * half
        row[start : start + half] = [20] * len(row[start : start + half])
        start = i // board * board
        row[start : start + board] = [620] * len(row[start : start + board])
        row[i] = 0
        rows.append(tuple(row))
    devices = tuple(device(gpu(i), gpu(i), i) for i in range(count))
    links = LinkScores(uuids=tuple(d.id for d in devices), matrix=tuple(rows))
    allocator = Allocator(ResourceSet("nvidia.com/gpu", devices, links=links))
    assert allocator.aligned
    return allocator


def replicas(gpus: int, each: int) -> Allocator:
    """`gpus` GPUs time-sliced into `each` replicas, allocated distributed."""
    devices = tuple(device(f"{gpu(g)}::{r}", gpu(g), g) for g in range(gpus) for r in range(each))
    behaviour = Behaviour(
        sharing=SharingStrategy.TIME_SLICING, allocation_policy=AllocationPolicy.DISTRIBUTED
    )
    return Allocator(ResourceSet("nvidia.com/gpu", devices, behaviour))


def cpu_ms(allocator: Allocator, available: list[str], size: int) -> float:
    started = time.thread_time()
    answer = allocator.preferred(available, [], size)
    spent = (time.thread_time() - started) * 1000
    if len(answer) != size:
        raise RuntimeError(f"asked for {size}, answered {len(answer)}")
    return spent


async def run(*, quick: bool) -> Outcome:
    reps = 3 if quick else 10
    rng = random.Random(SEED)
    node = whole_gpus(2048, 8)
    ids = [d.id for d in node.resource.devices]
    pairs = [cpu_ms(node, rng.sample(ids, len(ids)), 2) for _ in range(reps)]
    sliced = replicas(1024, 16)
    offer = [d.id for d in sliced.resource.devices]
    picks = [cpu_ms(sliced, offer, 2048) for _ in range(reps)]
    return Outcome(
        rows=[
            Row.of(
                "preferred_scale",
                "preferred.pair_of_2048_gpus",
                "ms",
                pairs,
                goal=PAIR_GOAL,
                note="CPU time, a pair from a whole 2048-GPU node in boards of 8",
            ),
            Row.of(
                "preferred_scale",
                "preferred.2048_of_16384_replicas",
                "ms",
                picks,
                goal=REPLICAS_GOAL,
                note="CPU time, distributed over 1024 GPUs x 16 replicas",
            ),
        ],
        details={"pair_ms": pairs, "replicas_ms": picks},
    )
