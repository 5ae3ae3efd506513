"""The ResourceSlice publisher against the emulated API server: writes, repairs, faults.

The publisher writes only when asked (`write`, from a thread, as the plugin's
loop calls it), and says from its watch whether a write is due (`pending`);
the tests play the loop's part: wait for `on_change`, look at `pending`, write.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

import kmock
import pytest

from devices.model import Inventory
from kube.errors import KubeError
from kube.pacing import Clock, WatchTimeouts
from kube.resource_slices import Goal, SlicePublisher, SliceState
from resources.dra_slices import pack, slice_devices
from resources.options import MigStrategy
from tests.unit.kube.apiserver import (
    RESOURCE_SLICES,
    ApiServer,
    Outage,
    api_requests,
    error_response,
    request_counts,
)
from tests.unit.kube.test_node_watch import StridingClock
from tests.unit.resources.nodes import gpu_uuid, make_gpu
from tests.waiting import eventually

DRIVER = "gpu.nvidia.com"
NODE = "gpu-node-1"


def wanted(
    count: int = 8, health: dict[str, tuple[str, str]] | None = None
) -> list[dict[str, Any]]:
    inventory = Inventory("550.54.15", "12.4", tuple(make_gpu(i) for i in range(count)))
    devices = slice_devices(inventory, MigStrategy.NONE, health)
    return pack(devices, driver=DRIVER, node=NODE, pool_generation=0)


def tainted(index: int) -> dict[str, tuple[str, str]]:
    return {gpu_uuid(index): ("xid 79", "2024-06-01T12:00:00Z")}


class Hints:
    """Counts `on_change` calls (made on the watch thread); a test awaits the next one."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self.count = 0

    def __call__(self) -> None:
        with self._changed:
            self.count += 1
            self._changed.notify_all()

    async def beyond(self, seen: int, timeout: float = 10.0) -> int:
        def wait() -> bool:
            with self._changed:
                return self._changed.wait_for(lambda: self.count > seen, timeout)

        assert await asyncio.to_thread(wait), f"no on_change after the {seen}th in {timeout} s"
        return self.count


Start = Callable[..., SlicePublisher]


@pytest.fixture
async def node_uid(apiserver: ApiServer) -> str:
    await apiserver.add_node(NODE)
    _, node = await apiserver.get(f"/api/v1/nodes/{NODE}")
    return str(node["metadata"]["uid"])


@pytest.fixture
async def hints() -> Hints:
    return Hints()


@pytest.fixture
async def start(apiserver: ApiServer, hints: Hints) -> AsyncIterator[Start]:
    started: list[SlicePublisher] = []

    def make(**changes: Any) -> SlicePublisher:
        options: dict[str, Any] = {"node_name": NODE, "driver": DRIVER, "on_change": hints}
        options.update(changes)
        publisher = SlicePublisher(apiserver.access(), **options)
        publisher.start()
        started.append(publisher)
        return publisher

    yield make
    for publisher in started:
        await asyncio.to_thread(publisher.close)


async def write(publisher: SlicePublisher, slices: Sequence[dict[str, Any]] | None) -> SliceState:
    return await asyncio.to_thread(publisher.write, slices)


async def failing_write(publisher: SlicePublisher, slices: Sequence[dict[str, Any]] | None) -> str:
    with pytest.raises(KubeError) as caught:
        await write(publisher, slices)
    message = str(caught.value)
    assert "\n" not in message
    return message


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


def list_failing() -> Outage:
    return Outage(lambda: error_response(500, "InternalError", "etcd is down"))


async def test_a_write_creates_the_slices_owned_by_the_node(
    apiserver: ApiServer, node_uid: str, start: Start, hints: Hints
) -> None:
    publisher = start()
    state = await write(publisher, wanted())
    held = await apiserver.slices()
    assert specs(held) == expected(wanted(), generation=1)
    (only,) = held.values()
    assert only["metadata"]["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Node", "name": NODE, "uid": node_uid, "controller": True}
    ]
    assert state == SliceState(Goal.PUBLISH, True, generation=1, slices=1, devices=8)
    assert writes(apiserver) == {"get": 1, "create": 1}  # the Node's uid, then the slice
    assert not publisher.pending(wanted())
    assert hints.count >= 1  # the first list
    watches = [r for r in api_requests(apiserver.handler) if r.params.get("watch") == "true"]
    assert watches[0].params["fieldSelector"] == f"spec.nodeName={NODE},spec.driver={DRIVER}"
    assert watches[0].params["allowWatchBookmarks"] == "true"


