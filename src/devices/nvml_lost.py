"""Discovery while a GPU has fallen off the bus: its siblings are still the node's.

A GPU that falls off the bus (XID 79, a failed PCIe link) answers every NVML
call about it with GPU_IS_LOST, starting with the handle lookup by index,
while the other GPUs answer as before. The reference plugin fails the whole
discovery then, so one broken GPU makes every GPU of the node unallocatable
and a restarted plugin exits at start-up, again and again (upstream #231).
Here the lost GPU is sorted out of the pass instead:

- a GPU this library has read before keeps its last record, links and
  topology included, so its devices stay listed and the health machine
  (which has the XID and the failing probes) keeps them Unhealthy until the
  GPU is reset;
- a GPU lost before it was ever read is left out, with a warning: nothing
  is known about it, not even its UUID, until it answers again and the
  devices are read again.

Any other failure still fails discovery, as before.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from loguru import logger

from devices.errors import DiscoveryError
from devices.model import Gpu


def fell_off_the_bus(error: DiscoveryError, lost_code: int) -> bool:
    """Whether a discovery error comes from NVML's GPU_IS_LOST (`lost_code`)."""
    return getattr(error.__cause__, "value", None) == lost_code


def keep_lost(index: int, error: DiscoveryError, previous: Mapping[int, Gpu]) -> Gpu | None:
    """The record a lost GPU keeps (its last one), or None when it is left out."""
    before = previous.get(index)
    if before is None:
        logger.warning("{}: left out until it answers again and the devices are read again", error)
        return None
    logger.warning("{}: keeping what was last read for {}", error, before.uuid)
    return before


def with_lost(
    live: Sequence[Gpu], kept: Mapping[int, Gpu], previous: Mapping[int, Gpu]
) -> tuple[Gpu, ...]:
    """The GPUs read now and the records kept for lost ones, in index order.

    Links and topology levels between a live GPU and a lost one cannot be
    read in this pass (the lost end does not answer), so they are taken from
    the previous pass, on both ends.
    """
    if not kept:
        return tuple(live)
    merged: list[Gpu] = []
    for gpu in live:
        before = previous.get(gpu.index)
        if before is None or before.uuid != gpu.uuid:
            merged.append(gpu)
            continue
        nvlinks = {**gpu.nvlinks, **{p: n for p, n in before.nvlinks.items() if p in kept}}
        p2p = {**gpu.p2p, **{p: level for p, level in before.p2p.items() if p in kept}}
        merged.append(
            dataclasses.replace(
                gpu, nvlinks=dict(sorted(nvlinks.items())), p2p=dict(sorted(p2p.items()))
            )
        )
    return tuple(sorted([*merged, *kept.values()], key=lambda gpu: gpu.index))
