"""NodeEventRecorder against an emulated API server over real HTTP.

The emulator validates Events like the real API server (tests/unit/kube/events_api.py),
so a body that is stored is a body a cluster would accept. The recorder runs
its own thread; the tests wait for what reaches the server, or for the
recorder's callbacks, never by sleeping a fixed time.
"""

from __future__ import annotations

import asyncio
import queue
import re
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

import kmock
import pytest

# The recorder's thread imports the Kubernetes client at its first event; loaded
# here, that second or more is not charged to the first test's waits.
import kube.event_api  # noqa: F401
from kube.event_series import EventType, Limits, NodeEvent, micro_time
from kube.events import NodeEventRecorder
from tests.unit.kube.apiserver import Script, error_response
from tests.unit.kube.events_api import EventsApi, running_events_api
from tests.waiting import eventually

NODE = "gpu-node-1"
NODE_UID = "6f0b1c9e-3a43-4f0e-9a57-1d2b7f3c5e11"
UNHEALTHY = NodeEvent(EventType.WARNING, "GPUUnhealthy", "HealthCheck", "GPU 3 GPU-3: xid 79")
RECOVERED = NodeEvent(EventType.NORMAL, "GPURecovered", "HealthCheck", "GPU 3 GPU-3: healthy")


@pytest.fixture
async def api() -> AsyncIterator[EventsApi]:
    async with running_events_api() as server:
        yield server


class Reports:
    """The recorder's callbacks, collected from its thread."""

    def __init__(self) -> None:
        self.errors: queue.Queue[str] = queue.Queue()
        self.infos: queue.Queue[str] = queue.Queue()
        self.drops: list[str] = []

    def kwargs(self) -> dict[str, Any]:
        return {
            "on_error": self.errors.put,
            "on_info": self.infos.put,
            "on_drop": self.drops.append,
        }

    async def next_error(self, timeout: float = 5.0) -> str:
        try:
            return await asyncio.to_thread(self.errors.get, True, timeout)
        except queue.Empty:
            pytest.fail(f"no error reported within {timeout} s")

    async def info_matching(self, text: str, timeout: float = 5.0) -> str:
        deadline = time.monotonic() + timeout
        while True:
            try:
                left = max(0.01, deadline - time.monotonic())
                message = await asyncio.to_thread(self.infos.get, True, left)
            except queue.Empty:
                pytest.fail(f"nothing saying {text!r} within {timeout} s")
            if text in message:
                return message

    def all_errors(self) -> list[str]:
        found = []
        while not self.errors.empty():
            found.append(self.errors.get_nowait())
        return found


@contextmanager
def recorder(api: EventsApi, reports: Reports, **kwargs: Any) -> Iterator[NodeEventRecorder]:
    rec = NodeEventRecorder(
        connect=api.access, node_name=NODE, timeout=3.0, **reports.kwargs(), **kwargs
    )
    rec.start()
    try:
        yield rec
    finally:
        assert rec.stop(5.0), "the recorder thread did not end"


def series_count(event: dict[str, Any]) -> int:
    return int((event.get("series") or {}).get("count", 1))


async def test_event_body_is_what_the_api_server_requires(api: EventsApi) -> None:
    await api.add_node_with_uid(NODE, NODE_UID)
    reports = Reports()
    with recorder(api, reports, reporting_instance="nvidia-device-plugin-x7k2p") as rec:
        assert rec.record(UNHEALTHY)
        await eventually(lambda: len(api.events()) == 1, what="the event")
    [event] = api.events()
    assert event["metadata"]["namespace"] == "default"
    assert re.fullmatch(rf"{NODE}\.[0-9a-f]+", event["metadata"]["name"])
    assert event["apiVersion"] == "events.k8s.io/v1"
    assert event["regarding"] == {"apiVersion": "v1", "kind": "Node", "name": NODE, "uid": NODE_UID}
    assert event["reportingController"] == "nvidia.com/device-plugin"
    assert event["reportingInstance"] == "nvidia-device-plugin-x7k2p"
    assert (event["type"], event["reason"], event["action"], event["note"]) == (
        "Warning",
        "GPUUnhealthy",
        "HealthCheck",
        "GPU 3 GPU-3: xid 79",
    )
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}(Z|\+00:00)", event["eventTime"])
    assert "series" not in event
    assert reports.drops == []
    assert reports.all_errors() == []


async def test_without_the_node_its_name_stands_in_for_the_uid(api: EventsApi) -> None:
    # What the kubelet does, and what `kubectl describe node` also finds.
    reports = Reports()
    with recorder(api, reports) as rec:
        rec.record(UNHEALTHY)
        await eventually(lambda: len(api.events()) == 1, what="the event")
    [event] = api.events()
    assert event["regarding"]["uid"] == NODE
    assert event["reportingInstance"] == NODE  # no pod name given


