"""Encoded size of a ListAndWatch message, checked before and after a plan is built.

The kubelet reads a plugin's ListAndWatch stream with gRPC's default 4 MiB
receive limit; a larger message is dropped and the resource silently stays
empty. Large time-slicing replica counts reach that, so resources are checked
twice, with every device counted as "Unhealthy" (the longer health value) so
a later health change can never push a list over:

* `check_replication_fits`, before replication, from the devices and the
  replica counts alone (`resources.replicas.select`). The size of a million
  replicas is a sum over seven digit lengths (`foundation.wire_size`), so an
  oversized config is refused in microseconds instead of after building
  millions of devices.
* `check_list_size`, on each finished device list, as a backstop.

The wire arithmetic itself is in `foundation.wire_size`, shared with the
config checker, which has no node at hand.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from foundation.wire_size import (
    KUBELET_MAX_MESSAGE,
    device_message_size,
    entry_size,
    replicated_entries_size,
    varint_size,
)
from resources.errors import ResourceError
from resources.model import Health, PluginDevice
from resources.replicas import Shared

__all__ = [
    "KUBELET_MAX_MESSAGE",
    "check_list_size",
    "check_replication_fits",
    "device_size",
    "list_and_watch_size",
    "varint_size",
]


def device_size(device: PluginDevice, *, health: Health | None = None) -> int:
    """Encoded size of one `Device` message (without its own tag and length)."""
    return device_message_size(
        len(device.id.encode()), len(str(health or device.health).encode()), device.numa_node
    )


def list_and_watch_size(devices: Iterable[PluginDevice], *, health: Health | None = None) -> int:
    """Encoded size of the `ListAndWatchResponse` listing `devices`.

    Args:
        health: count every device with this health instead of its own.
    """
    total = 0
    for device in devices:
        health_bytes = len(str(health or device.health).encode())
        total += entry_size(len(device.id.encode()), health_bytes, device.numa_node)
    return total


def _over(resource: str, count: str, size: int, limit: int, advice: str) -> ResourceError:
    return ResourceError(
        f"the device list of resource '{resource}' ({count} devices) encodes to "
        f"{size} bytes, over the kubelet's {limit}-byte message limit; {advice}"
    )


def check_list_size(
    resource: str, devices: Iterable[PluginDevice], *, limit: int = KUBELET_MAX_MESSAGE
) -> int:
    """The worst-case size of the resource's device list; raise when over `limit`.

    Raises:
        ResourceError: naming the resource, the size and the limit.
    """
    listed = list(devices)
    size = list_and_watch_size(listed, health=Health.UNHEALTHY)
    if size > limit:
        raise _over(resource, str(len(listed)), size, limit, "reduce the number of replicas")
    return size


def _replicated_size(replicated: tuple[tuple[PluginDevice, int], ...], replicas: int | None) -> int:
    return sum(
        replicated_entries_size(
            len(d.id.encode()), count if replicas is None else replicas, numa_node=d.numa_node
        )
        for d, count in replicated
    )


@dataclass(frozen=True)
class _Planned:
    """A resource's list as `replicate` would build it, in numbers.

    `fixed` counts devices listed as they are (`fixed_count` of them);
    `source` names the resource whose devices are replicated into it, if any,
    and `replicated` holds those devices with their replica counts.
    """

    fixed_count: int = 0
    fixed: int = 0
    source: str | None = None
    replicated: tuple[tuple[PluginDevice, int], ...] = ()

    @property
    def count(self) -> int:
        return self.fixed_count + sum(count for _, count in self.replicated)

    @property
    def shape(self) -> str:
        """``8 x 4 replicas = 32``, ``2 x 4 + 6 x 2 replicas + 1 whole = 21``."""
        per_count = Counter(count for _, count in self.replicated)
        groups = " + ".join(f"{n} x {r}" for r, n in sorted(per_count.items(), reverse=True))
        whole = f" + {self.fixed_count} whole" if self.fixed_count else ""
        return f"{groups} replicas{whole} = {self.count}"

    def size(self, replicas: int | None = None) -> int:
        """Encoded size; with `replicas`, as if every replicated device had that many."""
        return self.fixed + _replicated_size(self.replicated, replicas)


def _whole(devices: tuple[PluginDevice, ...]) -> _Planned:
    return _Planned(len(devices), list_and_watch_size(devices, health=Health.UNHEALTHY))


def check_replication_fits(
    resources: Mapping[str, tuple[PluginDevice, ...]],
    selections: Mapping[str, Shared],
    *,
    limit: int = KUBELET_MAX_MESSAGE,
) -> None:
    """Refuse, before replicating, a resource whose replicated list would exceed `limit`.

    Mirrors `resources.replicas.replicate` (the selected devices of a
    resource are replaced by their replicas, or with `renameByDefault` join
    `<name>.shared`) on sizes instead of devices. The error names the
    resource, the device counts, the size, the limit and the most replicas
    per device that would fit.

    Raises:
        ResourceError: the first resource, in name order, that would not fit.
    """
    planned = {name: _whole(devices) for name, devices in resources.items()}
    for name, shared in selections.items():
        if not shared.replicated:
            continue
        kept = _whole(shared.kept)
        if shared.target == name:
            planned[name] = replace(kept, source=name, replicated=shared.replicated)
            continue
        if shared.kept:
            planned[name] = kept
        else:
            planned.pop(name, None)
        joined = planned.get(shared.target, _Planned())
        planned[shared.target] = replace(
            joined, source=name, replicated=joined.replicated + shared.replicated
        )
    for name in sorted(planned):
        plan = planned[name]
        size = plan.size()
        if size <= limit:
            continue
        if plan.source is None:
            raise _over(name, str(plan.count), size, limit, "it has too many devices to advertise")
        most = _most_replicas(plan, limit)
        raise _over(name, plan.shape, size, limit, f"at most {most} replicas fit")


def _most_replicas(plan: _Planned, limit: int) -> int:
    """The largest replica count that keeps `plan` within `limit` (0 if none does)."""
    low, high = 0, 1
    while plan.size(high) <= limit:
        low, high = high, high * 2
    while high - low > 1:  # invariant: `low` fits, `high` does not
        middle = (low + high) // 2
        if plan.size(middle) <= limit:
            low = middle
        else:
            high = middle
    return low
