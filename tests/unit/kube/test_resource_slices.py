"""The ResourceSlice publisher against the emulated API server: writes, repairs, faults."""

from __future__ import annotations

import asyncio
import queue
import random
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

import pytest

from devices.model import Inventory
from foundation.backoff import Backoff
from kube.pacing import WatchTimeouts
from kube.resource_slices import Goal, SlicePublisher, SliceState
from resources.dra_slices import pack, slice_devices
from resources.options import MigStrategy
from tests.unit.kube.apiserver import (
    RESOURCE_SLICES,
    ApiServer,
    api_requests,
    request_counts,
)
from tests.unit.resources.nodes import gpu_uuid, make_gpu
from tests.waiting import eventually

DRIVER = "gpu.nvidia.com"
NODE = "gpu-node-1"
FAST = Backoff(initial=0.2, cap=1.0)


def wanted(
    count: int = 8, health: dict[str, tuple[str, str]] | None = None
) -> list[dict[str, Any]]:
    inventory = Inventory("550.54.15", "12.4", tuple(make_gpu(i) for i in range(count)))
    devices = slice_devices(inventory, MigStrategy.NONE, health)
    return pack(devices, driver=DRIVER, node=NODE, pool_generation=0)


def tainted(index: int) -> dict[str, tuple[str, str]]:
    return {gpu_uuid(index): ("xid 79", "2024-06-01T12:00:00Z")}


class Reports:
    def __init__(self) -> None:
        self.errors: queue.Queue[str] = queue.Queue()

    def __call__(self, message: str) -> None:
        self.errors.put(message)

    def all(self) -> list[str]:
        found = []
        while not self.errors.empty():
            found.append(self.errors.get_nowait())
        return found

    async def one_containing(self, text: str, timeout: float = 10.0) -> str:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            try:
                message = await asyncio.to_thread(
                    self.errors.get, True, max(0.01, deadline - loop.time())
                )
            except queue.Empty:
                pytest.fail(f"no error containing {text!r} within {timeout} s")
            if text in message:
                return message


class Draws(random.Random):
    """A Random that records the ranges `jittered` draws backoff delays from."""

    def __init__(self) -> None:
        super().__init__(7)
        self.ranges: list[tuple[float, float]] = []

    def uniform(self, a: float, b: float) -> float:
        self.ranges.append((a, b))
        return super().uniform(a, b)


Start = Callable[..., SlicePublisher]


@pytest.fixture
async def node_uid(apiserver: ApiServer) -> str:
    await apiserver.add_node(NODE)
    _, node = await apiserver.get(f"/api/v1/nodes/{NODE}")
    return str(node["metadata"]["uid"])


@pytest.fixture
async def reports() -> Reports:
    return Reports()


@pytest.fixture
async def start(apiserver: ApiServer, reports: Reports) -> AsyncIterator[Start]:
    started: list[SlicePublisher] = []

    def make(**changes: Any) -> SlicePublisher:
        options: dict[str, Any] = {
            "node_name": NODE, "driver": DRIVER, "on_error": reports, "backoff": FAST,
        }  # fmt: skip
        options.update(changes)
        publisher = SlicePublisher(apiserver.access(), **options)
        publisher.start()
        started.append(publisher)
        return publisher

    yield make
    for publisher in started:
        await asyncio.to_thread(publisher.close)


async def converged(publisher: SlicePublisher, timeout: float = 10.0) -> SliceState:
    done = await asyncio.to_thread(publisher.wait_converged, timeout)
    assert done, f"not converged: {publisher.state()}"
    return publisher.state()


def writes(apiserver: ApiServer) -> dict[str, int]:
    counts = request_counts(api_requests(apiserver.handler))
    return {verb: n for verb, n in counts.items() if verb not in ("list", "watch")}


def specs(slices: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {name: obj["spec"] for name, obj in slices.items()}


def expected(objects: Sequence[dict[str, Any]], generation: int) -> dict[str, dict[str, Any]]:
    return {
        obj["metadata"]["name"]: {**obj["spec"], "pool": {**obj["spec"]["pool"],
                                                          "generation": generation}}
        for obj in objects
    }  # fmt: skip


async def test_publish_creates_the_slices_owned_by_the_node(
    apiserver: ApiServer, node_uid: str, start: Start, reports: Reports
) -> None:
    publisher = start()
    publisher.publish(wanted())
    state = await converged(publisher)
    held = await apiserver.slices()
    assert specs(held) == expected(wanted(), generation=1)
    (only,) = held.values()
    assert only["metadata"]["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Node", "name": NODE, "uid": node_uid, "controller": True}
    ]
    assert state == SliceState(Goal.PUBLISH, True, generation=1, slices=1, devices=8)
    assert writes(apiserver) == {"get": 1, "create": 1}  # the Node's uid, then the slice
    watches = [r for r in api_requests(apiserver.handler) if r.params.get("watch") == "true"]
    assert watches[0].params["fieldSelector"] == f"spec.nodeName={NODE},spec.driver={DRIVER}"
    assert watches[0].params["allowWatchBookmarks"] == "true"
    assert reports.all() == []


