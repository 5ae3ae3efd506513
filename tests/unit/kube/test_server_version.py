"""The API server's version, as the slice publisher reads it, and the slices each version takes.

From Kubernetes 1.35 a ResourceSlice holds counter sets or devices, never
both; before, a device consumes only from a set of its own slice. The
publisher reads `GET /version` once per API connection (again only once the
watch lists anew after an outage) and says what it found; the emulated API
server answers the version a test gives it and refuses, with 422 Invalid, the
slices that version's rules refuse.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from kube.errors import KubeError
from kube.resource_slices import SlicePublisher
from kube.server_version import ServerVersion, parse_server_version
from resources.dra_partitions import partitioned_devices
from resources.dra_slices import counters_apart, pack
from resources.options import MigStrategy
from tests.unit.kube.apiserver import ApiServer, api_requests
from tests.unit.kube.emulator import SERVER_VERSION
from tests.unit.kube.slice_rules import slice_problems
from tests.unit.resources.mig_a100 import dynamic_gpu
from tests.unit.resources.nodes import inventory
from tests.waiting import eventually

DRIVER = "gpu.nvidia.com"
NODE = "gpu-node-1"

Start = Callable[[], SlicePublisher]


@pytest.fixture
async def start(apiserver: ApiServer) -> AsyncIterator[Start]:
    await apiserver.add_node(NODE)
    started: list[SlicePublisher] = []

    def make() -> SlicePublisher:
        publisher = SlicePublisher(apiserver.access(), node_name=NODE, driver=DRIVER)
        publisher.start()
        started.append(publisher)
        return publisher

    yield make
    for publisher in started:
        await asyncio.to_thread(publisher.close)


def dynamic(gpus: int, *, apart: bool) -> list[dict[str, Any]]:
    partitioned = partitioned_devices(
        inventory([dynamic_gpu(i) for i in range(gpus)]), MigStrategy.NONE
    )
    return pack(
        partitioned.devices,
        driver=DRIVER,
        node=NODE,
        pool_generation=0,
        counter_sets=partitioned.counter_sets,
        counters_apart=apart,
    )


def version_reads(apiserver: ApiServer) -> int:
    return sum(1 for r in api_requests(apiserver.handler) if r.url.path.rstrip("/") == "/version")


@pytest.mark.parametrize(
    ("body", "release"),
    [
        ({"major": "1", "minor": "35", "gitVersion": "v1.35.2"}, (1, 35)),
        ({"major": "1", "minor": "34+", "gitVersion": "v1.34.1-gke.1200"}, (1, 34)),
        ({"major": "1", "minor": "36+", "gitVersion": "weird"}, (1, 36)),
        ({"gitVersion": "v1.33.0+k3s1"}, (1, 33)),
        ({"major": "", "minor": "", "gitVersion": ""}, None),
        ({}, None),
    ],
)
def test_the_release_is_read_from_git_version_then_major_and_minor(
    body: dict[str, str], release: tuple[int, int] | None
) -> None:
    version = parse_server_version(body)
    assert (None if version is None else version.release) == release


async def test_the_version_is_read_once_per_connection(
    apiserver: ApiServer, start: Start
) -> None:
    assert SERVER_VERSION == "v1.35.0"  # the emulator's default: counter sets apart
    publisher = start()
    assert publisher.version_due()
    assert publisher.server_version is None
    version = await asyncio.to_thread(publisher.read_version)
    assert version == ServerVersion(1, 35, "v1.35.0") == publisher.server_version
    assert counters_apart(version.release)
    assert not publisher.version_due()
    await eventually(lambda: publisher.lists == 1, what="the first list")
    assert not publisher.version_due()  # the first list is the same connection
    assert version_reads(apiserver) == 1

    # An outage is over (the watch lists anew): the server may have been upgraded.
    apiserver.handler.server_version = "v1.36.1"
    apiserver.handler.compact()
    await eventually(lambda: publisher.lists == 2, what="the relist")
    assert publisher.version_due()
    assert (await asyncio.to_thread(publisher.read_version)).release == (1, 36)
    assert version_reads(apiserver) == 2


async def test_an_unreadable_version_fails_once_per_connection(
    apiserver: ApiServer, start: Start
) -> None:
    apiserver.handler.server_version = None  # /version answers 404
    publisher = start()
    with pytest.raises(KubeError) as caught:
        await asyncio.to_thread(publisher.read_version)
    message = str(caught.value)
    assert message.startswith("reading the API server's version: ")
    assert "404" in message
    assert "\n" not in message
    assert publisher.server_version is None
    assert not publisher.version_due()  # not asked again before the watch lists anew
    assert not counters_apart(None)  # and meanwhile: the older layout


@pytest.mark.parametrize(
    ("version", "apart"), [("v1.35.0", True), ("v1.34.2", False)], ids=["1.35", "1.34"]
)
async def test_each_version_takes_its_own_layout_and_refuses_the_other(
    apiserver: ApiServer, start: Start, version: str, apart: bool
) -> None:
    apiserver.handler.server_version = version
    publisher = start()
    found = await asyncio.to_thread(publisher.read_version)
    assert counters_apart(found.release) is apart
    with pytest.raises(KubeError, match="422"):
        await asyncio.to_thread(publisher.write, dynamic(4, apart=not apart))
    await asyncio.to_thread(publisher.write, dynamic(4, apart=apart))
    held = await apiserver.slices()
    assert len(held) == (1 + 2 if apart else 2)  # 4 counter sets (apart), 2 GPUs a device slice
    release = apiserver.handler.release
    assert all(slice_problems(item, release) == [] for item in held.values())