async def test_writing_what_the_api_holds_sends_nothing_even_after_a_restart(
    apiserver: ApiServer, node_uid: str, start: Start, hints: Hints
) -> None:
    first = start(node_uid=node_uid)
    await write(first, wanted())
    before = writes(apiserver)
    assert (await write(first, wanted())).converged
    assert writes(apiserver) == before == {"create": 1}
    await asyncio.to_thread(first.close)

    seen = hints.count
    restarted = start()  # not told the Node's uid: the slices still compare equal
    await hints.beyond(seen)
    assert not restarted.pending(wanted())
    assert not restarted.holds_none()
    assert restarted.state() == SliceState(Goal.NONE, False, generation=1, slices=1, devices=8)
    state = await write(restarted, wanted())
    assert writes(apiserver) == {"create": 1, "get": 1}  # the uid read, nothing written
    assert state == SliceState(Goal.PUBLISH, True, generation=1, slices=1, devices=8)


async def test_one_tainted_device_is_one_update_in_the_same_generation(
    apiserver: ApiServer, node_uid: str, start: Start
) -> None:
    publisher = start(node_uid=node_uid)
    await write(publisher, wanted())
    assert publisher.pending(wanted(health=tainted(3)))
    state = await write(publisher, wanted(health=tainted(3)))
    assert specs(await apiserver.slices()) == expected(wanted(health=tainted(3)), generation=1)
    assert writes(apiserver) == {"create": 1, "update": 1}
    assert state.generation == 1
    await write(publisher, wanted())  # recovered: the taint goes, in one more update
    assert writes(apiserver) == {"create": 1, "update": 2}


async def test_300_devices_take_3_slices_and_shrinking_deletes_first_and_bumps_generation(
    apiserver: ApiServer, node_uid: str, start: Start
) -> None:
    publisher = start(node_uid=node_uid)
    state = await write(publisher, wanted(300))
    held = await apiserver.slices()
    assert [len(s["spec"]["devices"]) for s in held.values()] == [128, 128, 44]
    assert {s["spec"]["pool"]["resourceSliceCount"] for s in held.values()} == {3}
    assert (state.generation, state.slices, state.devices) == (1, 3, 300)
    sent = len(api_requests(apiserver.handler))
    state = await write(publisher, wanted(100))
    verbs = [next(iter(request_counts([r]))) for r in api_requests(apiserver.handler)[sent:]]
    # Obsolete slices go before the survivor changes: a gone device is never offered.
    assert [verb for verb in verbs if verb != "watch"] == ["delete", "delete", "update"]
    assert specs(await apiserver.slices()) == expected(wanted(100), generation=2)
    assert (state.generation, state.slices, state.devices) == (2, 1, 100)
    state = await write(publisher, wanted(300))  # and back: new slices, a new generation for all
    assert specs(await apiserver.slices()) == expected(wanted(300), generation=3)
    assert state.generation == 3


async def test_an_edit_by_someone_else_is_hinted_pending_and_put_back_by_the_next_write(
    apiserver: ApiServer, node_uid: str, start: Start, hints: Hints
) -> None:
    publisher = start(node_uid=node_uid)
    await write(publisher, wanted(300))
    name = f"{NODE}-{DRIVER}-1"
    edited = (await apiserver.slices())[name]
    edited["spec"]["devices"] = edited["spec"]["devices"][:5]
    seen = hints.count
    await apiserver.replace(f"{RESOURCE_SLICES}/{name}", edited)
    await eventually(lambda: publisher.pending(wanted(300)), what="the edit seen as pending")
    await hints.beyond(seen)
    assert not publisher.state().converged
    before = writes(apiserver)
    state = await write(publisher, wanted(300))
    assert specs(await apiserver.slices()) == expected(wanted(300), generation=1)
    assert writes(apiserver) == {**before, "update": before.get("update", 0) + 1}
    assert state.converged
    assert not publisher.pending(wanted(300))

    seen = hints.count
    await apiserver.delete(f"{RESOURCE_SLICES}/{NODE}-{DRIVER}-2")
    await eventually(lambda: publisher.pending(wanted(300)), what="the deletion seen")
    await hints.beyond(seen)
    await write(publisher, wanted(300))  # a slice added to the pool: a new generation
    assert specs(await apiserver.slices()) == expected(wanted(300), generation=2)
    assert publisher.state().error == ""