async def test_publishing_what_the_api_holds_sends_nothing_even_after_a_restart(
    apiserver: ApiServer, node_uid: str, start: Start
) -> None:
    first = start(node_uid=node_uid)
    first.publish(wanted())
    await converged(first)
    before = writes(apiserver)
    first.publish(wanted())
    await converged(first)
    await asyncio.to_thread(first.close)
    restarted = start(node_uid=node_uid)
    restarted.publish(wanted())
    state = await converged(restarted)
    assert writes(apiserver) == before == {"create": 1}
    assert state.generation == 1


async def test_one_tainted_device_is_one_update_in_the_same_generation(
    apiserver: ApiServer, node_uid: str, start: Start
) -> None:
    publisher = start(node_uid=node_uid)
    publisher.publish(wanted())
    await converged(publisher)
    publisher.publish(wanted(health=tainted(3)))
    state = await converged(publisher)
    assert specs(await apiserver.slices()) == expected(wanted(health=tainted(3)), generation=1)
    assert writes(apiserver) == {"create": 1, "update": 1}
    assert state.generation == 1
    publisher.publish(wanted())  # recovered: the taint goes, in one more update
    await converged(publisher)
    assert writes(apiserver) == {"create": 1, "update": 2}


async def test_300_devices_take_3_slices_and_shrinking_to_100_deletes_2_and_bumps_generation(
    apiserver: ApiServer, node_uid: str, start: Start
) -> None:
    publisher = start(node_uid=node_uid)
    publisher.publish(wanted(300))
    state = await converged(publisher)
    held = await apiserver.slices()
    assert [len(s["spec"]["devices"]) for s in held.values()] == [128, 128, 44]
    assert {s["spec"]["pool"]["resourceSliceCount"] for s in held.values()} == {3}
    assert (state.generation, state.slices, state.devices) == (1, 3, 300)
    publisher.publish(wanted(100))
    state = await converged(publisher)
    held = await apiserver.slices()
    assert specs(held) == expected(wanted(100), generation=2)
    assert (state.generation, state.slices, state.devices) == (2, 1, 100)
    assert writes(apiserver) == {"create": 3, "delete": 2, "update": 1}
    publisher.publish(wanted(300))  # and back: new slices, a new generation for all
    state = await converged(publisher)
    assert specs(await apiserver.slices()) == expected(wanted(300), generation=3)


async def test_a_slice_edited_or_deleted_by_someone_else_is_put_back(
    apiserver: ApiServer, node_uid: str, start: Start
) -> None:
    publisher = start(node_uid=node_uid)
    publisher.publish(wanted(300))
    await converged(publisher)
    want = expected(wanted(300), generation=1)
    name = f"{NODE}-{DRIVER}-1"
    edited = (await apiserver.slices())[name]
    edited["spec"]["devices"] = edited["spec"]["devices"][:5]
    await apiserver.replace(f"{RESOURCE_SLICES}/{name}", edited)

    async def restored() -> bool:
        return specs(await apiserver.slices()) == want

    await eventually(restored, what="the edited slice put back")  # one update: same generation
    await apiserver.delete(f"{RESOURCE_SLICES}/{NODE}-{DRIVER}-2")
    want = expected(wanted(300), generation=2)  # a slice added to the pool: a new generation
    await eventually(restored, what="the deleted slice created again")
    assert publisher.state().error == ""


async def test_slices_collected_with_a_deleted_node_come_back_only_with_the_node(
    apiserver: ApiServer, node_uid: str, start: Start, reports: Reports
) -> None:
    publisher = start(node_uid=node_uid)
    publisher.publish(wanted())
    await converged(publisher)
    # The Node goes, and the garbage collector takes the slices it owns.
    await apiserver.delete_node(NODE)
    for name in await apiserver.slices():
        await apiserver.delete(f"{RESOURCE_SLICES}/{name}")
    message = await reports.one_containing("reading node")
    assert message.startswith(f"reading node {NODE}: HTTP 404 Not Found")
    assert await apiserver.slices() == {}  # nothing owned by the Node that is gone
    await apiserver.add_node(NODE)
    _, node = await apiserver.get(f"/api/v1/nodes/{NODE}")
    assert node["metadata"]["uid"] != node_uid

    async def owned_by_the_new_node() -> bool:
        held = list((await apiserver.slices()).values())
        return [s["metadata"]["ownerReferences"][0]["uid"] for s in held] == [
            node["metadata"]["uid"]
        ]

    await eventually(owned_by_the_new_node, what="the slice again, owned by the new Node")


