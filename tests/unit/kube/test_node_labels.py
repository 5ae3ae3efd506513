"""patch_node_labels against an emulated API server over real HTTP."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

import kmock
import pytest

from kube.errors import KubeError
from kube.node_labels import LabelChange, NodeLabelPublisher, patch_node_labels
from tests.unit.kube.apiserver import ApiServer, Script, api_requests, request_counts

NODE = "gpu-node-1"
FOREIGN = {"kubernetes.io/hostname": NODE, "example.com/team": "ml"}


async def _patch(
    apiserver: ApiServer, labels: Mapping[str, str | None], **kwargs: Any
) -> LabelChange:
    return await asyncio.to_thread(
        patch_node_labels, apiserver.access(), NODE, labels, timeout=5.0, **kwargs
    )


@pytest.mark.parametrize(
    ("current", "wanted", "expected", "change"),
    [
        pytest.param(
            {},
            {"nvidia.com/gpu.count": "8", "nvidia.com/gpu.product": "H100"},
            {"nvidia.com/gpu.count": "8", "nvidia.com/gpu.product": "H100"},
            LabelChange(set={"nvidia.com/gpu.count": "8", "nvidia.com/gpu.product": "H100"}),
            id="added",
        ),
        pytest.param(
            {"nvidia.com/gpu.count": "8", "nvidia.com/gpu.product": "H100"},
            {"nvidia.com/gpu.count": "4", "nvidia.com/gpu.product": "H100"},
            {"nvidia.com/gpu.count": "4", "nvidia.com/gpu.product": "H100"},
            LabelChange(set={"nvidia.com/gpu.count": "4"}),
            id="changed",
        ),
        pytest.param(
            {"nvidia.com/gpu.count": "8", "nvidia.com/mig.capable": "true"},
            {"nvidia.com/gpu.count": "8"},
            {"nvidia.com/gpu.count": "8"},
            LabelChange(removed=("nvidia.com/mig.capable",)),
            id="stale-removed",
        ),
        pytest.param(
            {"nvidia.com/gpu.count": "8", "nvidia.com/gpu.replicas": "4"},
            {"nvidia.com/gpu.count": "8", "nvidia.com/gpu.replicas": None},
            {"nvidia.com/gpu.count": "8"},
            LabelChange(removed=("nvidia.com/gpu.replicas",)),
            id="none-removes",
        ),
        pytest.param(
            {
                "nvidia.com/device-plugin.config": "a100",
                "nvidia.com/mig.config": "all-1g.10gb",
                "nvidia.com/mig.config.state": "success",
                "nvidia.com/gpu.deploy.dcgm": "true",
                "nvidia.com/gpu.present": "true",
                "nvidia.com/stale": "x",
            },
            {"nvidia.com/gpu.count": "1"},
            {
                "nvidia.com/device-plugin.config": "a100",
                "nvidia.com/mig.config": "all-1g.10gb",
                "nvidia.com/mig.config.state": "success",
                "nvidia.com/gpu.deploy.dcgm": "true",
                "nvidia.com/gpu.present": "true",
                "nvidia.com/gpu.count": "1",
            },
            LabelChange(set={"nvidia.com/gpu.count": "1"}, removed=("nvidia.com/stale",)),
            id="other-components-labels-kept",
        ),
    ],
)
async def test_labels_under_the_prefix_follow_the_new_set(
    apiserver: ApiServer,
    current: dict[str, str],
    wanted: dict[str, str | None],
    expected: dict[str, str],
    change: LabelChange,
) -> None:
    await apiserver.add_node(NODE, {**FOREIGN, **current})
    assert await _patch(apiserver, wanted) == change
    assert await apiserver.labels(NODE) == {**FOREIGN, **expected}


async def test_narrower_prefix_leaves_the_rest_of_the_domain_alone(apiserver: ApiServer) -> None:
    await apiserver.add_node(NODE, {"nvidia.com/gfd.old": "1", "nvidia.com/other": "keep"})
    change = await _patch(apiserver, {"nvidia.com/gfd.new": "2"}, prefix="nvidia.com/gfd.")
    assert change == LabelChange(set={"nvidia.com/gfd.new": "2"}, removed=("nvidia.com/gfd.old",))
    assert await apiserver.labels(NODE) == {"nvidia.com/gfd.new": "2", "nvidia.com/other": "keep"}


async def test_nothing_is_sent_when_already_up_to_date(apiserver: ApiServer) -> None:
    await apiserver.add_node(NODE, {**FOREIGN, "nvidia.com/gpu.count": "8"})
    change = await _patch(apiserver, {"nvidia.com/gpu.count": "8", "nvidia.com/absent": None})
    assert not change.changed
    assert len(apiserver.handler[kmock.method.PATCH]) == 0


async def test_patch_is_a_merge_patch_guarded_by_the_resource_version(apiserver: ApiServer) -> None:
    await apiserver.add_node(NODE, {"nvidia.com/old": "1"})
    apiserver.handler.objects["v1/nodes", None, NODE].patch({"metadata": {"resourceVersion": "41"}})
    await _patch(apiserver, {"nvidia.com/new": "2"})
    [patch] = list(apiserver.handler[kmock.method.PATCH])
    assert patch.headers["Content-Type"] == "application/merge-patch+json"
    assert patch.data == {
        "metadata": {
            "labels": {"nvidia.com/new": "2", "nvidia.com/old": None},
            "resourceVersion": "41",
        }
    }


def _stale_read(labels: dict[str, str]) -> Script:
    """Answers reads with an outdated copy: someone else writes between our read and patch."""
    stale = {"metadata": {"name": NODE, "resourceVersion": "40", "labels": labels}}
    return Script(lambda: stale, times=10)


async def test_conflict_is_retried_with_a_fresh_read(apiserver: ApiServer) -> None:
    await apiserver.add_node(NODE, {"nvidia.com/old": "1"})
    apiserver.handler.objects["v1/nodes", None, NODE].patch({"metadata": {"resourceVersion": "41"}})
    stale = _stale_read({"nvidia.com/old": "1"})
    stale.left = 1
    apiserver.handler[kmock.action.FETCH] << stale

    change = await _patch(apiserver, {"nvidia.com/new": "2"})
    assert change == LabelChange(set={"nvidia.com/new": "2"}, removed=("nvidia.com/old",))
    assert await apiserver.labels(NODE) == {"nvidia.com/new": "2"}
    assert [
        patch.data["metadata"]["resourceVersion"] for patch in apiserver.handler[kmock.method.PATCH]
    ] == ["40", "41"]


async def test_conflict_that_persists_is_an_error(apiserver: ApiServer) -> None:
    await apiserver.add_node(NODE, {})
    apiserver.handler.objects["v1/nodes", None, NODE].patch({"metadata": {"resourceVersion": "41"}})
    stale = _stale_read({})
    apiserver.handler[kmock.action.FETCH] << stale
    with pytest.raises(KubeError) as caught:
        await _patch(apiserver, {"nvidia.com/new": "2"}, attempts=2)
    assert caught.value.status == 409
    assert str(caught.value).startswith(
        f"labelling node {NODE}: HTTP 409 Conflict: the object has been modified"
    )
    assert stale.served == 2
    assert await apiserver.labels(NODE) == {}


async def test_missing_node_is_an_error(apiserver: ApiServer) -> None:
    with pytest.raises(KubeError, match=rf"^reading node {NODE}: HTTP 404 ") as caught:
        await _patch(apiserver, {"nvidia.com/x": "1"})
    assert caught.value.status == 404
    assert not caught.value.permanent


async def test_unreachable_server_is_an_error(apiserver: ApiServer) -> None:
    await apiserver.down()
    with pytest.raises(KubeError, match="cannot connect to the API server: connection refused"):
        await _patch(apiserver, {"nvidia.com/x": "1"})


@pytest.mark.parametrize(
    ("labels", "kwargs", "message"),
    [
        pytest.param({"example.com/x": "1"}, {}, "outside the prefix", id="key-outside-prefix"),
        pytest.param({"x": "1"}, {"prefix": ""}, "prefix must not be empty", id="empty-prefix"),
        pytest.param({}, {"attempts": 0}, "attempts", id="no-attempts"),
    ],
)
async def test_rejects_requests_that_could_touch_foreign_labels(
    apiserver: ApiServer, labels: dict[str, str], kwargs: dict[str, Any], message: str
) -> None:
    await apiserver.add_node(NODE, {"example.com/x": "0"})
    with pytest.raises(ValueError, match=message):
        await _patch(apiserver, labels, **kwargs)
    assert len(apiserver.handler[kmock.method.PATCH]) == 0


# -- NodeLabelPublisher: the labeller's long-lived form, answered from a watch ------------


@pytest.fixture
async def start(apiserver: ApiServer) -> AsyncIterator[Callable[[], NodeLabelPublisher]]:
    """Starts the publisher once the test has made its node, as on a real node."""
    started: list[NodeLabelPublisher] = []

    def make() -> NodeLabelPublisher:
        published = NodeLabelPublisher(apiserver.access(), NODE, timeout=5.0, sync_timeout=5.0)
        published.start()
        started.append(published)
        return published

    yield make
    for published in started:
        await asyncio.to_thread(published.close)
        assert not published.watch.running


def _sent(apiserver: ApiServer) -> dict[str, int]:
    counts = request_counts(api_requests(apiserver.handler))
    return {verb: n for verb, n in counts.items() if verb not in ("list", "watch")}


async def test_steady_passes_send_nothing(
    apiserver: ApiServer, start: Callable[[], NodeLabelPublisher]
) -> None:
    await apiserver.add_node(NODE, {**FOREIGN, "nvidia.com/stale": "1"})
    publisher = start()
    wanted = {"nvidia.com/gpu.count": "8"}
    change = await asyncio.to_thread(publisher.apply, wanted)
    assert change == LabelChange(set=wanted, removed=("nvidia.com/stale",))
    for _ in range(5):
        assert not (await asyncio.to_thread(publisher.apply, dict(wanted))).changed
    # One patch, no GET at all: the node came from the watch, the patch's answer updated it.
    assert _sent(apiserver) == {"patch": 1}
    assert await apiserver.labels(NODE) == {**FOREIGN, **wanted}


async def test_a_label_removed_by_someone_else_is_put_back(
    apiserver: ApiServer, start: Callable[[], NodeLabelPublisher]
) -> None:
    await apiserver.add_node(NODE, {"nvidia.com/gpu.count": "8"})
    publisher = start()
    wanted = {"nvidia.com/gpu.count": "8"}
    assert not (await asyncio.to_thread(publisher.apply, wanted)).changed
    await apiserver.set_labels(NODE, {"nvidia.com/gpu.count": None})
    assert await asyncio.to_thread(  # the watch delivers the edit
        publisher.watch.wait_until, lambda node: "nvidia.com/gpu.count" not in _labels(node), 5.0
    )
    assert (await asyncio.to_thread(publisher.apply, wanted)).set == wanted
    assert await apiserver.labels(NODE) == wanted
    assert _sent(apiserver) == {"patch": 1}


def _labels(node: Mapping[str, Any] | None) -> dict[str, str]:
    return {} if node is None else dict((node.get("metadata") or {}).get("labels") or {})


async def test_a_conflict_costs_one_read(
    apiserver: ApiServer, start: Callable[[], NodeLabelPublisher]
) -> None:
    await apiserver.add_node(NODE, {})
    publisher = start()
    conflict = apiserver.handler.fail("patch", 409, "Conflict", "the object has been modified")
    change = await asyncio.to_thread(publisher.apply, {"nvidia.com/gpu.count": "2"})
    assert change.set == {"nvidia.com/gpu.count": "2"}
    assert conflict.served == 1
    assert _sent(apiserver) == {"patch": 2, "get": 1}


async def test_a_missing_node_is_one_line(
    apiserver: ApiServer, start: Callable[[], NodeLabelPublisher]
) -> None:
    publisher = start()
    with pytest.raises(KubeError, match=rf"^reading node {NODE}: HTTP 404 ") as caught:
        await asyncio.to_thread(publisher.apply, {"nvidia.com/x": "1"})
    assert "\n" not in str(caught.value)
    assert _sent(apiserver) == {"get": 1}  # the copy had no node: it is checked once


async def test_without_a_synced_watch_the_node_is_read(apiserver: ApiServer) -> None:
    await apiserver.add_node(NODE, {})
    unstarted = NodeLabelPublisher(apiserver.access(), NODE, timeout=5.0, sync_timeout=0.0)
    try:
        change = await asyncio.to_thread(unstarted.apply, {"nvidia.com/x": "1"})
    finally:
        unstarted.close()
    assert change.set == {"nvidia.com/x": "1"}
    assert _sent(apiserver) == {"get": 1, "patch": 1}


async def test_a_borrowed_watch_serves_the_copy_and_outlives_the_publisher(
    apiserver: ApiServer,
) -> None:
    """The labeller's config-label watch of its node is also the node's copy: one watch."""
    from kube.label_follower import NodeLabelFollower

    await apiserver.add_node(NODE, {"nvidia.com/device-plugin.config": "a"})
    follower = NodeLabelFollower(
        api=apiserver.access(), node_name=NODE, label="nvidia.com/device-plugin.config"
    )
    follower.start()
    try:
        with pytest.raises(ValueError, match="the watch is of node gpu-node-1, not other"):
            NodeLabelPublisher(apiserver.access(), "other", watch=follower.object_watch)
        publisher = NodeLabelPublisher(
            apiserver.access(), NODE, timeout=5.0, sync_timeout=5.0, watch=follower.object_watch
        )
        publisher.start()  # the watch is started by its owner, not again here
        wanted = {"nvidia.com/gpu.count": "8"}
        assert (await asyncio.to_thread(publisher.apply, wanted)).set == wanted
        assert not (await asyncio.to_thread(publisher.apply, wanted)).changed
        await asyncio.to_thread(publisher.close)
        assert follower.object_watch.running
        assert follower.value() == "a"
    finally:
        await asyncio.to_thread(follower.stop)
    assert request_counts(api_requests(apiserver.handler)) == {"list": 1, "watch": 1, "patch": 1}
