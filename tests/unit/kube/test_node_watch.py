"""NodeLabelWatch against an emulated API server over real HTTP.

Each test starts the watch thread with the official client, drives the server
(label edits, node deletion, scripted faults, the server going away) and
awaits what the thread posts. Timeouts and backoff are scaled down so every
scenario finishes in a few seconds; the thread is always stopped and joined.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import kmock
import pytest

from foundation.backoff import Backoff
from kube.client import ApiAccess
from kube.node_watch import NodeLabelWatch
from kube.pacing import Clock, WatchTimeouts
from tests.unit.kube.apiserver import (
    ApiServer,
    Outage,
    Recorder,
    Script,
    api_requests,
    error_response,
    request_counts,
    status,
)

NODE = "gpu-node-1"
LABEL = "nvidia.com/device-plugin.config"
FAST = Backoff(initial=0.05, cap=0.2)
NEVER = Backoff(initial=60.0, cap=60.0)  # a test that waits on this has taken the error path
ONE_SECOND = WatchTimeouts(1, 1)

StartWatch = Callable[..., NodeLabelWatch]


@dataclass(frozen=True)
class RecordingBackoff(Backoff):
    """The real backoff policy, remembering which retry numbers were asked for."""

    attempts: list[int] = field(default_factory=list)

    def delay(self, attempt: int) -> float:
        self.attempts.append(attempt)
        return super().delay(attempt)


@dataclass(frozen=True)
class SkippingClock(Clock):
    """Real time, plus whatever the test skipped ahead (pauses stay real)."""

    skipped: list[float] = field(default_factory=lambda: [0.0], compare=False)

    def now(self) -> float:
        return super().now() + self.skipped[0]

    def skip(self, seconds: float) -> None:
        self.skipped[0] += seconds


@dataclass(frozen=True)
class StridingClock(Clock):
    """A clock `stride` seconds further on at every reading (pauses stay real).

    However quickly the server ends a watch, the watch has run its full term
    by this clock, and no reading of the real clock can say otherwise.
    """

    stride: float = 30.0
    readings: list[float] = field(default_factory=lambda: [0.0], compare=False)

    def now(self) -> float:
        self.readings[0] += self.stride
        return self.readings[0]


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


@pytest.fixture
async def start_watch(apiserver: ApiServer, recorder: Recorder) -> AsyncIterator[StartWatch]:
    started: list[NodeLabelWatch] = []

    def start(**overrides: Any) -> NodeLabelWatch:
        options: dict[str, Any] = {
            "api": apiserver.access(),
            "node_name": NODE,
            "label": LABEL,
            "on_value": recorder.on_value,
            "on_error": recorder.on_error,
            "watch_timeouts": WatchTimeouts(30, 30),
            "read_timeout": 5.0,
            "read_grace": 5.0,
            "backoff": FAST,
            "min_relist_interval": 0.0,
        }
        options.update(overrides)
        watch = NodeLabelWatch(**options)
        watch.start()
        started.append(watch)
        return watch

    yield start
    for watch in started:
        assert await asyncio.to_thread(watch.stop, 5.0), "watch thread did not end"


@pytest.mark.parametrize(
    ("labels", "expected"),
    [
        pytest.param({LABEL: "a100-mig"}, "a100-mig", id="label-set"),
        pytest.param({"other": "x"}, None, id="label-absent"),
        pytest.param({LABEL: ""}, "", id="label-empty"),
        pytest.param(None, None, id="no-labels-at-all"),
    ],
)
async def test_posts_the_current_value_at_start(
    apiserver: ApiServer,
    recorder: Recorder,
    start_watch: StartWatch,
    labels: dict[str, str] | None,
    expected: str | None,
) -> None:
    await apiserver.add_node(NODE, labels)
    start_watch()
    assert await recorder.next_value() == expected
    assert recorder.drain_errors() == []


async def test_missing_node_posts_none_then_the_value_once_it_appears(
    apiserver: ApiServer, recorder: Recorder, start_watch: StartWatch
) -> None:
    start_watch()
    assert await recorder.next_value() is None
    await apiserver.add_node(NODE, {LABEL: "shared"})
    assert await recorder.next_value() == "shared"


async def test_follows_changes_and_removal(
    apiserver: ApiServer, recorder: Recorder, start_watch: StartWatch
) -> None:
    await apiserver.add_node(NODE, {LABEL: "one"})
    start_watch()
    assert await recorder.next_value() == "one"

    await apiserver.set_labels(NODE, {LABEL: "two"})
    assert await recorder.next_value() == "two"
    await apiserver.set_labels(NODE, {LABEL: None})
    assert await recorder.next_value() is None
    await apiserver.set_labels(NODE, {LABEL: "three"})
    assert await recorder.next_value() == "three"
    assert recorder.drain_errors() == []


async def test_other_labels_and_other_nodes_post_nothing(
    apiserver: ApiServer, recorder: Recorder, start_watch: StartWatch
) -> None:
    await apiserver.add_node(NODE, {LABEL: "one", "team": "a"})
    start_watch()
    assert await recorder.next_value() == "one"

    await apiserver.set_labels(NODE, {"team": "b", "nvidia.com/gpu.count": "8"})
    await apiserver.add_node("gpu-node-2", {LABEL: "elsewhere"})
    await apiserver.set_labels("gpu-node-2", {LABEL: "still-elsewhere"})
    await apiserver.set_labels(NODE, {LABEL: "one"})  # same value again
    await apiserver.set_labels(NODE, {LABEL: "two"})

    # Events arrive in order, so anything posted for the edits above would come first.
    assert await recorder.next_value() == "two"
    assert recorder.values.empty()


async def test_node_deleted_and_added_back(
    apiserver: ApiServer, recorder: Recorder, start_watch: StartWatch
) -> None:
    await apiserver.add_node(NODE, {LABEL: "before"})
    start_watch()
    assert await recorder.next_value() == "before"
    # Seeing an edit proves the watch is open: the emulator does not replay a
    # deletion that happened between the list and the watch, as a real server would.
    await apiserver.set_labels(NODE, {LABEL: "watched"})
    assert await recorder.next_value() == "watched"

    await apiserver.delete_node(NODE)
    assert await recorder.next_value() is None
    await apiserver.add_node(NODE, {LABEL: "after"})
    assert await recorder.next_value() == "after"
    assert recorder.drain_errors() == []


async def test_expired_watch_resumes_from_its_version_without_a_list(
    apiserver: ApiServer, recorder: Recorder, start_watch: StartWatch
) -> None:
    await apiserver.add_node(NODE, {LABEL: "steady"})
    start_watch(backoff=NEVER, clock=StridingClock(stride=30.0))
    assert await recorder.next_value() == "steady"
    # Each watch runs its course (30 s on the watch's clock) and the server
    # ends it as at its timeout. Three in a row, one list only.
    for opened in (1, 2):
        await apiserver.handler.requests_reach(
            lambda sent, n=opened: request_counts(sent).get("watch", 0) >= n
        )
        await apiserver.handler.end_watches()
    await apiserver.handler.requests_reach(lambda sent: request_counts(sent).get("watch", 0) >= 3)
    ours = api_requests(apiserver.handler)
    counts = request_counts(ours)
    assert counts.get("list") == 1
    assert set(counts) == {"list", "watch"}, counts
    watches = list(apiserver.handler[kmock.action.WATCH])
    assert all(request.params["timeoutSeconds"] == "30" for request in watches)
    assert all(request.params["allowWatchBookmarks"] == "true" for request in watches)
    assert all(
        request.params["fieldSelector"] == f"metadata.name={NODE}"
        for request in [*apiserver.handler[kmock.action.LIST], *watches]
    )
    # Each watch resumes where the last one ended: the list's version, then the bookmarks'.
    versions = [request.params.get("resourceVersion") for request in watches]
    assert all(versions), versions
    assert recorder.values.empty()  # a resumed watch posts nothing new
    assert recorder.drain_errors() == []

    await apiserver.set_labels(NODE, {LABEL: "moved"})
    assert await recorder.next_value() == "moved"


async def test_an_edit_while_no_watch_is_open_is_not_missed(
    apiserver: ApiServer, recorder: Recorder, start_watch: StartWatch
) -> None:
    await apiserver.add_node(NODE, {LABEL: "one"})
    gap, reached = asyncio.Event(), asyncio.Event()
    # The second watch stalls until the edit is made, then ends without an event.
    resumed = Script(lambda: _stall(reached, gap))
    start_watch()
    assert await recorder.next_value() == "one"
    await apiserver.handler.watching()  # the first watch, before the script is in place
    apiserver.handler[kmock.action.WATCH] << resumed
    await apiserver.handler.end_watches()  # the first watch ends as at its timeout
    await asyncio.wait_for(reached.wait(), 10.0)
    await apiserver.set_labels(NODE, {LABEL: "two"})
    gap.set()
    # The next watch resumes from the version before the edit, so it replays the edit.
    assert await recorder.next_value() == "two"
    assert request_counts(api_requests(apiserver.handler)).get("list") == 1


async def _stall(reached: asyncio.Event, gap: asyncio.Event) -> Any:
    reached.set()
    await gap.wait()
    return ()  # an empty stream: the watch ends early and without an error


async def test_compacted_history_relists_once(
    apiserver: ApiServer, recorder: Recorder, start_watch: StartWatch
) -> None:
    await apiserver.add_node(NODE, {LABEL: "v1"})
    start_watch(backoff=NEVER)
    assert await recorder.next_value() == "v1"
    apiserver.handler.compact()
    # The open watch's version is gone: 410, one relist, and a watch from there.
    assert await recorder.next_value() == "v1"
    await apiserver.set_labels(NODE, {LABEL: "v2"})
    assert await recorder.next_value() == "v2"
    # An edit reached through the watch after the relist (a list posts every
    # time, so another list would have posted before or after it).
    assert recorder.values.empty()
    assert request_counts(api_requests(apiserver.handler)) == {"list": 2, "watch": 2}
    assert recorder.drain_errors() == []


def _gone_event() -> Any:
    # A one-event stream, as an API server ends a watch whose resourceVersion expired.
    return ({"type": "ERROR", "object": status(410, "Expired", "too old resource version")},)


def _gone_status() -> Any:
    return error_response(410, "Gone", "too old resource version")


@pytest.mark.parametrize(
    "answer",
    [
        pytest.param(_gone_event, id="error-event-in-stream"),
        pytest.param(_gone_status, id="http-410-on-watch"),
    ],
)
async def test_gone_relists_at_once_and_posts_again(
    apiserver: ApiServer,
    recorder: Recorder,
    start_watch: StartWatch,
    answer: Callable[[], Any],
) -> None:
    await apiserver.add_node(NODE, {LABEL: "v1"})
    gone = Script(answer)
    apiserver.handler[kmock.action.WATCH] << gone
    start_watch(backoff=NEVER)
    assert await recorder.next_value() == "v1"
    assert await recorder.next_value() == "v1"  # posted again after the relist
    assert gone.served == 1

    # The watch that followed the relist is live.
    await apiserver.set_labels(NODE, {LABEL: "v2"})
    assert await recorder.next_value() == "v2"
    assert recorder.drain_errors() == []


def _internal_error() -> Any:
    return error_response(500, "InternalError", "etcd is unhappy")


async def test_an_error_event_other_than_gone_is_reported_and_relisted(
    apiserver: ApiServer, recorder: Recorder, start_watch: StartWatch
) -> None:
    """An ERROR event that is not 410 (a 500 mid-stream): one report, a relist, and on."""
    await apiserver.add_node(NODE, {LABEL: "v1"})
    broken = Script(
        lambda: ({"type": "ERROR", "object": status(500, "InternalError", "etcd is unhappy")},)
    )
    apiserver.handler[kmock.action.WATCH] << broken
    start_watch()
    assert await recorder.next_value() == "v1"
    error = await recorder.error_matching("etcd is unhappy")
    assert "the watch reported HTTP 500 InternalError" in error
    assert NODE in error
    assert "\n" not in error
    assert await recorder.next_value() == "v1"  # posted again after the relist
    assert broken.served == 1
    assert len(apiserver.handler[kmock.action.LIST]) == 2
    await apiserver.set_labels(NODE, {LABEL: "v2"})  # and the watch after it is live
    assert await recorder.next_value() == "v2"
    assert recorder.drain_errors() == []


@pytest.mark.parametrize(
    "action",
    [
        pytest.param(kmock.action.LIST, id="list-fails"),
        pytest.param(kmock.action.WATCH, id="watch-fails"),
    ],
)
async def test_server_errors_are_reported_backed_off_and_recovered(
    apiserver: ApiServer,
    recorder: Recorder,
    start_watch: StartWatch,
    action: kmock.action,
) -> None:
    await apiserver.add_node(NODE, {LABEL: "before"})
    outage = Outage(_internal_error)
    apiserver.handler[action] << outage
    backoff = RecordingBackoff(initial=0.05, cap=0.1)
    start_watch(backoff=backoff)

    first = await recorder.error_matching("HTTP 500")
    assert "etcd is unhappy" in first
    assert "\n" not in first
    assert NODE in first
    await recorder.error_matching("HTTP 500")
    await recorder.error_matching("HTTP 500")
    await apiserver.set_labels(NODE, {LABEL: "after"})
    outage.end()

    await recorder.value_becomes("after")
    # Consecutive failures asked for growing delays: retry 0, 1, 2, ...
    failures = list(backoff.attempts)
    assert failures[:3] == [0, 1, 2]

    # After a clean cycle the next failure starts the backoff from the beginning.
    second = Outage(_internal_error)
    apiserver.handler[kmock.action.LIST] << second
    apiserver.handler.compact()  # the open watch gets 410 and relists
    await recorder.error_matching("HTTP 500")
    second.end()
    assert backoff.attempts[len(failures)] == 0


async def test_backoff_starts_over_when_a_watch_had_been_up_for_a_while(
    apiserver: ApiServer, recorder: Recorder, start_watch: StartWatch
) -> None:
    await apiserver.add_node(NODE, {LABEL: "a"})
    outage = Outage(_internal_error)
    apiserver.handler[kmock.action.LIST] << outage
    backoff = RecordingBackoff(initial=0.05, cap=0.2)
    clock = SkippingClock()
    start_watch(backoff=backoff, clock=clock)
    for _ in range(3):
        await recorder.error_matching("HTTP 500")
    outage.end()
    await apiserver.set_labels(NODE, {LABEL: "b"})
    await recorder.value_becomes("b")  # listed
    await apiserver.set_labels(NODE, {LABEL: "c"})
    await recorder.value_becomes("c")  # through the watch: it is open now
    before = len(backoff.attempts)
    assert backoff.attempts[:3] == [0, 1, 2]

    # The rule is about elapsed time: the open watch outlives the backoff cap.
    clock.skip(backoff.cap)
    await apiserver.down()
    await recorder.error_matching("connection refused")
    assert backoff.attempts[before] == 0


async def test_server_down_is_reported_and_recovered_when_it_returns(
    apiserver: ApiServer, recorder: Recorder, start_watch: StartWatch
) -> None:
    await apiserver.add_node(NODE, {LABEL: "before"})
    start_watch()
    assert await recorder.next_value() == "before"

    await apiserver.down()
    message = await recorder.error_matching("connection refused")
    assert f"node {NODE}: cannot connect to the API server" in message
    assert "\n" not in message
    # Changed while the server was away (no event will ever describe this edit).
    apiserver.handler.objects["v1/nodes", None, NODE].patch(
        {"metadata": {"labels": {LABEL: "after"}}}
    )
    await apiserver.up()

    await recorder.value_becomes("after")
    await apiserver.set_labels(NODE, {LABEL: "later"})
    await recorder.value_becomes("later")


def _stalled_stream(outage: Outage) -> Callable[[], Any]:
    # Headers and an empty first chunk, then silence: a connection gone dead mid-watch.
    return lambda: (b"", outage.hang())


@pytest.mark.parametrize(
    "action",
    [
        pytest.param(kmock.action.LIST, id="list-never-answers"),
        pytest.param(kmock.action.WATCH, id="watch-never-answers"),
    ],
)
async def test_hanging_server_is_cut_by_the_client_timeout(
    apiserver: ApiServer,
    recorder: Recorder,
    start_watch: StartWatch,
    action: kmock.action,
) -> None:
    await apiserver.add_node(NODE, {LABEL: "before"})
    outage = Outage()
    apiserver.handler[action] << outage
    start_watch(watch_timeouts=ONE_SECOND, read_timeout=1.5, read_grace=0.5)

    # The read timeout's own words: the client cut the request, not the server.
    message = await recorder.error_matching("did not answer in time (read timed out)")
    assert NODE in message
    await apiserver.set_labels(NODE, {LABEL: "after"})
    outage.end()
    await recorder.value_becomes("after")


async def test_stalled_watch_stream_is_cut_by_the_client_timeout(
    apiserver: ApiServer, recorder: Recorder, start_watch: StartWatch
) -> None:
    await apiserver.add_node(NODE, {LABEL: "before"})
    outage = Outage()
    stall = Script(_stalled_stream(outage))
    apiserver.handler[kmock.action.WATCH] << stall
    start_watch(watch_timeouts=ONE_SECOND, read_timeout=1.5, read_grace=0.5)
    assert await recorder.next_value() == "before"

    await recorder.error_matching("did not answer in time")
    assert stall.served == 1
    outage.end()
    await apiserver.set_labels(NODE, {LABEL: "after"})
    await recorder.value_becomes("after")


async def _idle_watch(
    apiserver: ApiServer, recorder: Recorder, start: StartWatch
) -> NodeLabelWatch:
    await apiserver.add_node(NODE, {LABEL: "x"})
    watch = start()
    assert await recorder.next_value() == "x"
    return watch


async def _backing_off(
    apiserver: ApiServer, recorder: Recorder, start: StartWatch
) -> NodeLabelWatch:
    await apiserver.down()
    watch = start(backoff=NEVER)
    await recorder.error_matching("connection refused")
    return watch


async def _hanging_list(
    apiserver: ApiServer, recorder: Recorder, start: StartWatch
) -> NodeLabelWatch:
    outage = Outage()
    apiserver.handler[kmock.action.LIST] << outage
    watch = start(watch_timeouts=ONE_SECOND, read_timeout=1.5, read_grace=0.5)
    await asyncio.wait_for(outage.reached.wait(), 5.0)  # the list is now waiting
    return watch


# Each would keep the thread far longer than stop() waits for it: an open watch
# of 30 s, a backoff pause of 60 s. A request still waiting for its answer is
# bounded by its own timeout (1.5 s read, 0.5 s grace).
@pytest.mark.parametrize(
    "arrange",
    [
        pytest.param(_idle_watch, id="idle-watch-connection"),
        pytest.param(_backing_off, id="waiting-in-backoff"),
        pytest.param(_hanging_list, id="list-never-answers"),
    ],
)
async def test_stop_returns_promptly(
    apiserver: ApiServer,
    recorder: Recorder,
    start_watch: StartWatch,
    arrange: Callable[..., Any],
) -> None:
    watch = await arrange(apiserver, recorder, start_watch)
    assert watch.running
    assert await asyncio.to_thread(watch.stop, 5.0), "the thread outlived stop()"
    assert not watch.running
    errors_after_stop = [e for e in recorder.drain_errors() if "refused" not in e]
    assert errors_after_stop == [], "stopping is not an error"


async def test_failing_callback_is_reported_and_the_watch_goes_on(
    apiserver: ApiServer, recorder: Recorder, start_watch: StartWatch
) -> None:
    await apiserver.add_node(NODE, {LABEL: "one"})
    calls: list[str | None] = []

    def on_value(value: str | None) -> None:
        calls.append(value)
        if len(calls) == 1:
            raise RuntimeError("mailbox closed")
        recorder.on_value(value)

    start_watch(on_value=on_value)
    message = await recorder.next_error()
    assert message == "delivering the node label value failed: RuntimeError: mailbox closed"
    await apiserver.set_labels(NODE, {LABEL: "two"})
    assert await recorder.next_value() == "two"
    assert calls == ["one", "two"]


async def test_thread_is_named_and_starts_once(
    apiserver: ApiServer, recorder: Recorder, start_watch: StartWatch
) -> None:
    await apiserver.add_node(NODE, {LABEL: "x"})
    watch = start_watch(thread_name="node-labels-test")
    assert await recorder.next_value() == "x"
    assert "node-labels-test" in {thread.name for thread in threading.enumerate()}
    with pytest.raises(RuntimeError, match="only once"):
        watch.start()


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        pytest.param({"node_name": ""}, "node_name", id="empty-node"),
        pytest.param({"label": ""}, "label", id="empty-label"),
        pytest.param({"read_grace": 0.0}, "positive", id="no-grace-after-the-server-timeout"),
        pytest.param({"read_timeout": -1.0}, "positive", id="negative-read-timeout"),
        pytest.param({"min_relist_interval": -1.0}, "negative", id="negative-relist-interval"),
    ],
)
def test_rejects_unusable_settings(overrides: dict[str, Any], message: str) -> None:
    options: dict[str, Any] = {
        "api": ApiAccess.for_host("http://127.0.0.1:9"),
        "node_name": NODE,
        "label": LABEL,
        "on_value": lambda value: None,
    }
    options.update(overrides)
    with pytest.raises(ValueError, match=message):
        NodeLabelWatch(**options)


def test_stop_before_start_is_harmless() -> None:
    watch = NodeLabelWatch(
        api=ApiAccess.for_host("http://127.0.0.1:9"),
        node_name=NODE,
        label=LABEL,
        on_value=lambda value: None,
    )
    assert watch.stop(0.1)
    assert not watch.running