async def test_slices_collected_with_a_deleted_node_come_back_only_with_the_node(
    apiserver: ApiServer, node_uid: str, start: Start
) -> None:
    publisher = start(node_uid=node_uid)
    await write(publisher, wanted())
    # The Node goes, and the garbage collector takes the slices it owns.
    await apiserver.delete_node(NODE)
    for name in await apiserver.slices():
        await apiserver.delete(f"{RESOURCE_SLICES}/{name}")
    await eventually(publisher.holds_none, what="the slices seen gone")
    assert publisher.pending(wanted())
    message = await failing_write(publisher, wanted())
    assert message.startswith(f"reading node {NODE}: HTTP 404 Not Found")
    assert publisher.state().error == message
    assert await apiserver.slices() == {}  # nothing owned by the Node that is gone

    await apiserver.add_node(NODE)
    _, node = await apiserver.get(f"/api/v1/nodes/{NODE}")
    assert node["metadata"]["uid"] != node_uid
    state = await write(publisher, wanted())
    held = list((await apiserver.slices()).values())
    assert [s["metadata"]["ownerReferences"][0]["uid"] for s in held] == [node["metadata"]["uid"]]
    assert state.error == ""
    assert state.converged


async def test_a_stray_slice_of_our_driver_on_our_node_is_deleted_by_the_next_write(
    apiserver: ApiServer, node_uid: str, start: Start
) -> None:
    publisher = start(node_uid=node_uid)
    await write(publisher, wanted())
    stray = wanted()[0]
    stray["metadata"]["name"] = "left-over-from-an-older-plugin"
    await apiserver.create(RESOURCE_SLICES, stray)
    await eventually(lambda: publisher.pending(wanted()), what="the stray slice seen")
    await write(publisher, wanted())
    assert set(await apiserver.slices()) == {f"{NODE}-{DRIVER}-0"}


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
    await write(publisher, wanted(300))
    assert publisher.state().slices == 3
    await write(publisher, None)
    assert await apiserver.slices() == foreign
    assert publisher.holds_none()
    assert not publisher.pending(None)


async def test_writing_none_withdraws_our_slices_and_close_leaves_them(
    apiserver: ApiServer, node_uid: str, start: Start
) -> None:
    publisher = start(node_uid=node_uid)
    await write(publisher, wanted(300))
    assert publisher.pending(None)
    state = await write(publisher, None)
    assert await apiserver.slices() == {}
    assert state == SliceState(Goal.WITHDRAW, True)
    assert publisher.holds_none()
    assert (await write(publisher, wanted())).generation == 1  # a new pool starts again at 1
    assert await asyncio.to_thread(publisher.close)
    assert set(await apiserver.slices()) == {f"{NODE}-{DRIVER}-0"}
    message = await failing_write(publisher, None)
    assert message.endswith("the publisher is closed")
    assert set(await apiserver.slices()) == {f"{NODE}-{DRIVER}-0"}


async def test_a_conflict_rereads_the_slice_and_writes_again(
    apiserver: ApiServer, node_uid: str, start: Start
) -> None:
    publisher = start(node_uid=node_uid)
    await write(publisher, wanted())
    fault = apiserver.handler.fail(
        "update", 409, "Conflict", "the object has been modified; please apply your changes"
    )
    state = await write(publisher, wanted(health=tainted(0)))
    assert fault.served == 1
    assert specs(await apiserver.slices()) == expected(wanted(health=tainted(0)), generation=1)
    assert writes(apiserver) == {"create": 1, "update": 2, "get": 1}  # the GET re-read it
    assert state.converged
    assert state.error == ""


async def test_a_slice_conflicting_at_every_attempt_fails_the_write_with_409(
    apiserver: ApiServer, node_uid: str, start: Start
) -> None:
    # Conflict pauses a hundredth of their length: the attempts, not the waits, are tested.
    publisher = start(node_uid=node_uid, clock=Clock(scale=0.01))
    await write(publisher, wanted())
    fault = apiserver.handler.fail("update", 409, "Conflict", "the object has been modified",
                                   times=5)  # fmt: skip
    with pytest.raises(KubeError) as caught:
        await write(publisher, wanted(health=tainted(0)))
    name = f"{NODE}-{DRIVER}-0"
    assert str(caught.value) == f"writing ResourceSlice {name}: still conflicting after 5 attempts"
    assert caught.value.status == 409
    assert fault.served == 5
    assert writes(apiserver) == {"create": 1, "update": 5, "get": 4}  # a re-read between each
    assert publisher.state().error == str(caught.value)
    assert specs(await apiserver.slices()) == expected(wanted(), generation=1)  # as it was
    state = await write(publisher, wanted(health=tainted(0)))
    assert state.converged
    assert state.error == ""


