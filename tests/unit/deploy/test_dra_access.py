"""The chart's DRA rights are exactly what the plugin's DRA code asks the API server.

The ResourceSlice publisher and the claim reader run against the in-process
API server through everything they do: publish a pool (its Node's uid, list
and watch, create), taint a device (update), meet a conflict (get, update),
shrink the pool (delete), withdraw it (delete), and read a claim (get). The
verbs they send, per resource, must be the verbs the chart grants: one
missing would fail a node in DRA mode with 403, one extra would be a right
nobody uses.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from typing import Any

from devices.model import Inventory
from kube.resource_claims import AllocatedDevice, ClaimReader
from kube.resource_slices import SlicePublisher
from resources.dra_slices import pack, slice_devices
from resources.options import MigStrategy
from tests.unit.deploy.chart import FULLNAME, one, render
from tests.unit.kube.apiserver import api_requests, request_counts, running_apiserver
from tests.unit.resources.nodes import gpu_uuid, make_gpu

DRIVER = "gpu.nvidia.com"
NODE = "gpu-node-1"


def wanted(count: int, tainted: int | None = None) -> list[dict[str, Any]]:
    inventory = Inventory("550.54.15", "12.4", tuple(make_gpu(i) for i in range(count)))
    health = None if tainted is None else {gpu_uuid(tainted): ("xid 79", "2024-06-01T12:00:00Z")}
    devices = slice_devices(inventory, MigStrategy.NONE, health)
    return pack(devices, driver=DRIVER, node=NODE, pool_generation=0)


async def write(publisher: SlicePublisher, slices: list[dict[str, Any]] | None) -> None:
    """One write, as the plugin's loop makes it (in a thread); it returns once landed."""
    assert (await asyncio.to_thread(publisher.write, slices)).converged, publisher.state()


async def verbs_the_dra_code_uses() -> dict[str, set[str]]:
    """Resource -> verbs, as sent by the publisher and the claim reader doing all they do."""
    async with running_apiserver() as apiserver:
        await apiserver.add_node(NODE)
        await apiserver.create_claim(
            "team-a", "train", [AllocatedDevice("gpu", DRIVER, NODE, "gpu-0")]
        )
        publisher = SlicePublisher(apiserver.access(), node_name=NODE, driver=DRIVER)
        publisher.start()
        try:
            await write(publisher, wanted(300))
            await write(publisher, wanted(300, tainted=1))
            fault = apiserver.handler.fail("update", 409, "Conflict", "modified meanwhile")
            await write(publisher, wanted(300))
            assert fault.served == 1
            await write(publisher, wanted(100))
            await write(publisher, None)
            assert await apiserver.slices() == {}
        finally:
            await asyncio.to_thread(publisher.close)
        reader = ClaimReader(apiserver.access())
        try:
            view = await asyncio.to_thread(reader.get, "team-a", "train")
        finally:
            reader.close()
        assert view.allocated
        used: dict[str, set[str]] = defaultdict(set)
        for request in api_requests(apiserver.handler):
            (verb,) = request_counts([request])
            used[str(request.resource.plural)].add(verb)
        return dict(used)


def granted(role: dict[str, Any]) -> dict[str, set[str]]:
    rights: dict[str, set[str]] = defaultdict(set)
    for rule in role["rules"]:
        for resource in rule["resources"]:
            rights[resource] |= set(rule["verbs"])
    return dict(rights)


async def test_the_dra_role_grants_exactly_the_verbs_the_code_sends() -> None:
    used = await verbs_the_dra_code_uses()
    objects = render({"kubeletApi": "dra"})
    dra_role = one(objects, "ClusterRole", f"{FULLNAME}-dra-role")
    assert {g for rule in dra_role["rules"] for g in rule["apiGroups"]} == {"resource.k8s.io"}
    assert granted(dra_role) == {k: v for k, v in used.items() if k != "nodes"}
    assert granted(dra_role) == {
        "resourceslices": {"get", "list", "watch", "create", "update", "delete"},
        "resourceclaims": {"get"},
    }
    # The Node (the slices' owner) is read under the plugin's node role.
    assert used["nodes"] <= granted(one(objects, "ClusterRole", f"{FULLNAME}-role"))["nodes"]


def test_the_dra_role_is_bound_to_the_plugins_account_only() -> None:
    objects = render({"dra": {"enabled": True}})
    binding = one(objects, "ClusterRoleBinding", f"{FULLNAME}-dra-role-binding")
    assert binding["roleRef"] == {
        "kind": "ClusterRole",
        "name": f"{FULLNAME}-dra-role",
        "apiGroup": "rbac.authorization.k8s.io",
    }
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": f"{FULLNAME}-service-account",
         "namespace": "nvidia-device-plugin"}
    ]  # fmt: skip


def test_only_resourceslices_may_be_deleted_and_nothing_is_a_wildcard() -> None:
    objects = render({"kubeletApi": "dra", "gfd": {"enabled": True, "writeNodeLabels": True},
                      "config": {"name": "mine"}})  # fmt: skip
    rules = [r for o in objects if o["kind"] in ("ClusterRole", "Role") for r in o["rules"]]
    deletable = {res for r in rules if "delete" in r["verbs"] for res in r["resources"]}
    assert deletable == {"resourceslices"}
    for rule in rules:
        assert not {"*", "deletecollection", "escalate", "bind"} & set(rule["verbs"])
        assert "*" not in rule["resources"]
