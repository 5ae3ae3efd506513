"""Time-slicing and MPS replication: which devices each entry replicates, and how often.

Each sharing rule names a resource and selects some of its devices: every
device (no ``devices``, or ``all``), the first N in index order (a count), or
a list of GPU/MIG indices and UUIDs. Each selected device is advertised
``replicas`` times as ``<id>::<n>``, copying the device's index, paths,
topology, memory and compute capability and recording its own replica count.
Several rules may name one resource over disjoint devices, which gives replica
counts per GPU (upstream issue 1786); a device two rules select is an error
naming both (`settings.sharing.overlap` words it, as the config check does). A
device no rule selects stays whole under the resource's own name, which is
what the reference's own code does with a device list it would apply; the
shipped reference replaces every list by ``all``.

With ``renameByDefault`` the replicas are advertised as ``<name>.shared``.
Rules naming a resource the node does not have are skipped, as in the
reference. Selecting (`select`) is apart from building (`replicate`) so the
size of every list can be checked from the selection before millions of
replicas exist (`resources.wire.check_replication_fits`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from resources.errors import ResourceError
from resources.ids import replica_id
from resources.model import PluginDevice
from resources.naming import shared_name
from resources.options import ShareRule, SharingOptions, SharingStrategy
from settings.sharing import DeviceRef, device_ref, overlap

__all__ = ["Shared", "replicate", "select"]


@dataclass(frozen=True)
class Shared:
    """How the devices of one resource are shared.

    ``counts`` holds every device of ``source`` in order with its replica
    count, 0 for a device no rule selects; the replicas go to ``target``.
    """

    source: str
    target: str
    counts: tuple[tuple[PluginDevice, int], ...]
    distinct: bool = False

    @property
    def replicated(self) -> tuple[tuple[PluginDevice, int], ...]:
        return tuple((device, count) for device, count in self.counts if count)

    @property
    def kept(self) -> tuple[PluginDevice, ...]:
        """The devices no rule selects: served whole under ``source``."""
        return tuple(device for device, count in self.counts if not count)


def _matches(device: PluginDevice, ref: DeviceRef) -> bool:
    if ref.index is not None:
        return device.index == ref.index
    if ref.gi is not None:
        return (device.gpu_uuid, device.gi, device.ci) == (ref.uuid, ref.gi, ref.ci)
    return device.uuid == ref.uuid


def _selected(devices: Sequence[PluginDevice], rule: ShareRule) -> Sequence[PluginDevice]:
    """The devices `rule` selects, in the order it names them.

    Raises:
        ResourceError: a count larger than the resource, or a reference that
            matches none of its devices (the reference's texts, located).
    """
    if rule.devices == "all":
        return devices
    if isinstance(rule.devices, int):
        if rule.devices > len(devices):
            raise ResourceError(
                f"{rule.label}.devices: requested {rule.devices} devices to be replicated, "
                f"but only {len(devices)} devices available"
            )
        return devices[: rule.devices]
    found = []
    for item in rule.devices:
        ref = device_ref(item)
        device = next((d for d in devices if _matches(d, ref)), None)
        if device is None:
            by = "at index" if ref.index is not None else "with UUID"
            raise ResourceError(f"{rule.label}.devices: no matching device {by}: {ref}")
        found.append(device)
    return found


def _share(
    name: str, devices: Sequence[PluginDevice], rules: Sequence[ShareRule]
) -> dict[str, int]:
    """Device ID -> replicas, from the rules naming one resource; refuses overlaps."""
    owner: dict[str, ShareRule] = {}
    for rule in rules:
        for device in _selected(devices, rule):
            first = owner.setdefault(device.id, rule)
            if first is not rule:
                what = f"both select device {device.index} ({device.uuid})"
                path, problem = overlap(first.label, rule.label, name, what)
                raise ResourceError(f"{path}: {problem}")
    return {device_id: rule.replicas for device_id, rule in owner.items()}


def select(
    resources: Mapping[str, tuple[PluginDevice, ...]], sharing: SharingOptions
) -> dict[str, Shared]:
    """How each resource some rule names is shared, by resource name.

    Raises:
        ResourceError: a rule selects a device it cannot find, two rules of one
            resource select one device, or MPS would leave some of a resource's
            devices whole beside its replicas under the same name.
    """
    by_name: dict[str, list[ShareRule]] = {}
    for rule in sharing.all_rules:
        by_name.setdefault(rule.name, []).append(rule)
    result: dict[str, Shared] = {}
    for name, rules in by_name.items():
        devices = resources.get(name)
        if not devices:
            continue
        counts = _share(name, devices, rules)
        target = shared_name(name) if sharing.rename_by_default else name
        shared = Shared(
            source=name,
            target=target,
            counts=tuple((device, counts.get(device.id, 0)) for device in devices),
            distinct=any(rule.distinct_devices for rule in rules),
        )
        mps = sharing.strategy is SharingStrategy.MPS
        if mps and target == name and shared.kept and shared.replicated:
            # One control daemon serves the resource with one set of limits
            # for all of its devices; a whole GPU among them would get a
            # replica's share.
            where = rules[0].label.rpartition("[")[0] or rules[0].label
            left = shared.kept[0]
            raise ResourceError(
                f"{where}: with MPS, devices of {name} that no entry selects (device "
                f"{left.index}) cannot be served whole beside its replicas; select them "
                "too or set renameByDefault: true"
            )
        result[name] = shared
    return result


def replicate(
    resources: Mapping[str, tuple[PluginDevice, ...]], selections: Mapping[str, Shared]
) -> dict[str, tuple[PluginDevice, ...]]:
    """Resources after replication, replicas renamed to `<name>.shared` where selected so."""
    result = dict(resources)
    for name, shared in selections.items():
        if not shared.replicated:
            continue
        listed: list[PluginDevice] = []
        for device, count in shared.counts:
            if not count:
                listed.append(device)
                continue
            listed.extend(
                replace(device, id=replica_id(device.id, number), replicas=count)
                for number in range(count)
            )
        if shared.target == name:
            result[name] = tuple(listed)
            continue
        copies = tuple(device for device in listed if device.replicas)
        if shared.kept:
            result[name] = shared.kept
        else:
            result.pop(name, None)
        result[shared.target] = result.get(shared.target, ()) + copies
    return result