async def test_a_failed_delete_raises_one_line_and_leaves_the_slices_until_a_later_write(
    apiserver: ApiServer, node_uid: str, start: Start
) -> None:
    publisher = start(node_uid=node_uid)
    await write(publisher, wanted())
    fault = apiserver.handler.fail(
        "delete", 403, "Forbidden",
        'resourceslices.resource.k8s.io is forbidden: User "node" cannot delete',
    )  # fmt: skip
    message = await failing_write(publisher, None)
    name = f"{NODE}-{DRIVER}-0"
    assert message.startswith(f"deleting ResourceSlice {name}: HTTP 403 Forbidden: ")
    assert fault.served == 1
    assert set(await apiserver.slices()) == {name}
    state = publisher.state()
    assert (state.goal, state.converged, state.error) == (Goal.WITHDRAW, False, message)
    assert publisher.pending(None)
    state = await write(publisher, None)
    assert await apiserver.slices() == {}
    assert state == SliceState(Goal.WITHDRAW, True)


async def test_an_update_racing_another_writer_gets_409_and_lands_on_the_new_version(
    apiserver: ApiServer, node_uid: str, start: Start
) -> None:
    publisher = start(node_uid=node_uid)
    await write(publisher, wanted())
    name = f"{NODE}-{DRIVER}-0"
    theirs = (await apiserver.slices())[name]
    await apiserver.handler.patch(f"{RESOURCE_SLICES}/{name}", json={"metadata": {
        "labels": {"edited-by": "someone"}}})  # fmt: skip
    await write(publisher, wanted(health=tainted(1)))
    after = (await apiserver.slices())[name]
    assert after["spec"] == expected(wanted(health=tainted(1)), generation=1)[name]
    assert after["metadata"]["resourceVersion"] != theirs["metadata"]["resourceVersion"]


async def test_an_update_of_a_slice_deleted_unseen_creates_it_again(
    apiserver: ApiServer, node_uid: str, start: Start
) -> None:
    # Each watch has run its course when the server ends it: resumed at once.
    publisher = start(
        node_uid=node_uid, watch_timeouts=WatchTimeouts(30, 30), clock=StridingClock(stride=30.0)
    )
    await write(publisher, wanted())
    # The next watch hangs, so the deletion below reaches no copy: the write
    # still believes the slice is there, and its update meets 404 Not Found.
    await apiserver.handler.watching()  # the first watch, before the stall is in place
    stall = Outage()
    apiserver.handler[kmock.action.WATCH] << stall
    try:
        await apiserver.handler.end_watches()  # the first watch ends as at its timeout
        await asyncio.wait_for(stall.reached.wait(), 10.0)
        await apiserver.delete(f"{RESOURCE_SLICES}/{NODE}-{DRIVER}-0")
        state = await write(publisher, wanted(health=tainted(2)))
    finally:
        stall.end()
    assert specs(await apiserver.slices()) == expected(wanted(health=tainted(2)), generation=1)
    assert writes(apiserver) == {"create": 2, "update": 1, "get": 1}
    assert state.converged
    assert state.error == ""


async def test_a_failed_write_raises_one_line_is_not_retried_and_a_later_write_clears_it(
    apiserver: ApiServer, node_uid: str, start: Start
) -> None:
    fault = apiserver.handler.fail(
        "create", 403, "Forbidden",
        'resourceslices.resource.k8s.io is forbidden: User "node" cannot create',
    )  # fmt: skip
    publisher = start(node_uid=node_uid)
    message = await failing_write(publisher, wanted())
    assert message.startswith(f"creating ResourceSlice {NODE}-{DRIVER}-0: HTTP 403 Forbidden: ")
    assert writes(apiserver) == {"create": 1}
    assert fault.served == 1
    state = publisher.state()
    assert (state.goal, state.converged, state.error) == (Goal.PUBLISH, False, message)
    assert publisher.pending(wanted())
    state = await write(publisher, wanted())
    assert state == SliceState(Goal.PUBLISH, True, generation=1, slices=1, devices=8)


