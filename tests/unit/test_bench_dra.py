"""The DRA bench's view of the API server: this node's slices, seen the moment they are written."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from bench.dra import DRIVER, NODE, published
from tests.unit.kube.apiserver import RESOURCE_SLICES, ApiServer, running_apiserver


@pytest.fixture
async def api() -> AsyncIterator[ApiServer]:
    async with running_apiserver() as server:
        yield server


def a_slice(name: str, node: str, driver: str, devices: int) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {
            "nodeName": node,
            "driver": driver,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": f"gpu-{i}"} for i in range(devices)],
        },
    }


async def test_only_this_nodes_slices_of_our_driver_count(api: ApiServer) -> None:
    assert published(api) is None
    await api.create(RESOURCE_SLICES, a_slice("other-node", "gpu-node-2", DRIVER, 4))
    await api.create(RESOURCE_SLICES, a_slice("other-driver", NODE, "other.example.com", 2))
    assert published(api) is None  # no slice of ours: not even an empty pool
    await api.create(RESOURCE_SLICES, a_slice("ours-0", NODE, DRIVER, 0))
    assert published(api) == 0
    await api.create(RESOURCE_SLICES, a_slice("ours-1", NODE, DRIVER, 3))
    assert published(api) == 3


async def test_a_wait_ends_with_the_write_that_makes_it_true(api: ApiServer) -> None:
    waiting = asyncio.create_task(api.handler.written(lambda: published(api) == 8, timeout=5))
    await api.create(RESOURCE_SLICES, a_slice("ours-0", NODE, DRIVER, 8))
    await waiting
    gone = asyncio.create_task(api.handler.written(lambda: published(api) is None, timeout=5))
    await api.delete(f"{RESOURCE_SLICES}/ours-0")
    await gone
    assert api.stored_slices() == []


async def test_a_wait_for_a_write_that_never_comes_times_out(api: ApiServer) -> None:
    with pytest.raises(TimeoutError):
        await api.handler.written(lambda: published(api) == 8, timeout=0.05)