async def test_repeats_update_the_series_of_one_object(api: EventsApi) -> None:
    await api.add_node_with_uid(NODE, NODE_UID)
    reports = Reports()
    with recorder(api, reports) as rec:
        rec.record(UNHEALTHY)
        await eventually(lambda: len(api.events()) == 1, what="the first event")
        rec.record(UNHEALTHY)
        rec.record(UNHEALTHY)
        await eventually(lambda: series_count(api.events()[0]) == 3, what="a series of 3")
        rec.record(RECOVERED)
        await eventually(lambda: len(api.events()) == 2, what="the second event")
    first, second = api.events()
    assert first["reason"] == "GPUUnhealthy"
    assert first["series"]["lastObservedTime"] >= first["eventTime"]
    assert second["reason"] == "GPURecovered"
    assert "series" not in second
    # Updates touch only the series; the identifying fields never change.
    updates = [w for w in api.writes() if w.action == kmock.action.UPDATE]
    assert updates
    assert all(set(w.data) == {"series"} for w in updates)
    assert all(w.headers["Content-Type"] == "application/merge-patch+json" for w in updates)


async def test_a_flapping_gpu_is_held_to_the_rate_limit(api: EventsApi) -> None:
    reports = Reports()
    limits = Limits(burst=4, refill_seconds=3600)
    with recorder(api, reports, limits=limits) as rec:
        rec.record(UNHEALTHY)
        rec.record(RECOVERED)
        await eventually(lambda: len(api.events()) == 2, what="both events")
        for _ in range(50):
            rec.record(UNHEALTHY)
            rec.record(RECOVERED)
        await eventually(lambda: len(api.writes()) == 4, what="the burst to be used")
    # Stopping makes a last pass over what waits: still nothing more goes out,
    # and nothing was dropped: repeats only count.
    assert len(api.writes()) == 4
    assert reports.drops == []
    events = api.events()
    assert [e["reason"] for e in events] == ["GPUUnhealthy", "GPURecovered"]
    assert all(2 <= series_count(e) <= 51 for e in events)


async def test_waiting_events_go_out_when_tokens_come_back(api: EventsApi) -> None:
    reports = Reports()
    limits = Limits(burst=1, refill_seconds=0.3)
    with recorder(api, reports, limits=limits) as rec:
        rec.record(UNHEALTHY)
        for _ in range(4):
            rec.record(UNHEALTHY)
        rec.record(RECOVERED)
        # New events go before series updates; the series catches up with its count.
        await eventually(lambda: len(api.events()) == 2, what="both events")
        await eventually(lambda: series_count(api.events()[0]) == 5, what="the full count")
    assert reports.drops == []


async def test_a_full_backlog_drops_new_events_with_one_report(api: EventsApi) -> None:
    reports = Reports()
    limits = Limits(burst=1, refill_seconds=3600, backlog=2)
    with recorder(api, reports, limits=limits) as rec:
        rec.record(UNHEALTHY)  # takes the only token
        await eventually(lambda: len(api.events()) == 1, what="the first event")
        for index in range(5):
            rec.record(NodeEvent(EventType.WARNING, "GPUUnhealthy", "HealthCheck", f"GPU {index}"))
        await eventually(lambda: len(reports.drops) == 3, what="three drops")
        assert set(reports.drops) == {"backlog_full"}
        message = await reports.next_error()
        assert "rate-limited" in message
        assert reports.all_errors() == []
    assert len(api.events()) == 1


async def test_a_full_queue_drops_without_blocking(api: EventsApi) -> None:
    reports = Reports()
    rec = NodeEventRecorder(
        connect=api.access, node_name=NODE, limits=Limits(queue=2), **reports.kwargs()
    )
    # Not started: nothing drains the queue, so a record() that waited for room
    # would never return.
    results = [rec.record(UNHEALTHY) for _ in range(5)]
    assert results == [True, True, False, False, False]
    assert reports.drops == ["queue_full"] * 3
    assert len(reports.all_errors()) == 1
    assert rec.stop(1.0)


async def test_api_down_drops_with_one_report_and_recovers(api: EventsApi) -> None:
    await api.down()
    reports = Reports()
    with recorder(api, reports) as rec:
        for index in range(5):
            note = f"started: resource-{index}"
            assert rec.record(NodeEvent(EventType.NORMAL, "Reconfigured", "Reconfigure", note))
        message = await reports.next_error()
        assert "cannot connect to the API server" in message
        await eventually(lambda: len(reports.drops) == 5, what="every event dropped")
        assert set(reports.drops) == {"api_error"}
        assert reports.all_errors() == [], "one report per outage, not one per event"

        await api.up()
        rec.record(UNHEALTHY)
        recovered = await reports.info_matching("reach the API server again")
        assert "5 dropped meanwhile" in recovered
        await eventually(lambda: len(api.events()) == 1, what="the event after recovery")


