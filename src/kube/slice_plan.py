"""What to write so the API holds the wanted ResourceSlices: a pure plan from two lists.

`SlicePublisher` holds the wanted slices (`dra_slices.pack`'s objects) and a
watched copy of what the API holds; this module compares them and says which
slices to delete, update and create, and with which pool generation, so the
rules can be read (and tested) apart from the threads and the requests:

- Only slices of this driver on this node count; anything else is never
  planned for, whatever a server returns.
- The pool keeps the highest generation it has when nothing is added or
  removed and at most one slice changes (one update, as a taint on one
  device); otherwise the generation goes up by one and every slice of the
  pool is written with it (a split, a shrink, a new layout), as Kubernetes'
  own ResourceSlice controller does. A new pool starts at 1.
- A slice differs when its spec differs (strictly: an edit by someone else is
  a difference) or, when the Node's uid is known, its owner reference does.
  A wanted taint without `timeAdded` keeps the time the server gave it.
- Withdrawing deletes every slice of this driver on this node.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kube import raw

__all__ = ["Plan", "checked", "ours", "plan", "pool_generation"]


@dataclass(frozen=True)
class Plan:
    deletes: tuple[str, ...]
    updates: tuple[raw.Json, ...]  # whole bodies, with the resourceVersion read
    creates: tuple[raw.Json, ...]
    generation: int  # of the pool once the plan is written (0: no pool)

    @property
    def empty(self) -> bool:
        return not (self.deletes or self.updates or self.creates)


def ours(obj: Mapping[str, Any], *, node: str, driver: str) -> bool:
    spec = raw.mapping_at(obj, "spec")
    return spec.get("nodeName") == node and spec.get("driver") == driver


def pool_generation(obj: Mapping[str, Any]) -> int:
    value = raw.mapping_at(raw.mapping_at(obj, "spec"), "pool").get("generation")
    return value if isinstance(value, int) else 0


def checked(slices: Sequence[Mapping[str, Any]], *, node: str, driver: str) -> list[raw.Json]:
    """Copies of `slices`, each a named slice of `driver` on `node` in the node's pool.

    Raises:
        ValueError: one is not (one line naming the slice).
    """
    names: set[str] = set()
    found = []
    for obj in slices:
        name = raw.object_name(obj)
        spec = raw.mapping_at(obj, "spec")
        where = f"ResourceSlice {name or '(no name)'}"
        if not name or name in names:
            raise ValueError(f"{where}: every slice needs a name of its own")
        if not ours(obj, node=node, driver=driver):
            raise ValueError(
                f"{where}: for driver {spec.get('driver')} on node {spec.get('nodeName')}, "
                f"not {driver} on {node}"
            )
        if raw.mapping_at(spec, "pool").get("name") != node:
            raise ValueError(f"{where}: not in the pool {node}")
        names.add(name)
        found.append(copy.deepcopy(dict(obj)))
    return found


def plan(
    wanted: Sequence[raw.Json] | None,
    current: Mapping[str, raw.Json],
    *,
    node: str,
    driver: str,
    owner_uid: str = "",
) -> Plan:
    """The writes that make `current` (name -> slice, as the API holds them) equal `wanted`.

    `wanted` None withdraws: every slice of the driver on the node goes.
    """
    current = {name: obj for name, obj in current.items() if ours(obj, node=node, driver=driver)}
    in_pool = [obj for obj in current.values() if _pool_name(obj) == node]
    found = max((pool_generation(obj) for obj in in_pool), default=0)
    if wanted is None:
        return Plan(tuple(sorted(current)), (), (), 0)
    names = {raw.object_name(obj) for obj in wanted}
    deletes = tuple(sorted(name for name in current if name not in names))
    adds = any(raw.object_name(obj) not in current for obj in wanted)
    generation = max(found, 1)

    def changed(generation: int) -> list[raw.Json]:
        return [
            obj for obj in wanted if _differs(obj, current, generation, node=node, owner=owner_uid)
        ]

    differing = changed(generation)
    if found and (deletes or adds or len(differing) > 1):
        generation = found + 1
        differing = changed(generation)
    updates: list[raw.Json] = []
    creates: list[raw.Json] = []
    for obj in differing:
        have = current.get(raw.object_name(obj))
        body = _body(obj, have, generation, node=node, owner=owner_uid)
        (creates if have is None else updates).append(body)
    return Plan(deletes, tuple(updates), tuple(creates), generation)


def _pool_name(obj: Mapping[str, Any]) -> object:
    return raw.mapping_at(raw.mapping_at(obj, "spec"), "pool").get("name")


def _differs(
    wanted: raw.Json, current: Mapping[str, raw.Json], generation: int, *, node: str, owner: str
) -> bool:
    have = current.get(raw.object_name(wanted))
    if have is None:
        return True
    body = _body(wanted, have, generation, node=node, owner=owner)
    if body.get("spec") != have.get("spec"):
        return True
    owners = raw.object_metadata(have).get("ownerReferences")
    return bool(owner) and raw.object_metadata(body).get("ownerReferences") != owners


def _body(
    wanted: raw.Json, have: raw.Json | None, generation: int, *, node: str, owner: str
) -> raw.Json:
    """What to send: the wanted slice over what the API holds (keeping its resourceVersion)."""
    body = copy.deepcopy(dict(have)) if have is not None else {}
    body["apiVersion"] = wanted.get("apiVersion", f"{raw.RESOURCE_GROUP}/{raw.RESOURCE_VERSION}")
    body["kind"] = "ResourceSlice"
    metadata = dict(raw.object_metadata(body))
    metadata["name"] = raw.object_name(wanted)
    if owner:
        metadata["ownerReferences"] = [
            {"apiVersion": "v1", "kind": "Node", "name": node, "uid": owner, "controller": True}
        ]
    body["metadata"] = metadata
    spec = copy.deepcopy(dict(raw.mapping_at(wanted, "spec")))
    spec["pool"] = {**spec.get("pool", {}), "generation": generation}
    if have is not None:
        _keep_taint_times(spec, raw.mapping_at(have, "spec"))
    body["spec"] = spec
    return body


def _keep_taint_times(spec: dict[str, Any], have: Mapping[str, Any]) -> None:
    held = {
        (device.get("name"), taint.get("key"), taint.get("value"), taint.get("effect")): taint
        for device in have.get("devices") or ()
        if isinstance(device, dict)
        for taint in device.get("taints") or ()
        if isinstance(taint, dict)
    }
    for device in spec.get("devices") or ():
        for taint in device.get("taints") or ():
            if "timeAdded" in taint:
                continue
            key = (device.get("name"), taint.get("key"), taint.get("value"), taint.get("effect"))
            if key in held and "timeAdded" in held[key]:
                taint["timeAdded"] = held[key]["timeAdded"]