async def test_a_stray_slice_of_our_driver_on_our_node_is_deleted(
    apiserver: ApiServer, node_uid: str, start: Start
) -> None:
    publisher = start(node_uid=node_uid)
    publisher.publish(wanted())
    await converged(publisher)
    stray = wanted()[0]
    stray["metadata"]["name"] = "left-over-from-an-older-plugin"
    await apiserver.create(RESOURCE_SLICES, stray)

    async def only_ours() -> bool:
        return set(await apiserver.slices()) == {f"{NODE}-{DRIVER}-0"}

    await eventually(only_ours, what="the stray slice deleted")


async def test_slices_of_other_drivers_and_other_nodes_are_never_touched(
    apiserver: ApiServer, node_uid: str, start: Start
) -> None:
    other_driver = wanted()[0]
    other_driver["metadata"]["name"] = "nic-slice"
    other_driver["spec"]["driver"] = "net.example.com"
    other_node = wanted()[0]
    other_node["metadata"]["name"] = f"gpu-node-2-{DRIVER}-0"
    other_node["spec"] |= {"nodeName": "gpu-node-2", "pool": {**other_node["spec"]["pool"],
                                                              "name": "gpu-node-2"}}  # fmt: skip
    foreign = {
        obj["metadata"]["name"]: await apiserver.create(RESOURCE_SLICES, obj)
        for obj in (other_driver, other_node)
    }
    publisher = start(node_uid=node_uid)
    publisher.publish(wanted(300))
    await converged(publisher)
    publisher.withdraw()
    await converged(publisher)
    assert await apiserver.slices() == foreign


async def test_withdraw_deletes_our_slices_and_close_leaves_them(
    apiserver: ApiServer, node_uid: str, start: Start
) -> None:
    publisher = start(node_uid=node_uid)
    publisher.publish(wanted(300))
    await converged(publisher)
    publisher.withdraw()
    state = await converged(publisher)
    assert await apiserver.slices() == {}
    assert state == SliceState(Goal.WITHDRAW, True)
    publisher.publish(wanted())  # a pool published afresh starts again at 1
    assert (await converged(publisher)).generation == 1
    await asyncio.to_thread(publisher.close)
    assert set(await apiserver.slices()) == {f"{NODE}-{DRIVER}-0"}


async def test_a_conflict_rereads_the_slice_and_writes_again(
    apiserver: ApiServer, node_uid: str, start: Start, reports: Reports
) -> None:
    publisher = start(node_uid=node_uid)
    publisher.publish(wanted())
    await converged(publisher)
    fault = apiserver.handler.fail(
        "update", 409, "Conflict", "the object has been modified; please apply your changes"
    )
    publisher.publish(wanted(health=tainted(0)))
    await converged(publisher)
    assert fault.served == 1
    assert specs(await apiserver.slices()) == expected(wanted(health=tainted(0)), generation=1)
    assert writes(apiserver) == {"create": 1, "update": 2, "get": 1}  # the GET re-read it
    assert reports.all() == []


async def test_an_update_racing_another_writer_gets_409_and_lands_on_the_new_version(
    apiserver: ApiServer, node_uid: str, start: Start
) -> None:
    publisher = start(node_uid=node_uid)
    publisher.publish(wanted())
    await converged(publisher)
    name = f"{NODE}-{DRIVER}-0"
    theirs = (await apiserver.slices())[name]
    await apiserver.handler.patch(f"{RESOURCE_SLICES}/{name}", json={"metadata": {
        "labels": {"edited-by": "someone"}}})  # fmt: skip
    publisher.publish(wanted(health=tainted(1)))
    await converged(publisher)
    after = (await apiserver.slices())[name]
    assert after["spec"] == expected(wanted(health=tainted(1)), generation=1)[name]
    assert after["metadata"]["resourceVersion"] != theirs["metadata"]["resourceVersion"]


