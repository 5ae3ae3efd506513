"""What a Kubernetes API server of a given version refuses in a ResourceSlice (the count rules).

The emulated API server (`tests.unit.kube.emulator`) answers a slice that
breaks one with 422 Invalid, as a real server does, and the packing tests
check every slice against the rules of both layouts. Written from
Kubernetes' own validation (pkg/apis/resource/validation/validation.go and
the limits in k8s.io/api resource/v1 types.go):

- every version: at most 128 devices, at most 32 attributes and capacities
  a device, device names unique;
- from 1.35 (kubernetes commit e73fd4204d89, "DRA: Update types for
  Partitionable Devices"): `devices` and `sharedCounters` never in one slice;
  at most 64 devices where one has taints or consumes counters; at most 8
  counter sets, 32 counters each; a device consumes from at most 2 sets, 32
  counters from each;
- before 1.35: a device consumes only from a counter set of its own slice,
  only counters that set defines; at most 32 counters in all the slice's
  sets, 32 consumed by a device, 1024 consumed by all its devices.

Structure (types, names, formats) is `kubernetes_validate`'s part.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["COUNTERS_APART_SINCE", "slice_problems"]

COUNTERS_APART_SINCE = (1, 35)


def slice_problems(obj: Mapping[str, Any], version: tuple[int, int]) -> list[str]:
    """Why a server of `version` (major, minor) would refuse `obj`; [] when it would not."""
    spec = obj.get("spec") or {}
    devices = [d for d in spec.get("devices") or () if isinstance(d, dict)]
    sets = [s for s in spec.get("sharedCounters") or () if isinstance(s, dict)]
    apart = version >= COUNTERS_APART_SINCE
    problems: list[str] = []
    counted = _counts(devices)
    if "devices" in spec and "sharedCounters" in spec and apart:
        problems.append("spec: only one of `sharedCounters` or `devices` is allowed")
    limit = 128
    if apart and (counted["tainted"] or counted["consuming"]):
        limit = 64
    if len(devices) > limit:
        problems.append(f"spec.devices: {len(devices)} devices, at most {limit}")
    names = [d.get("name") for d in devices]
    if len(set(names)) != len(names):
        problems.append("spec.devices: duplicate device names")
    for device in devices:
        count = len(device.get("attributes") or {}) + len(device.get("capacity") or {})
        if count > 32:
            problems.append(f"device {device.get('name')}: {count} attributes and capacities")
    set_names = [s.get("name") for s in sets]
    if len(set(set_names)) != len(set_names):
        problems.append("spec.sharedCounters: duplicate counter set names")
    if apart:
        problems += _problems_apart(devices, sets)
    else:
        problems += _problems_together(devices, sets, counted["consumed"])
    return problems


def _counts(devices: list[dict[str, Any]]) -> dict[str, int]:
    consumed = sum(
        len(item.get("counters") or {}) for d in devices for item in d.get("consumesCounters") or ()
    )
    return {
        "tainted": sum(1 for d in devices if d.get("taints")),
        "consuming": sum(1 for d in devices if d.get("consumesCounters")),
        "consumed": consumed,
    }


def _problems_apart(devices: list[dict[str, Any]], sets: list[dict[str, Any]]) -> list[str]:
    problems = []
    if len(sets) > 8:
        problems.append(f"spec.sharedCounters: {len(sets)} counter sets, at most 8")
    for counter_set in sets:
        count = len(counter_set.get("counters") or {})
        if not 0 < count <= 32:
            problems.append(f"counter set {counter_set.get('name')}: {count} counters")
    for device in devices:
        consumes = device.get("consumesCounters") or []
        used = [item.get("counterSet") for item in consumes]
        if len(used) > 2 or len(set(used)) != len(used):
            problems.append(f"device {device.get('name')}: consumes from {used}")
        for item in consumes:
            count = len(item.get("counters") or {})
            if not 0 < count <= 32:
                problems.append(f"device {device.get('name')}: {count} counters of {item}")
    return problems


def _problems_together(
    devices: list[dict[str, Any]], sets: list[dict[str, Any]], consumed: int
) -> list[str]:
    problems = []
    defined = {s.get("name"): set(s.get("counters") or {}) for s in sets}
    shared = sum(len(counters) for counters in defined.values())
    if shared > 32:
        problems.append(f"spec.sharedCounters: {shared} counters in all sets, at most 32")
    if consumed > 1024:
        problems.append(f"spec.devices: {consumed} counters consumed, at most 1024")
    for device in devices:
        consumes = device.get("consumesCounters") or []
        total = sum(len(item.get("counters") or {}) for item in consumes)
        if total > 32:
            problems.append(f"device {device.get('name')}: consumes {total} counters")
        for item in consumes:
            known = defined.get(item.get("counterSet"))
            if known is None:
                problems.append(
                    f"device {device.get('name')}: counter set {item.get('counterSet')} "
                    "must be defined in the ResourceSlice sharedCounters"
                )
            elif not set(item.get("counters") or {}) <= known:
                problems.append(
                    f"device {device.get('name')}: a counter not defined in {item['counterSet']}"
                )
    return problems
