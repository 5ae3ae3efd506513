"""The emulated API server's field selectors on ResourceSlices, as a real server applies them."""

from __future__ import annotations

import asyncio
import itertools
import json
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from kube import raw
from kube.client import close_client
from tests.unit.kube.apiserver import RESOURCE_SLICES, ApiServer


def a_slice(name: str, node: str, driver: str = "gpu.nvidia.com") -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {"driver": driver, "nodeName": node,
                 "pool": {"name": node, "generation": 1, "resourceSliceCount": 1}, "devices": []},
    }  # fmt: skip


def listed(apiserver: ApiServer, selector: str) -> tuple[list[str], str]:
    client = apiserver.access().new_client()
    try:
        items, version = raw.list_objects(
            client, raw.RESOURCE_SLICES, field_selector=selector, timeout=(5, 5)
        )
    finally:
        close_client(client)
    return sorted(raw.object_name(item) for item in items), version


def watched(apiserver: ApiServer, selector: str, version: str, count: int) -> list[tuple[str, str]]:
    """The first `count` events of a watch from `version`: (type, name)."""
    client = apiserver.access().new_client()
    response = raw.open_watch(
        client, raw.RESOURCE_SLICES, field_selector=selector, resource_version=version,
        server_timeout=5, timeout=(5, 10),
    )  # fmt: skip
    try:
        events = itertools.islice(raw.iter_events(response), count)
        return [(event["type"], raw.object_name(event["object"])) for event in events]
    finally:
        raw.close_quietly(response)
        close_client(client)


async def test_slices_are_selected_by_node_and_driver(apiserver: ApiServer) -> None:
    for obj in (a_slice("a", "n1"), a_slice("b", "n2"), a_slice("c", "n1", "net.example.com")):
        await apiserver.create(RESOURCE_SLICES, obj)
    names, _ = await asyncio.to_thread(listed, apiserver, "spec.nodeName=n1")
    assert names == ["a", "c"]
    names, _ = await asyncio.to_thread(
        listed, apiserver, "spec.nodeName=n1,spec.driver=gpu.nvidia.com"
    )
    assert names == ["a"]
    names, _ = await asyncio.to_thread(listed, apiserver, "spec.driver!=gpu.nvidia.com")
    assert names == ["c"]


async def test_a_field_the_server_does_not_index_is_a_bad_request(apiserver: ApiServer) -> None:
    with pytest.raises(ApiException) as caught:
        await asyncio.to_thread(listed, apiserver, "spec.pool.name=n1")
    assert caught.value.status == 400
    message = json.loads(caught.value.body)["message"]
    assert message == 'unable to parse requirement: field label not supported: "spec.pool.name"'


async def test_a_slice_moved_between_nodes_leaves_one_watch_and_enters_the_other(
    apiserver: ApiServer,
) -> None:
    created = await apiserver.create(RESOURCE_SLICES, a_slice("a", "n1"))
    _, version = await asyncio.to_thread(listed, apiserver, "spec.nodeName=n1")
    first = asyncio.create_task(
        asyncio.to_thread(watched, apiserver, "spec.nodeName=n1", version, 1)
    )
    second = asyncio.create_task(
        asyncio.to_thread(watched, apiserver, "spec.nodeName=n2", version, 1)
    )
    created["spec"]["nodeName"] = "n2"
    await apiserver.replace(f"{RESOURCE_SLICES}/a", created)
    assert await first == [("DELETED", "a")]
    assert await second == [("ADDED", "a")]
