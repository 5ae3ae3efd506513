"""The slice plan: which slices to delete, update and create, and the pool's generation."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from devices.model import Inventory
from kube import slice_plan
from resources.dra_slices import pack, slice_devices
from resources.options import MigStrategy
from tests.unit.resources.nodes import gpu_uuid, make_gpu

DRIVER = "gpu.nvidia.com"
NODE = "gpu-node-1"


def packed(
    count: int, *, first: int = 0, tainted: int | None = None, generation: int = 0
) -> list[dict[str, Any]]:
    gpus = tuple(make_gpu(i) for i in range(first, first + count))
    inventory = Inventory("550.54.15", "12.4", gpus)
    health = {} if tainted is None else {gpu_uuid(tainted): ("lost", "2024-06-01T12:00:00Z")}
    devices = slice_devices(inventory, MigStrategy.NONE, health)
    return pack(devices, driver=DRIVER, node=NODE, pool_generation=generation)


def held(objects: list[dict[str, Any]], *, version: str = "7") -> dict[str, dict[str, Any]]:
    """The objects as the API would hold them: a resourceVersion, a uid, owned by the Node."""
    found = {}
    owner = {"apiVersion": "v1", "kind": "Node", "name": NODE, "uid": "node-uid"}
    owner["controller"] = True
    for obj in copy.deepcopy(objects):
        obj["metadata"] |= {
            "resourceVersion": version,
            "uid": f"uid-{obj['metadata']['name']}",
            "ownerReferences": [owner],
        }
        found[obj["metadata"]["name"]] = obj
    return found


def plan_for(wanted: list[dict[str, Any]] | None, current: dict[str, dict[str, Any]]) -> Any:
    return slice_plan.plan(wanted, current, node=NODE, driver=DRIVER, owner_uid="node-uid")


def names(bodies: tuple[dict[str, Any], ...]) -> list[str]:
    return [body["metadata"]["name"] for body in bodies]


def test_a_new_pool_is_created_at_generation_1() -> None:
    plan = plan_for(packed(300), {})
    assert (plan.deletes, plan.updates, plan.generation) == ((), (), 1)
    assert names(plan.creates) == [f"{NODE}-{DRIVER}-{i}" for i in range(3)]
    assert {body["spec"]["pool"]["generation"] for body in plan.creates} == {1}


def test_the_same_slices_plan_nothing() -> None:
    plan = plan_for(packed(300), held(packed(300, generation=4)))
    assert plan.empty
    assert plan.generation == 4


def test_one_changed_slice_is_one_update_keeping_the_generation_and_the_version() -> None:
    wanted = packed(300)
    wanted[1]["spec"]["devices"][5]["attributes"]["productName"] = {"string": "renamed"}
    plan = plan_for(wanted, held(packed(300, generation=4)))
    (update,) = plan.updates
    assert update["metadata"]["name"] == f"{NODE}-{DRIVER}-1"
    assert update["metadata"]["resourceVersion"] == "7"  # PUT of the version read: 409 if stale
    assert update["metadata"]["uid"] == f"uid-{NODE}-{DRIVER}-1"
    assert (plan.deletes, plan.creates, plan.generation) == ((), (), 4)


@pytest.mark.parametrize(
    ("before", "after", "deletes", "updates", "creates"),
    [
        (300, 100, 2, 1, 0),  # shrink
        (100, 300, 0, 1, 2),  # split
    ],
)
def test_a_new_layout_bumps_the_generation_of_every_slice(
    before: int, after: int, deletes: int, updates: int, creates: int
) -> None:
    plan = plan_for(packed(after), held(packed(before, generation=4)))
    assert (len(plan.deletes), len(plan.updates), len(plan.creates)) == (deletes, updates, creates)
    assert plan.generation == 5
    assert {b["spec"]["pool"]["generation"] for b in plan.updates + plan.creates} == {5}
    assert {b["spec"]["pool"]["resourceSliceCount"] for b in plan.updates + plan.creates} == {
        len(packed(after))
    }


def test_several_slices_changing_at_once_bump_the_generation() -> None:
    plan = plan_for(packed(299, first=1), held(packed(300, generation=4)))  # GPU 0 went
    assert (len(plan.deletes), len(plan.updates), len(plan.creates)) == (0, 3, 0)
    assert plan.generation == 5


def test_a_taint_on_a_big_slice_splits_it_and_bumps_the_generation() -> None:
    plan = plan_for(packed(300, tainted=200), held(packed(300, generation=4)))
    assert len(plan.creates) == 1  # 64 devices at most where one is tainted: four slices
    assert plan.generation == 5


def test_one_slice_changing_of_one_is_an_update_in_the_same_generation() -> None:
    plan = plan_for(packed(8, tainted=3), held(packed(8, generation=2)))
    assert (len(plan.updates), plan.generation) == (1, 2)


def test_slices_of_other_drivers_or_nodes_are_not_planned_for() -> None:
    theirs = held(packed(1))
    (obj,) = theirs.values()
    obj["spec"]["driver"] = "net.example.com"
    assert plan_for(None, theirs).empty
    assert plan_for(packed(1), theirs).deletes == ()


def test_withdrawing_deletes_every_slice_of_the_driver_on_the_node() -> None:
    plan = plan_for(None, held(packed(300, generation=2)))
    assert len(plan.deletes) == 3
    assert (plan.updates, plan.creates, plan.generation) == ((), (), 0)


def test_an_owner_reference_edited_away_is_put_back() -> None:
    current = held(packed(1, generation=1))
    (obj,) = current.values()
    obj["metadata"]["ownerReferences"] = []
    (update,) = plan_for(packed(1), current).updates
    assert update["metadata"]["ownerReferences"][0]["uid"] == "node-uid"


def test_a_taint_time_the_server_set_is_kept_when_the_wanted_taint_has_none() -> None:
    current = held(packed(2, tainted=0, generation=1))
    wanted = packed(2, tainted=0)
    for device in wanted[0]["spec"]["devices"]:
        for taint in device.get("taints", ()):
            del taint["timeAdded"]
    assert plan_for(wanted, current).empty


@pytest.mark.parametrize(
    ("edit", "error"),
    [
        (lambda s: s["spec"].update(driver="x.example.com"), "for driver x.example.com on node"),
        (lambda s: s["spec"].update(nodeName="n2"), "on node n2, not gpu.nvidia.com on gpu-node-1"),
        (lambda s: s["spec"]["pool"].update(name="other"), "not in the pool gpu-node-1"),
        (lambda s: s["metadata"].pop("name"), r"ResourceSlice \(no name\): every slice needs a"),
    ],
)
def test_wanted_slices_must_be_this_drivers_on_this_node(edit: Any, error: str) -> None:
    slices = packed(1)
    edit(slices[0])
    with pytest.raises(ValueError, match=error):
        slice_plan.checked(slices, node=NODE, driver=DRIVER)


def test_two_wanted_slices_may_not_share_a_name() -> None:
    with pytest.raises(ValueError, match="every slice needs a name of its own"):
        slice_plan.checked(packed(1) + packed(1), node=NODE, driver=DRIVER)
