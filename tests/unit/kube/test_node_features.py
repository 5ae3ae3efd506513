"""NodeFeaturePublisher against an emulated API server over real HTTP.

The publisher runs with the official client in worker threads (`apply` is
blocking, its watch has a thread of its own); the tests read the stored object
and count the requests the publisher sent, by verb, to show that a pass whose
labels are already published costs nothing.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import kmock
import pytest

from kube.errors import KubeError
from kube.node_features import (
    NODE_NAME_LABEL,
    NodeFeaturePublisher,
    Outcome,
    desired_object,
    same_object,
)
from tests.unit.kube.apiserver import ApiServer, api_requests, error_response, request_counts

NODE = "gpu-node-1"
NAMESPACE = "gpu-operator"
NAME = f"nvidia-features-for-{NODE}"
OBJECT = f"/apis/nfd.k8s-sigs.io/v1alpha1/namespaces/{NAMESPACE}/nodefeatures/{NAME}"
COLLECTION = f"/apis/nfd.k8s-sigs.io/v1alpha1/namespaces/{NAMESPACE}/nodefeatures"
POD = "nvdp-gpu-feature-discovery-x7k2p"
DS_UID = "6c1d2f0e-0000-4000-8000-00000000d5d5"
POD_UID = "0b7e4f3a-0000-4000-8000-0000000000aa"
LABELS = {"nvidia.com/gpu.count": "8", "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB"}

Start = Callable[..., NodeFeaturePublisher]


@pytest.fixture
async def start(apiserver: ApiServer) -> AsyncIterator[Start]:
    started: list[NodeFeaturePublisher] = []
    warnings: list[str] = []

    def make(**overrides: Any) -> NodeFeaturePublisher:
        options: dict[str, Any] = {
            "node_name": NODE,
            "namespace": NAMESPACE,
            "timeout": 5.0,
            "sync_timeout": 5.0,
            "on_error": warnings.append,
        }
        options.update(overrides)
        publisher = NodeFeaturePublisher(apiserver.access(), **options)
        publisher.start()
        started.append(publisher)
        return publisher

    make.warnings = warnings  # type: ignore[attr-defined]
    yield make
    for publisher in started:
        await asyncio.to_thread(publisher.close)
        assert not publisher.watch.running


async def apply(publisher: NodeFeaturePublisher, labels: dict[str, str]) -> Outcome:
    return await asyncio.to_thread(publisher.apply, labels)


async def stored(apiserver: ApiServer) -> dict[str, Any]:
    code, body = await apiserver.get(OBJECT)
    assert code == 200, body
    return body


def writes(apiserver: ApiServer) -> dict[str, int]:
    counts = request_counts(api_requests(apiserver.handler))
    return {verb: n for verb, n in counts.items() if verb not in ("list", "watch")}


async def add_pod(apiserver: ApiServer, owners: list[dict[str, Any]]) -> None:
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": POD, "namespace": NAMESPACE, "uid": POD_UID},
    }
    if owners:
        body["metadata"]["ownerReferences"] = owners  # type: ignore[index]
    await apiserver.create(f"/api/v1/namespaces/{NAMESPACE}/pods", body)


DAEMONSET_OWNER = {
    "apiVersion": "apps/v1",
    "kind": "DaemonSet",
    "name": "nvdp-gpu-feature-discovery",
    "uid": DS_UID,
    "controller": True,
    "blockOwnerDeletion": True,
}


async def test_creates_the_object_the_reference_writes(
    apiserver: ApiServer, start: Start
) -> None:
    await add_pod(apiserver, [DAEMONSET_OWNER])
    publisher = start(pod_name=POD)
    assert await apply(publisher, LABELS) is Outcome.CREATED

    obj = await stored(apiserver)
    assert obj["apiVersion"] == "nfd.k8s-sigs.io/v1alpha1"
    assert obj["kind"] == "NodeFeature"
    assert obj["metadata"]["name"] == NAME
    assert obj["metadata"]["namespace"] == NAMESPACE
    assert obj["metadata"]["labels"] == {NODE_NAME_LABEL: NODE}
    assert obj["spec"] == {
        "features": {"flags": {}, "attributes": {}, "instances": {}},
        "labels": LABELS,
    }
    assert obj["metadata"]["ownerReferences"] == [
        {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "name": "nvdp-gpu-feature-discovery",
            "uid": DS_UID,
            "controller": True,
        },
        {"apiVersion": "v1", "kind": "Pod", "name": POD, "uid": POD_UID},
    ]
    assert writes(apiserver) == {"get": 1, "create": 1}  # the pod, then the object


async def test_unchanged_labels_send_nothing_and_changed_ones_one_update(
    apiserver: ApiServer, start: Start
) -> None:
    publisher = start()
    assert await apply(publisher, LABELS) is Outcome.CREATED
    for _ in range(5):
        assert await apply(publisher, dict(LABELS)) is Outcome.UNCHANGED
    assert writes(apiserver) == {"create": 1}  # no pod name: no pod lookup either

    changed = {"nvidia.com/gpu.count": "4", "nvidia.com/mig.capable": "true"}
    assert await apply(publisher, changed) is Outcome.UPDATED
    [update] = [r for r in api_requests(apiserver.handler) if r.method == kmock.method.PUT]
    assert update.data["metadata"]["resourceVersion"]  # guarded against concurrent writers
    obj = await stored(apiserver)
    assert obj["spec"]["labels"] == changed  # replaced, not merged: stale labels are gone
    assert await apply(publisher, changed) is Outcome.UNCHANGED
    assert writes(apiserver) == {"create": 1, "update": 1}


async def test_an_existing_equal_object_is_left_alone(apiserver: ApiServer, start: Start) -> None:
    # Written by an older labeller: no feature maps at all, which means the same as empty ones.
    await apiserver.create(
        COLLECTION,
        {
            "apiVersion": "nfd.k8s-sigs.io/v1alpha1",
            "kind": "NodeFeature",
            "metadata": {"name": NAME, "namespace": NAMESPACE, "labels": {NODE_NAME_LABEL: NODE}},
            "spec": {"labels": LABELS},
        },
    )
    publisher = start()
    assert await apply(publisher, LABELS) is Outcome.UNCHANGED
    assert writes(apiserver) == {}


async def test_an_update_replaces_labels_and_owners_but_keeps_other_metadata(
    apiserver: ApiServer, start: Start
) -> None:
    await apiserver.create(
        COLLECTION,
        {
            "apiVersion": "nfd.k8s-sigs.io/v1alpha1",
            "kind": "NodeFeature",
            "metadata": {
                "name": NAME,
                "namespace": NAMESPACE,
                "labels": {NODE_NAME_LABEL: NODE, "stale": "x"},
                "annotations": {"note": "kept"},
                "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "old", "uid": "1"}],
            },
            "spec": {"labels": {"nvidia.com/gpu.count": "2"}},
        },
    )
    publisher = start()  # no pod name: no owners
    assert await apply(publisher, LABELS) is Outcome.UPDATED
    obj = await stored(apiserver)
    assert obj["metadata"]["labels"] == {NODE_NAME_LABEL: NODE}
    assert obj["metadata"]["annotations"] == {"note": "kept"}
    assert "ownerReferences" not in obj["metadata"]
    assert obj["spec"]["labels"] == LABELS


@pytest.mark.parametrize(
    ("owners", "pod_exists"),
    [
        pytest.param([], True, id="unowned-pod"),
        pytest.param(
            [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "9"}],
            True,
            id="replicaset-owned",
        ),
        pytest.param([], False, id="pod-not-found"),
    ],
)
async def test_no_daemonset_owner_means_no_owner_references(
    apiserver: ApiServer, start: Start, owners: list[dict[str, Any]], pod_exists: bool
) -> None:
    if pod_exists:
        await add_pod(apiserver, owners)
    publisher = start(pod_name=POD)
    assert await apply(publisher, LABELS) is Outcome.CREATED
    assert "ownerReferences" not in (await stored(apiserver))["metadata"]
    warnings = start.warnings  # type: ignore[attr-defined]
    if pod_exists:
        assert warnings == []
    else:
        assert any(f"reading pod {NAMESPACE}/{POD}" in w and "404" in w for w in warnings)


async def test_a_failed_pod_lookup_keeps_the_owners_already_there(
    apiserver: ApiServer, start: Start
) -> None:
    await add_pod(apiserver, [DAEMONSET_OWNER])
    first = start(pod_name=POD)
    assert await apply(first, LABELS) is Outcome.CREATED
    owners = (await stored(apiserver))["metadata"]["ownerReferences"]
    await asyncio.to_thread(first.close)

    # A restarted labeller cannot read its pod (the API server errs), and the labels changed.
    apiserver.handler.fail("get", 500, "InternalError", "etcd is unhappy")
    second = start(pod_name=POD)
    assert await apply(second, {"nvidia.com/gpu.count": "4"}) is Outcome.UPDATED
    obj = await stored(apiserver)
    assert obj["metadata"]["ownerReferences"] == owners
    assert obj["spec"]["labels"] == {"nvidia.com/gpu.count": "4"}
    warnings = start.warnings  # type: ignore[attr-defined]
    assert any("HTTP 500" in w and "no new owner references" in w for w in warnings)


async def test_a_conflicting_writer_is_read_again_and_retried(
    apiserver: ApiServer, start: Start
) -> None:
    publisher = start()
    assert await apply(publisher, LABELS) is Outcome.CREATED
    conflict = apiserver.handler.fail("update", 409, "Conflict", "the object has been modified")
    assert await apply(publisher, {"nvidia.com/gpu.count": "1"}) is Outcome.UPDATED
    assert conflict.served == 1
    assert (await stored(apiserver))["spec"]["labels"] == {"nvidia.com/gpu.count": "1"}
    assert writes(apiserver) == {"create": 1, "update": 2, "get": 1}


async def test_an_object_deleted_by_someone_else_is_created_again(
    apiserver: ApiServer, start: Start
) -> None:
    publisher = start()
    assert await apply(publisher, LABELS) is Outcome.CREATED
    response = await apiserver.handler.delete(OBJECT)
    assert response.status == 200
    # The watch sees the deletion; wait for it rather than for time to pass.
    assert await asyncio.to_thread(publisher.watch.wait_until, lambda obj: obj is None, 5.0)
    assert await apply(publisher, LABELS) is Outcome.CREATED
    assert writes(apiserver) == {"create": 2}
    assert "delete" not in request_counts(api_requests(apiserver.handler))


@pytest.mark.parametrize("started", [True, False], ids=["watching", "before-the-watch"])
async def test_without_the_crd_the_error_says_so_in_one_line(
    apiserver: ApiServer, start: Start, started: bool
) -> None:
    missing = error_response(404, "NotFound", "the server could not find the requested resource")
    apiserver.handler[kmock.resource("nfd.k8s-sigs.io", "v1alpha1", "nodefeatures")] << missing
    if started:
        publisher = start(sync_timeout=0.5)
    else:
        publisher = NodeFeaturePublisher(
            apiserver.access(), node_name=NODE, namespace=NAMESPACE, sync_timeout=0.0
        )
    with pytest.raises(KubeError) as caught:
        await apply(publisher, LABELS)
    publisher.close()
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"reading NodeFeature {NAMESPACE}/{NAME}: HTTP 404")
    assert message.endswith("(is Node Feature Discovery installed, with its NodeFeature CRD?)")
    assert writes(apiserver) == {"get": 1}


async def test_an_unreachable_api_server_is_one_line(apiserver: ApiServer, start: Start) -> None:
    await apiserver.down()
    publisher = start(sync_timeout=0.2)
    with pytest.raises(KubeError) as caught:
        await apply(publisher, LABELS)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"reading NodeFeature {NAMESPACE}/{NAME}: cannot connect")


def test_semantic_equality_treats_missing_and_empty_maps_alike() -> None:
    desired = desired_object(NODE, NAMESPACE, LABELS, [])
    bare = {
        "metadata": {"name": NAME, "labels": {NODE_NAME_LABEL: NODE}, "resourceVersion": "7"},
        "spec": {"features": {"flags": None}, "labels": LABELS},
    }
    assert same_object(bare, desired, owners=True)
    assert not same_object({**bare, "spec": {"labels": {}}}, desired, owners=True)
    extra = {**bare, "metadata": {**bare["metadata"], "labels": {NODE_NAME_LABEL: NODE, "x": "y"}}}
    assert not same_object(extra, desired, owners=True)
    owned = desired_object(NODE, NAMESPACE, LABELS, [{"kind": "Pod", "name": "p", "uid": "u"}])
    assert not same_object(bare, owned, owners=True)
    assert same_object(bare, owned, owners=False)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        pytest.param({"node_name": ""}, "node's name", id="no-node"),
        pytest.param({"namespace": ""}, "namespace", id="no-namespace"),
        pytest.param({"attempts": 0}, "attempts", id="no-attempts"),
    ],
)
def test_rejects_unusable_settings(
    apiserver: ApiServer, overrides: dict[str, Any], message: str
) -> None:
    options: dict[str, Any] = {"node_name": NODE, "namespace": NAMESPACE}
    options.update(overrides)
    with pytest.raises(ValueError, match=message):
        NodeFeaturePublisher(apiserver.access(), **options)


async def test_a_refused_create_is_one_line_and_not_retried(
    apiserver: ApiServer, start: Start
) -> None:
    apiserver.handler.fail("create", 403, "Forbidden", "nodefeatures is forbidden")
    publisher = start()
    with pytest.raises(KubeError) as caught:
        await apply(publisher, LABELS)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"creating NodeFeature {NAMESPACE}/{NAME}: HTTP 403")
    assert writes(apiserver) == {"create": 1}


async def test_a_conflict_on_every_attempt_gives_up_after_the_last(
    apiserver: ApiServer, start: Start
) -> None:
    publisher = start()
    assert await apply(publisher, LABELS) is Outcome.CREATED
    apiserver.handler.fail("update", 409, "Conflict", "the object has been modified", times=3)
    with pytest.raises(KubeError) as caught:
        await apply(publisher, {"nvidia.com/gpu.count": "1"})
    assert str(caught.value).startswith(f"updating NodeFeature {NAMESPACE}/{NAME}: HTTP 409")
    assert writes(apiserver)["update"] == 3
    assert (await stored(apiserver))["spec"]["labels"] == LABELS  # nothing half-written
