"""Replica counts that cannot fit on any node, found from the config file alone.

The kubelet drops a ListAndWatch message over 4 MiB, so a resource can only
advertise so many replicas. How many depends on the node (how many devices,
how long their IDs are), which only the plugin knows; but a count that would
not fit even for a single device with the shortest ID the config allows is
wrong on every node. `check_replica_counts` reports that from a config alone,
so `python -m settings --check` catches a `replicas: 1000000` before it
reaches a node. The plugin itself checks the exact size for its node before
building anything (`resources.wire.check_replication_fits`).
"""

from __future__ import annotations

from foundation.wire_size import KUBELET_MAX_MESSAGE, max_replicas
from settings.choices import DeviceIdStrategy, SharingStrategy
from settings.effective import EffectiveConfig
from settings.errors import ConfigError

__all__ = ["check_replica_counts", "most_replicas"]

# The shortest device IDs each strategy produces: a UUID (`GPU-` or `MIG-` and
# 36 characters) or an index (`0`).
_SHORTEST_ID = {DeviceIdStrategy.UUID: len("GPU-") + 36, DeviceIdStrategy.INDEX: 1}


def most_replicas(strategy: DeviceIdStrategy, *, limit: int = KUBELET_MAX_MESSAGE) -> int:
    """The most replicas one device can have under `strategy` on any node."""
    return max_replicas(_SHORTEST_ID[strategy], limit=limit)


def check_replica_counts(config: EffectiveConfig, *, limit: int = KUBELET_MAX_MESSAGE) -> None:
    """Refuse a replica count that no node could advertise.

    Raises:
        ConfigError: naming the entry, the count and the most that fits.
    """
    sharing = config.sharing
    if not sharing.resources:
        return
    strategy = config.flags.device_id_strategy
    most = most_replicas(strategy, limit=limit)
    key = "mps" if sharing.strategy is SharingStrategy.MPS else "timeSlicing"
    for index, resource in enumerate(sharing.resources):
        if resource.replicas > most:
            raise ConfigError(
                f"{resource.replicas} replicas of even a single device do not fit in the "
                f"kubelet's {limit}-byte ListAndWatch message (at most {most} with "
                f"deviceIDStrategy {strategy.value}), on any node",
                origin=config.config_path or "",
                path=f"sharing.{key}.resources[{index}].replicas",
            )