async def test_forbidden_names_the_missing_permission(api: EventsApi) -> None:
    api.handler[kmock.resource("events.k8s.io/v1/events")][kmock.action.CREATE] << (
        lambda: error_response(403, "Forbidden", 'events.events.k8s.io is forbidden: User "x"')
    )
    reports = Reports()
    with recorder(api, reports) as rec:
        rec.record(UNHEALTHY)
        rec.record(RECOVERED)
        message = await reports.next_error()
        await eventually(lambda: len(reports.drops) == 2, what="both dropped")
    assert "HTTP 403" in message
    assert "needs create and patch on events.k8s.io events in namespace default" in message
    assert reports.all_errors() == []


@pytest.mark.parametrize(
    ("code", "reason", "words"),
    [
        (403, "Forbidden", "needs create and patch on events.k8s.io events"),
        (500, "InternalError", "dropping node events until the API server takes them"),
    ],
)
async def test_a_refused_series_update_is_dropped_and_the_count_carries_on(
    api: EventsApi, code: int, reason: str, words: str
) -> None:
    """A role with `create` but not `patch` (403), or a failing API server (500).

    The refused update is dropped with one report, never retried, and the
    object is not re-created (that would leave a twin); once the API server
    takes updates again, the next occurrence brings the series to its full
    count.
    """
    refusal = Script(lambda: error_response(code, reason, f"{reason.lower()}: no"))
    api.handler[kmock.resource("events.k8s.io/v1/events")][kmock.action.UPDATE] << refusal
    reports = Reports()
    with recorder(api, reports) as rec:
        rec.record(UNHEALTHY)
        await eventually(lambda: len(api.events()) == 1, what="the event")
        rec.record(UNHEALTHY)
        message = await reports.next_error()
        assert f"HTTP {code}" in message
        assert words in message
        await eventually(lambda: reports.drops == ["api_error"], what="the update dropped")
        assert refusal.served == 1
        rec.record(UNHEALTHY)
        await eventually(lambda: len(api.writes()) == 3, what="the next update")
        recovered = await reports.info_matching("reach the API server again")
        assert "1 dropped meanwhile" in recovered
    # What was sent (kmock's store takes a body even when a reaction refuses it,
    # so the requests tell what the recorder did): no second create, and the
    # update after the refused one carries the full count.
    writes = api.writes()
    assert [w.action for w in writes] == [kmock.action.CREATE] + [kmock.action.UPDATE] * 2
    assert [w.data["series"]["count"] for w in writes[1:]] == [2, 3]
    assert series_count(api.events()[0]) == 3
    assert len(api.events()) == 1
    assert reports.all_errors() == []


async def test_a_namespace_other_than_default_is_rejected_by_the_server(api: EventsApi) -> None:
    # Why the recorder always uses `default`: a Node's events live nowhere else.
    reports = Reports()
    with recorder(api, reports, namespace="nvidia-device-plugin") as rec:
        rec.record(UNHEALTHY)
        message = await reports.next_error()
    assert "HTTP 422" in message
    assert "does not match event.namespace" in message
    assert api.events("nvidia-device-plugin") == []


async def test_an_expired_object_is_created_again(api: EventsApi) -> None:
    reports = Reports()
    with recorder(api, reports) as rec:
        rec.record(UNHEALTHY)
        await eventually(lambda: len(api.events()) == 1, what="the event")
        api.delete_event(api.events()[0]["metadata"]["name"])
        rec.record(UNHEALTHY)
        await eventually(lambda: len(api.events()) == 1, what="a new object")
    [event] = api.events()
    assert event["series"]["count"] == 2
    assert reports.all_errors() == []


async def test_long_notes_are_cut_to_the_api_limit(api: EventsApi) -> None:
    reports = Reports()
    with recorder(api, reports) as rec:
        rec.record(NodeEvent(EventType.WARNING, "ConfigRejected", "Reconfigure", "é" * 2000))
        await eventually(lambda: len(api.events()) == 1, what="the event")
    note = api.events()[0]["note"]
    assert len(note.encode()) <= 1024
    assert note.endswith("…")


async def test_stop_sends_what_is_queued(api: EventsApi) -> None:
    reports = Reports()
    rec = NodeEventRecorder(connect=api.access, node_name=NODE, **reports.kwargs())
    rec.record(UNHEALTHY)
    rec.record(RECOVERED)
    rec.start()
    assert await asyncio.to_thread(rec.stop, 5.0)
    assert [e["reason"] for e in api.events()] == ["GPUUnhealthy", "GPURecovered"]
    assert not rec.record(UNHEALTHY), "a stopped recorder takes nothing"


def test_micro_time_always_has_six_fractional_digits() -> None:
    whole = datetime(2024, 5, 1, 10, 0, 0, tzinfo=UTC)
    assert micro_time(whole) == "2024-05-01T10:00:00.000001Z"
    assert micro_time(whole.replace(microsecond=250000)) == "2024-05-01T10:00:00.250000Z"


def test_long_node_names_still_make_valid_object_names() -> None:
    rec = NodeEventRecorder(connect=lambda: None, node_name="n" * 253, reporting_instance="p" * 300)
    assert len(rec.reporting_instance.encode()) <= 128
    first, second = rec._new_name(), rec._new_name()
    assert len(first) <= 253
    assert first != second