async def test_the_api_server_down_fails_the_write_and_the_next_one_lands_when_it_is_back(
    apiserver: ApiServer, node_uid: str, start: Start, hints: Hints
) -> None:
    publisher = start(node_uid=node_uid)
    await write(publisher, wanted())
    seen = hints.count
    await apiserver.down()
    await eventually(lambda: publisher.state().error, what="the watch's failure")
    await hints.beyond(seen)
    message = await failing_write(publisher, wanted(health=tainted(2)))
    assert "cannot connect to the API server" in message
    assert publisher.state().error == message
    await apiserver.up()
    state = await write(publisher, wanted(300))
    assert specs(await apiserver.slices()) == expected(wanted(300), generation=2)
    assert state.converged
    # The watch relists once it is back, which clears its own failure too.
    await eventually(lambda: publisher.state().error == "", what="the watch back")


async def test_a_slice_moved_to_another_node_is_left_alone_and_the_write_says_so(
    apiserver: ApiServer, node_uid: str, start: Start
) -> None:
    publisher = start(node_uid=node_uid)
    await write(publisher, wanted())
    name = f"{NODE}-{DRIVER}-0"
    moved = (await apiserver.slices())[name]
    moved["spec"]["nodeName"] = "gpu-node-2"
    theirs = await apiserver.replace(f"{RESOURCE_SLICES}/{name}", moved)
    await eventually(lambda: publisher.pending(wanted()), what="the slice seen gone")
    message = await failing_write(publisher, wanted())
    assert message == (
        f"ResourceSlice {name} belongs to driver {DRIVER} on node gpu-node-2: left alone"
    )
    assert (await apiserver.slices())[name] == theirs


async def test_a_publisher_that_cannot_find_its_node_says_so(
    apiserver: ApiServer, start: Start
) -> None:
    publisher = start()
    message = await failing_write(publisher, wanted())
    assert message.startswith(f"reading node {NODE}: HTTP 404 Not Found")
    assert not publisher.state().converged
    assert publisher.pending(wanted())  # unknown owner, slices to create


async def test_a_write_refuses_slices_of_another_node_or_driver(apiserver: ApiServer) -> None:
    publisher = SlicePublisher(apiserver.access(), node_name="gpu-node-2", driver=DRIVER)
    with pytest.raises(ValueError, match=f"for driver {DRIVER} on node {NODE}, not"):
        publisher.write(wanted())
    assert publisher.state() == SliceState()
    assert publisher.pending(wanted())  # a write is due: it says why
    assert api_requests(apiserver.handler) == []


async def test_a_write_before_the_first_list_waits_for_it_and_fails_after_sync_timeout(
    apiserver: ApiServer, node_uid: str, start: Start, hints: Hints
) -> None:
    outage = list_failing()
    apiserver.handler[kmock.action.LIST] << outage
    publisher = start(node_uid=node_uid, sync_timeout=0.2)
    await hints.beyond(0)  # the failed list
    watched = publisher.state().error
    assert watched.startswith(f"listing ResourceSlices of driver {DRIVER} on node {NODE}: HTTP 500")
    assert publisher.pending(wanted())
    assert publisher.pending(None)
    assert not publisher.holds_none()
    message = await failing_write(publisher, wanted())
    assert message == f"ResourceSlices of node {NODE} not listed yet: {watched}"
    assert publisher.state().error == message
    assert writes(apiserver) == {}
    outage.end()
    await eventually(publisher.holds_none, what="the first list")
    state = await write(publisher, wanted())
    assert state.converged
    assert state.error == ""


async def test_a_write_waiting_for_the_first_list_lands_once_it_comes(
    apiserver: ApiServer, node_uid: str, start: Start
) -> None:
    outage = list_failing()
    apiserver.handler[kmock.action.LIST] << outage
    publisher = start(node_uid=node_uid)
    await asyncio.wait_for(outage.reached.wait(), 10.0)
    waiting = asyncio.create_task(write(publisher, wanted()))
    await eventually(lambda: publisher.state().goal is Goal.PUBLISH, what="the write waiting")
    assert not waiting.done()
    outage.end()
    state = await asyncio.wait_for(waiting, 15.0)
    assert state.converged
    assert set(await apiserver.slices()) == {f"{NODE}-{DRIVER}-0"}


