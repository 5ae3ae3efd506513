"""The node watch follows the GPU cordon annotation too, from the same requests.

`NodeLabelWatch` with an `annotation` posts that annotation's value the way
it posts the label's: after every list, after an event only when it changed.
The watch runs against the emulated API server over real HTTP; the requests
it sends are counted, and must be the same as without the annotation.
"""

from __future__ import annotations

import asyncio
import queue
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from foundation.backoff import Backoff
from kube.node_watch import NodeLabelWatch
from kube.pacing import WatchTimeouts
from tests.unit.kube.apiserver import ApiServer, Recorder, api_requests, request_counts

NODE = "gpu-node-1"
LABEL = "nvidia.com/device-plugin.config"
CORDON = "nvidia.com/gpu.cordon"
FAST = Backoff(initial=0.05, cap=0.2)


class Both(Recorder):
    """The label values (as `Recorder`) and the annotation values, in one order of arrival."""

    def __init__(self) -> None:
        super().__init__()
        self.annotations: queue.Queue[str | None] = queue.Queue()
        self.order: list[str] = []

    def on_value(self, value: str | None) -> None:
        self.order.append("label")
        super().on_value(value)

    def on_annotation(self, value: str | None) -> None:
        self.order.append("annotation")
        self.annotations.put(value)

    async def next_annotation(self, timeout: float = 5.0) -> str | None:
        try:
            return await asyncio.to_thread(self.annotations.get, True, timeout)
        except queue.Empty:
            pytest.fail(f"no annotation value within {timeout} s; errors: {self.drain_errors()}")


StartWatch = Callable[..., NodeLabelWatch]


@pytest.fixture
def both() -> Both:
    return Both()


@pytest.fixture
async def start_watch(apiserver: ApiServer, both: Both) -> AsyncIterator[StartWatch]:
    started: list[NodeLabelWatch] = []

    def start(**overrides: Any) -> NodeLabelWatch:
        options: dict[str, Any] = {
            "api": apiserver.access(),
            "node_name": NODE,
            "label": LABEL,
            "on_value": both.on_value,
            "on_error": both.on_error,
            "annotation": CORDON,
            "on_annotation": both.on_annotation,
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


async def test_the_annotation_is_posted_at_start_before_the_label(
    apiserver: ApiServer, both: Both, start_watch: StartWatch
) -> None:
    await apiserver.add_node(NODE, {LABEL: "a100"}, annotations={CORDON: "GPU-1, 3"})
    start_watch()
    assert await both.next_value() == "a100"
    assert await both.next_annotation() == "GPU-1, 3"
    # Whoever waits for the first label value has the annotation already.
    assert both.order == ["annotation", "label"]
    assert both.drain_errors() == []


async def test_a_node_without_annotations_posts_none(
    apiserver: ApiServer, both: Both, start_watch: StartWatch
) -> None:
    await apiserver.add_node(NODE, {LABEL: "a100"})
    start_watch()
    assert await both.next_annotation() is None


async def test_annotating_and_releasing_post_the_new_values_and_nothing_else(
    apiserver: ApiServer, both: Both, start_watch: StartWatch
) -> None:
    await apiserver.add_node(NODE, {LABEL: "a100"})
    start_watch()
    assert await both.next_annotation() is None
    assert await both.next_value() == "a100"

    await apiserver.set_annotations(NODE, {CORDON: "0"})
    assert await both.next_annotation() == "0"
    await apiserver.set_annotations(NODE, {"other.example.com/x": "y"})  # not ours
    await apiserver.handler.patch(f"/api/v1/nodes/{NODE}", json={"status": {"beat": 1}})
    await apiserver.set_annotations(NODE, {CORDON: "0"})  # the same value again
    await apiserver.set_annotations(NODE, {CORDON: None})  # kubectl annotate node ... cordon-
    assert await both.next_annotation() is None
    assert both.annotations.empty(), "an edit that left the value alone posted it"
    assert both.values.empty(), "an annotation edit posted the label"


async def test_a_label_edit_does_not_post_the_annotation(
    apiserver: ApiServer, both: Both, start_watch: StartWatch
) -> None:
    await apiserver.add_node(NODE, {LABEL: "one"}, annotations={CORDON: "2"})
    start_watch()
    assert await both.next_annotation() == "2"
    assert await both.next_value() == "one"
    await apiserver.set_labels(NODE, {LABEL: "two"})
    assert await both.next_value() == "two"
    assert both.annotations.empty()


async def test_following_the_annotation_sends_no_request_of_its_own(
    apiserver: ApiServer, both: Both, start_watch: StartWatch
) -> None:
    await apiserver.add_node(NODE, {LABEL: "a100"})
    plain = Recorder()
    start_watch(
        api=apiserver.access("label-only"),
        on_value=plain.on_value,
        annotation="",
        on_annotation=None,
    )
    start_watch(api=apiserver.access("with-annotation"))
    assert await plain.next_value() == "a100"
    assert await both.next_value() == "a100"

    def watching(sent: object) -> bool:
        return all(
            request_counts(api_requests(apiserver.handler, agent)).get("watch", 0) >= 1
            for agent in ("label-only", "with-annotation")
        )

    await apiserver.handler.requests_reach(watching)
    await apiserver.set_annotations(NODE, {CORDON: "1"})
    assert await both.next_annotation() is None
    assert await both.next_annotation() == "1"
    await apiserver.set_labels(NODE, {LABEL: "h100"})
    assert await plain.next_value() == "h100"
    assert await both.next_value() == "h100"
    counts = {
        agent: request_counts(api_requests(apiserver.handler, agent))
        for agent in ("label-only", "with-annotation")
    }
    assert counts == {
        "label-only": {"list": 1, "watch": 1},
        "with-annotation": {"list": 1, "watch": 1},
    }


async def test_a_failing_annotation_callback_is_reported_and_the_label_still_arrives(
    apiserver: ApiServer, both: Both, start_watch: StartWatch
) -> None:
    def broken(value: str | None) -> None:
        raise RuntimeError("mailbox closed")

    await apiserver.add_node(NODE, {LABEL: "a100"}, annotations={CORDON: "0"})
    start_watch(on_annotation=broken)
    assert await both.next_value() == "a100"
    message = await asyncio.to_thread(both.errors.get, True, 5.0)
    assert message == f"delivering the annotation {CORDON} failed: RuntimeError: mailbox closed"


@pytest.mark.parametrize(
    "overrides", [{"annotation": CORDON}, {"on_annotation": lambda value: None}]
)
def test_an_annotation_without_its_callback_or_the_reverse_is_refused(
    apiserver: ApiServer, overrides: dict[str, Any]
) -> None:
    with pytest.raises(ValueError, match="annotation and on_annotation go together"):
        NodeLabelWatch(
            api=apiserver.access(),
            node_name=NODE,
            label=LABEL,
            on_value=lambda value: None,
            **overrides,
        )
