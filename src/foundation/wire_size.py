"""Encoded sizes of the kubelet's ListAndWatch device entries, as plain arithmetic.

The kubelet reads a plugin's ListAndWatch stream with gRPC's default 4 MiB
receive limit. Knowing the size of a device list before building it lets an
oversized config (a million replicas) be refused in microseconds instead of
after minutes of building and gigabytes of memory. The arithmetic lives here,
below both `settings` (which checks a config file with no node at hand) and
`resources` (which checks a plan for this node), so that both agree.

Wire format (proto3; a field at its default value is not written; every
field number is below 16, so each tag is one byte):

    ListAndWatchResponse { repeated Device devices = 1; }
    Device      { string ID = 1; string health = 2; TopologyInfo topology = 3; }
    TopologyInfo { repeated NUMANode nodes = 1; }
    NUMANode    { int64 ID = 1; }
"""

from __future__ import annotations

__all__ = [
    "KUBELET_MAX_MESSAGE",
    "LONGEST_HEALTH",
    "device_message_size",
    "entry_size",
    "max_replicas",
    "replicated_entries_size",
    "varint_size",
]

KUBELET_MAX_MESSAGE = 4 * 1024 * 1024
# "Unhealthy": lists are sized with every device unhealthy, so that no later
# health change can push an accepted list over the limit.
LONGEST_HEALTH = len("Unhealthy")
_TAG = 1
_REPLICA_SEPARATOR = len("::")


def varint_size(value: int) -> int:
    """Bytes of a base-128 varint; negative int64 values take the full 10 bytes."""
    if value < 0:
        return 10
    size = 1
    while value >= 0x80:
        value >>= 7
        size += 1
    return size


def _length_delimited(payload: int) -> int:
    return _TAG + varint_size(payload) + payload


def _string_field(length: int) -> int:
    return _length_delimited(length) if length else 0


def device_message_size(id_bytes: int, health_bytes: int, numa_node: int | None) -> int:
    """Encoded size of one `Device` message (without its own tag and length)."""
    size = _string_field(id_bytes) + _string_field(health_bytes)
    if numa_node is not None and numa_node >= 0:
        node = _TAG + varint_size(numa_node) if numa_node else 0
        size += _length_delimited(_length_delimited(node))
    return size


def entry_size(id_bytes: int, health_bytes: int, numa_node: int | None) -> int:
    """Bytes one device adds to a `ListAndWatchResponse` (its tag and length included)."""
    return _length_delimited(device_message_size(id_bytes, health_bytes, numa_node))


def replicated_entries_size(
    id_bytes: int,
    replicas: int,
    *,
    health_bytes: int = LONGEST_HEALTH,
    numa_node: int | None = None,
) -> int:
    """Bytes the replicas `<id>::0` .. `<id>::<replicas-1>` of one device add to a list.

    Computed per number of digits of the replica number, so a million
    replicas cost seven steps, not a million.
    """
    total = 0
    low, digits = 0, 1
    while low < replicas:
        high = min(replicas, 10**digits)  # replica numbers with `digits` digits: [low, high)
        length = id_bytes + _REPLICA_SEPARATOR + digits
        total += (high - low) * entry_size(length, health_bytes, numa_node)
        low, digits = high, digits + 1
    return total


def max_replicas(
    id_bytes: int, *, limit: int = KUBELET_MAX_MESSAGE, numa_node: int | None = None
) -> int:
    """The most replicas of one device whose list still fits in `limit` bytes."""
    low, high = 0, 1
    while replicated_entries_size(id_bytes, high, numa_node=numa_node) <= limit:
        low, high = high, high * 2
    while high - low > 1:  # invariant: `low` fits, `high` does not
        middle = (low + high) // 2
        if replicated_entries_size(id_bytes, middle, numa_node=numa_node) <= limit:
            low = middle
        else:
            high = middle
    return low
