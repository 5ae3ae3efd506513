"""Device nodes that grant access to a MIG device's GPU and compute instances.

A container using a MIG device needs, besides the parent `/dev/nvidia<N>`,
the capability nodes `/dev/nvidia-caps/nvidia-cap<minor>` of its GPU instance
and compute instance. The driver publishes which minor belongs to which
instance in `/proc/driver/nvidia-caps/mig-minors`, keyed by the parent GPU's
*minor number* (not its index) and the GI/CI ids. The real backend parses that
file; the simulated one uses the layout the driver always produces (minors 1
and 2 for config/monitor, then 9 per GPU instance: its own plus 8 compute
instances, 15 GPU instances per GPU), so simulated MIG devices get the same
paths a real node would show.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from loguru import logger

MIG_MINORS_FILE = Path("/proc/driver/nvidia-caps/mig-minors")

_GI_PER_GPU = 15
_MINORS_PER_GI = 1 + 8  # the GI's own node, then one per possible compute instance
_FIRST_INSTANCE_MINOR = 3

_LINE = re.compile(r"^gpu(?P<gpu>\d+)/gi(?P<gi>\d+)(?:/ci(?P<ci>\d+))?/access\s+(?P<minor>\d+)$")
_GLOBAL = re.compile(r"^(?:config|monitor)\s+\d+$")


@dataclass(frozen=True)
class MigMinors:
    """Capability minors by (parent GPU minor, GI id) and (parent GPU minor, GI id, CI id)."""

    gpu_instances: Mapping[tuple[int, int], int]
    compute_instances: Mapping[tuple[int, int, int], int]

    def gi_minor(self, gpu_minor: int, gi: int) -> int | None:
        return self.gpu_instances.get((gpu_minor, gi))

    def ci_minor(self, gpu_minor: int, gi: int, ci: int) -> int | None:
        return self.compute_instances.get((gpu_minor, gi, ci))


def parse_mig_minors(text: str) -> MigMinors:
    """Parse the mig-minors file; lines that match no known form are logged and skipped."""
    gis: dict[tuple[int, int], int] = {}
    cis: dict[tuple[int, int, int], int] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or _GLOBAL.match(line):
            continue
        match = _LINE.match(line)
        if match is None:
            logger.warning("skipping unparsable line in MIG minors file: {!r}", line)
            continue
        gpu, gi, minor = int(match["gpu"]), int(match["gi"]), int(match["minor"])
        if match["ci"] is None:
            gis[(gpu, gi)] = minor
        else:
            cis[(gpu, gi, int(match["ci"]))] = minor
    return MigMinors(gpu_instances=gis, compute_instances=cis)


def read_mig_minors(path: Path = MIG_MINORS_FILE) -> MigMinors:
    """Read the mig-minors file; a missing file means no capability nodes are known.

    Raises:
        OSError: the file exists but cannot be read.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return MigMinors(gpu_instances={}, compute_instances={})
    return parse_mig_minors(text)


def standard_gi_minor(gpu_minor: int, gi: int) -> int:
    """Minor the driver assigns to GPU instance `gi` of the GPU with minor `gpu_minor`."""
    return _FIRST_INSTANCE_MINOR + (gpu_minor * _GI_PER_GPU + gi) * _MINORS_PER_GI


def standard_ci_minor(gpu_minor: int, gi: int, ci: int) -> int:
    """Minor the driver assigns to compute instance `ci` inside GPU instance `gi`."""
    return standard_gi_minor(gpu_minor, gi) + 1 + ci