async def test_a_withdrawal_waiting_for_the_first_list_is_not_converged_until_it_comes(
    apiserver: ApiServer, node_uid: str, start: Start
) -> None:
    outage = list_failing()
    apiserver.handler[kmock.action.LIST] << outage
    publisher = start(node_uid=node_uid)
    await asyncio.wait_for(outage.reached.wait(), 10.0)
    waiting = asyncio.create_task(write(publisher, None))
    await eventually(lambda: publisher.state().goal is Goal.WITHDRAW, what="the write waiting")
    assert not publisher.state().converged  # nothing listed: what the API holds is unknown
    outage.end()
    state = await asyncio.wait_for(waiting, 15.0)
    assert state == SliceState(Goal.WITHDRAW, True)


async def test_close_ends_a_write_waiting_for_the_first_list(
    apiserver: ApiServer, node_uid: str, start: Start
) -> None:
    outage = list_failing()
    apiserver.handler[kmock.action.LIST] << outage
    publisher = start(node_uid=node_uid)
    await asyncio.wait_for(outage.reached.wait(), 10.0)
    waiting = asyncio.create_task(failing_write(publisher, wanted()))
    await eventually(lambda: publisher.state().goal is Goal.PUBLISH, what="the write waiting")
    assert await asyncio.to_thread(publisher.close)
    assert (await asyncio.wait_for(waiting, 5.0)).endswith("the publisher is closed")
    outage.end()


async def test_pending_answers_from_the_watched_copy(
    apiserver: ApiServer, node_uid: str, start: Start, hints: Hints
) -> None:
    publisher = start(node_uid=node_uid)
    await hints.beyond(0)  # listed: an empty pool
    assert publisher.holds_none()
    assert not publisher.pending(None)
    assert publisher.pending(wanted())
    await write(publisher, wanted(300))
    sent = writes(apiserver)
    assert not publisher.pending(wanted(300))
    assert not publisher.pending(wanted(300))  # asked again: the same answer
    assert publisher.pending(wanted(300, health=tainted(4)))
    assert publisher.pending(wanted(100))
    assert publisher.pending(None)
    bad = wanted()
    bad[0]["spec"]["driver"] = "net.example.com"
    assert publisher.pending(bad)
    assert not publisher.holds_none()
    assert publisher.state().converged
    assert writes(apiserver) == sent  # asking sends nothing


async def test_a_relist_after_410_gone_writes_nothing_and_still_sees_edits(
    apiserver: ApiServer, node_uid: str, start: Start, hints: Hints
) -> None:
    publisher = start(node_uid=node_uid)
    await write(publisher, wanted())
    assert publisher.lists == 1
    before = writes(apiserver)
    seen = hints.count
    apiserver.handler.compact()  # the open watch is told 410 Gone: its version is forgotten
    await apiserver.handler.requests_reach(
        lambda requests: request_counts(requests).get("list", 0) >= 2
    )
    await hints.beyond(seen)  # the relist
    await eventually(lambda: publisher.lists == 2, what="the relist counted")
    assert not publisher.pending(wanted())
    assert writes(apiserver) == before
    name = f"{NODE}-{DRIVER}-0"
    edited = (await apiserver.slices())[name]
    edited["spec"]["devices"] = []
    await apiserver.replace(f"{RESOURCE_SLICES}/{name}", edited)
    await eventually(lambda: publisher.pending(wanted()), what="the edit after the relist")
    await write(publisher, wanted())
    assert specs(await apiserver.slices()) == expected(wanted(), generation=1)


async def test_on_change_may_call_back_into_the_publisher(
    apiserver: ApiServer, node_uid: str, start: Start
) -> None:
    seen: list[tuple[bool, SliceState]] = []
    publishers: list[SlicePublisher] = []
    told = threading.Event()  # the first call

    def on_change() -> None:
        # Reading from the watch thread, even during a write, never deadlocks.
        publisher = publishers[0]
        seen.append((publisher.pending(wanted()), publisher.state()))
        told.set()

    publishers.append(start(node_uid=node_uid, on_change=on_change))
    assert await asyncio.to_thread(told.wait, 10.0)
    assert seen[0] == (True, SliceState())
    await write(publishers[0], wanted())
    written = len(seen)
    await apiserver.delete(f"{RESOURCE_SLICES}/{NODE}-{DRIVER}-0")
    await eventually(
        lambda: any(pending for pending, _ in seen[written:]),
        what="the deletion told",
        detail=lambda: seen[written:],
    )
    state = next(state for pending, state in seen[written:] if pending)
    assert state.goal is Goal.PUBLISH
    assert not state.converged
