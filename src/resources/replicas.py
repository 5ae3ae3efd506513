"""Time-slicing and MPS replication: each device advertised `replicas` times.

In the shipped reference every device of a named resource is replicated
(`devices: all` is forced) and the only rename is `<name>.shared` under
`renameByDefault`, so that is all this module does. Replica `r` of device `d`
is `d::r`; it copies the device's index, paths, topology, memory and compute
capability. Entries naming a resource the node does not have are skipped.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from resources.ids import replica_id
from resources.model import PluginDevice
from resources.naming import shared_name
from resources.options import SharingOptions


def replicate(
    resources: Mapping[str, tuple[PluginDevice, ...]], sharing: SharingOptions
) -> dict[str, tuple[PluginDevice, ...]]:
    """Resources after replication, renamed to `<name>.shared` when asked."""
    result = dict(resources)
    for name, count in sharing.replicas.items():
        devices = resources.get(name)
        if not devices:
            continue
        copies = tuple(
            replace(device, id=replica_id(device.id, number), replicas=count)
            for device in devices
            for number in range(count)
        )
        target = shared_name(name) if sharing.rename_by_default else name
        if target == name:
            result[name] = copies
        else:
            result.pop(name, None)
            result[target] = result.get(target, ()) + copies
    return result