async def test_the_api_server_down_is_reported_once_and_the_last_wish_lands_when_it_is_back(
    apiserver: ApiServer, node_uid: str, start: Start, reports: Reports
) -> None:
    publisher = start(node_uid=node_uid)
    publisher.publish(wanted())
    await converged(publisher)
    await apiserver.down()
    publisher.publish(wanted(health=tainted(2)))
    refused = await reports.one_containing("cannot connect to the API server")
    assert "\n" not in refused
    await eventually(lambda: publisher.state().error, what="the failure in the state")
    publisher.publish(wanted(300))  # the last wish is the one that lands
    await apiserver.up()
    state = await converged(publisher, timeout=20.0)
    assert specs(await apiserver.slices()) == expected(wanted(300), generation=2)
    assert state.error == ""
    assert refused not in reports.all()  # told once, however many attempts failed


async def test_403_is_reported_once_and_retried_with_a_growing_jittered_backoff(
    apiserver: ApiServer, node_uid: str, start: Start, reports: Reports
) -> None:
    draws = Draws()
    fault = apiserver.handler.fail(
        "create", 403, "Forbidden",
        'resourceslices.resource.k8s.io is forbidden: User "node" cannot create',
        times=4,
    )  # fmt: skip
    publisher = start(node_uid=node_uid, rng=draws, backoff=Backoff(initial=0.05, cap=0.2))
    publisher.publish(wanted())
    state = await converged(publisher)
    assert fault.served == 4
    (message,) = reports.all()
    assert message.startswith(f"creating ResourceSlice {NODE}-{DRIVER}-0: HTTP 403 Forbidden: ")
    assert state.error == ""
    ceilings = [high for _, high in draws.ranges]
    assert ceilings == [0.05, 0.1, 0.2, 0.2]  # doubling, capped: never a tight loop
    assert all(low > 0 for low, _ in draws.ranges)


async def test_a_slice_moved_to_another_node_is_left_alone_and_reported(
    apiserver: ApiServer, node_uid: str, start: Start, reports: Reports
) -> None:
    publisher = start(node_uid=node_uid)
    publisher.publish(wanted())
    await converged(publisher)
    name = f"{NODE}-{DRIVER}-0"
    moved = (await apiserver.slices())[name]
    moved["spec"]["nodeName"] = "gpu-node-2"
    theirs = await apiserver.replace(f"{RESOURCE_SLICES}/{name}", moved)
    message = await reports.one_containing("left alone")
    assert message == (
        f"ResourceSlice {name} belongs to driver {DRIVER} on node gpu-node-2: left alone"
    )
    assert (await apiserver.slices())[name] == theirs


async def test_a_publisher_that_cannot_find_its_node_says_so(
    apiserver: ApiServer, start: Start, reports: Reports
) -> None:
    publisher = start()
    publisher.publish(wanted())
    message = await reports.one_containing("reading node")
    assert message.startswith(f"reading node {NODE}: HTTP 404 Not Found")
    assert not publisher.state().converged


def test_publish_refuses_slices_of_another_node_or_driver(apiserver: ApiServer) -> None:
    publisher = SlicePublisher(apiserver.access(), node_name="gpu-node-2", driver=DRIVER)
    with pytest.raises(ValueError, match=f"for driver {DRIVER} on node {NODE}, not"):
        publisher.publish(wanted())
    assert publisher.state() == SliceState()


async def test_a_relist_after_410_gone_writes_nothing_and_still_sees_edits(
    apiserver: ApiServer, node_uid: str, start: Start
) -> None:
    publisher = start(node_uid=node_uid, watch_timeouts=WatchTimeouts(1, 1))
    publisher.publish(wanted())
    await converged(publisher)
    before = writes(apiserver)
    apiserver.handler.compact()  # the next watch resumes from a version the server forgot
    await apiserver.handler.requests_reach(
        lambda requests: request_counts(requests).get("list", 0) >= 2
    )
    assert writes(apiserver) == before
    name = f"{NODE}-{DRIVER}-0"
    edited = (await apiserver.slices())[name]
    edited["spec"]["devices"] = []
    await apiserver.replace(f"{RESOURCE_SLICES}/{name}", edited)

    async def restored() -> bool:
        return specs(await apiserver.slices()) == expected(wanted(), generation=1)

    await eventually(restored, what="the edit put back after the relist")


async def test_on_state_may_call_back_into_the_publisher_and_ends_on_the_last_state(
    apiserver: ApiServer, node_uid: str, start: Start
) -> None:
    seen: list[SliceState] = []
    publishers: list[SlicePublisher] = []

    def on_state(state: SliceState) -> None:
        seen.append(publishers[0].state())  # reading (or publishing) from here never deadlocks

    publishers.append(start(node_uid=node_uid, on_state=on_state))
    publishers[0].publish(wanted())
    final = await converged(publishers[0])
    await eventually(lambda: seen and seen[-1] == final, what="the last state told")
    assert seen[0].goal is Goal.PUBLISH
    assert not seen[0].converged
