"""What each MPS control daemon is told: the arithmetic, as pure functions.

A control daemon serves one shared resource. Its clients are the replicas of
that resource's GPUs, so each client gets an equal share of every GPU:

- pinned device memory, per GPU index: total bytes / replicas on that index,
  then / 1024 / 1024, integer division at every step, sent as ``<N>M``;
- active thread percentage: 100 / replicas per GPU, integer division, sent
  once for the whole daemon; where the replica counts differ per GPU
  (several sharing entries over disjoint devices), the largest count decides,
  so no GPU is promised more than it has.

The arithmetic is `resources.mps_share`'s, which Allocate also uses for a
container holding several replicas.

MPS accepts at most 48 clients per GPU from compute capability 7.5 upward
(16 below), so more replicas than that is a configuration error. Indices are
sent in numeric order (the reference iterates a hash map, so its order is
arbitrary).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from mps.errors import REPLICAS_EXCEEDED, MpsConfigError
from resources.builder import ResourceSet
from resources.ids import has_annotation
from resources.model import PluginDevice
from resources.mps_share import replica_memory_mib, replica_thread_percentage

__all__ = [
    "DaemonSpec",
    "active_thread_percentage",
    "check_replicas",
    "client_cap",
    "daemon_spec",
    "daemon_specs",
    "pinned_memory_limits",
]

_VOLTA_MPS = (7, 5)
_CAPABILITY = re.compile(r"^v?(\d+)\.(\d+)$")


def client_cap(compute_capability: str) -> int:
    """Most MPS clients per GPU: 48 from compute capability 7.5 (``7.5`` or ``v7.5``), else 16.

    An unreadable capability gets the lower cap, as in the reference.
    """
    match = _CAPABILITY.fullmatch(compute_capability.strip())
    if match is None:
        return 16
    return 48 if (int(match[1]), int(match[2])) >= _VOLTA_MPS else 16


def check_replicas(devices: Iterable[PluginDevice]) -> None:
    """Raise `MpsConfigError` when a device has more replicas than MPS accepts clients."""
    for device in devices:
        cap = client_cap(device.compute_capability)
        if device.replicas > cap:
            raise MpsConfigError(REPLICAS_EXCEEDED.format(replicas=device.replicas, cap=cap))


def _index_key(index: str) -> tuple[int, int, str]:
    return (0, int(index), "") if index.isdigit() else (1, 0, index)


def pinned_memory_limits(devices: Sequence[PluginDevice]) -> tuple[tuple[str, int], ...]:
    """(index, MiB) per distinct device index with known memory, in index order."""
    per_index = Counter(device.index for device in devices)
    memory = {device.index: device.memory_mib for device in devices}
    return tuple(
        (index, replica_memory_mib(memory[index], per_index[index]))
        for index in sorted(per_index, key=_index_key)
        if memory[index] > 0
    )


def active_thread_percentage(devices: Sequence[PluginDevice]) -> int | None:
    """100 / the most replicas of one GPU; None when there are no devices (nothing is sent)."""
    return replica_thread_percentage(Counter(device.uuid for device in devices).values())


@dataclass(frozen=True)
class DaemonSpec:
    """One control daemon: its resource, the GPUs it owns and the limits it applies."""

    resource: str
    gpu_uuids: tuple[str, ...]
    memory_limits: tuple[tuple[str, int], ...] = ()
    thread_percentage: int | None = None

    @property
    def commands(self) -> tuple[str, ...]:
        """The control commands that apply the limits, in the order they are sent."""
        sent = [
            f"set_default_device_pinned_mem_limit {index} {mib}M"
            for index, mib in self.memory_limits
        ]
        if self.thread_percentage is not None:
            sent.append(f"set_default_active_thread_percentage {self.thread_percentage}")
        return tuple(sent)

    @property
    def marker(self) -> str:
        """What the daemon writes to its ``.started`` marker once its limits hold.

        The plugin computes the same text from the resource it is about to
        serve and serves it only when they are equal, so after a config
        change it never advertises replicas before this daemon applies the
        limits meant for them. One JSON line, readable by an operator.
        """
        content: dict[str, object] = {"resource": self.resource, "summary": self.summary}
        content |= {"gpus": sorted(self.gpu_uuids), "commands": list(self.commands)}
        return json.dumps(content) + "\n"

    @property
    def summary(self) -> str:
        """The limits in a few words, for messages: ``25% of threads, 3840M pinned on 4 GPUs``."""
        threads = "-" if self.thread_percentage is None else f"{self.thread_percentage}%"
        pinned = "/".join(dict.fromkeys(f"{mib}M" for _, mib in self.memory_limits)) or "-"
        return f"{threads} of threads, {pinned} pinned on {len(self.gpu_uuids)} GPU(s)"


def daemon_spec(resource: str, devices: Sequence[PluginDevice]) -> DaemonSpec:
    """The daemon of one shared resource; raises `MpsConfigError` over the client cap."""
    check_replicas(devices)
    return DaemonSpec(
        resource=resource,
        gpu_uuids=tuple(dict.fromkeys(device.uuid for device in devices)),
        memory_limits=pinned_memory_limits(devices),
        thread_percentage=active_thread_percentage(devices),
    )


def daemon_specs(resources: Iterable[ResourceSet]) -> tuple[DaemonSpec, ...]:
    """One daemon per resource that has devices and replicates them, in name order."""
    specs = [
        daemon_spec(resource.name, resource.devices)
        for resource in resources
        if resource.devices and any(has_annotation(d.id) for d in resource.devices)
    ]
    return tuple(sorted(specs, key=lambda spec: spec.resource))
