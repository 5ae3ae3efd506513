"""Node requests that return plain JSON instead of the client's generated models.

We only ever need a node's name, resourceVersion and labels, so we ask the
generated API for the undecoded response (`_preload_content=False`) and parse
it ourselves. That sidesteps model deserialisation (slow for Nodes, and it has
rejected unexpected fields in past client releases), works the same across
client versions, and gives the watch loop the raw HTTP response it needs to
read events line by line and to cut the connection on shutdown.

Every call takes an explicit `(connect, read)` timeout: without one the client
can wait forever on a dead connection (kubernetes-client/python#1148, #1402).

A `Collection` names where a kind of object lives (nodes, NFD's NodeFeature
objects in one namespace, DRA's cluster-scoped ResourceSlices), so one
list-then-watch loop serves them all. Watches ask for bookmarks: on a quiet
object the server still sends the current resourceVersion now and then, so
the next watch can resume from it instead of listing again.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, cast

from kube.official import ApiClient, CoreV1Api, CustomObjectsApi

Timeout = tuple[float, float]
Json = dict[str, Any]
MERGE_PATCH = "application/merge-patch+json"


class RawResponse(Protocol):
    """The parts of urllib3's HTTPResponse used here."""

    data: bytes

    def stream(
        self, amt: int | None = ..., decode_content: bool | None = ...
    ) -> Iterator[bytes]: ...

    def release_conn(self) -> None: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class Collection:
    """Where objects of one kind live: the core `nodes`, or a custom resource in a namespace."""

    kind: str
    plural: str
    group: str = ""
    version: str = "v1"
    namespace: str | None = None

    def describe(self, name: str) -> str:
        """`node gpu-1` or `NodeFeature gpu-operator/nvidia-features-for-gpu-1`, for messages."""
        if self.namespace is None:
            return f"{self.kind.lower()} {name}"
        return f"{self.kind} {self.namespace}/{name}"

    @property
    def custom(self) -> bool:
        return bool(self.group)


NODES = Collection("Node", "nodes")
NFD_GROUP = "nfd.k8s-sigs.io"
NFD_VERSION = "v1alpha1"


def node_features(namespace: str) -> Collection:
    """NFD's NodeFeature objects in `namespace`."""
    return Collection("NodeFeature", "nodefeatures", NFD_GROUP, NFD_VERSION, namespace)


RESOURCE_GROUP = "resource.k8s.io"
RESOURCE_VERSION = "v1"
# DRA's ResourceSlices are cluster-scoped; ResourceClaims live in the pod's namespace.
RESOURCE_SLICES = Collection("ResourceSlice", "resourceslices", RESOURCE_GROUP, RESOURCE_VERSION)


def resource_claims(namespace: str) -> Collection:
    return Collection(
        "ResourceClaim", "resourceclaims", RESOURCE_GROUP, RESOURCE_VERSION, namespace
    )


def list_objects(
    client: ApiClient, collection: Collection, *, field_selector: str, timeout: Timeout
) -> tuple[list[Json], str]:
    """The matching objects and the list's resourceVersion (to watch from)."""
    response = _list(client, collection, field_selector=field_selector, timeout=timeout)
    body = _read_json(response)
    items = [item for item in body.get("items") or [] if isinstance(item, dict)]
    version = str(_mapping(body.get("metadata")).get("resourceVersion") or "")
    return items, version


def read_node(client: ApiClient, name: str, *, timeout: Timeout) -> Json:
    response = cast(
        RawResponse,
        CoreV1Api(client).read_node(name, _preload_content=False, _request_timeout=timeout),
    )
    return _read_json(response)


def merge_patch_node(client: ApiClient, name: str, body: Json, *, timeout: Timeout) -> Json:
    """A JSON merge patch: a null value removes the key, which is how labels go away."""
    response = cast(
        RawResponse,
        CoreV1Api(client).patch_node(
            name,
            body,
            _content_type=MERGE_PATCH,
            _preload_content=False,
            _request_timeout=timeout,
        ),
    )
    return _read_json(response)


def open_watch(
    client: ApiClient,
    collection: Collection,
    *,
    field_selector: str,
    resource_version: str,
    server_timeout: int,
    timeout: Timeout,
) -> RawResponse:
    """Start a watch with bookmarks; the caller reads it with `iter_events` and must close it."""
    return _list(
        client,
        collection,
        field_selector=field_selector,
        timeout=timeout,
        watch=True,
        allow_watch_bookmarks=True,
        resource_version=resource_version or None,
        timeout_seconds=server_timeout,
    )


def get_object(client: ApiClient, collection: Collection, name: str, *, timeout: Timeout) -> Json:
    """One custom object (raises `ApiException` 404 when there is none)."""
    group, version, namespace, plural = _custom(collection)
    response = cast(
        RawResponse,
        CustomObjectsApi(client).get_namespaced_custom_object(
            group, version, namespace, plural, name,
            _preload_content=False, _request_timeout=timeout,
        ),
    )  # fmt: skip
    return _read_json(response)


def create_object(
    client: ApiClient, collection: Collection, body: Json, *, timeout: Timeout
) -> Json:
    group, version, namespace, plural = _custom(collection)
    response = cast(
        RawResponse,
        CustomObjectsApi(client).create_namespaced_custom_object(
            group, version, namespace, plural, body,
            _preload_content=False, _request_timeout=timeout,
        ),
    )  # fmt: skip
    return _read_json(response)


def replace_object(
    client: ApiClient, collection: Collection, name: str, body: Json, *, timeout: Timeout
) -> Json:
    """An UPDATE (PUT): with `metadata.resourceVersion` set, a concurrent change gives 409."""
    group, version, namespace, plural = _custom(collection)
    response = cast(
        RawResponse,
        CustomObjectsApi(client).replace_namespaced_custom_object(
            group, version, namespace, plural, name, body,
            _preload_content=False, _request_timeout=timeout,
        ),
    )  # fmt: skip
    return _read_json(response)


def read_pod(client: ApiClient, namespace: str, name: str, *, timeout: Timeout) -> Json:
    response = cast(
        RawResponse,
        CoreV1Api(client).read_namespaced_pod(
            name, namespace, _preload_content=False, _request_timeout=timeout
        ),
    )
    return _read_json(response)


def iter_events(response: RawResponse) -> Iterator[Json]:
    """Watch events as dicts, one per JSON line, as soon as each line arrives."""
    buffer = b""
    for chunk in response.stream(amt=None, decode_content=True):
        buffer += chunk
        *lines, buffer = buffer.split(b"\n")
        for line in lines:
            event = _parse_event(line)
            if event is not None:
                yield event
    # A server may end the stream without a final newline.
    event = _parse_event(buffer)
    if event is not None:
        yield event


def object_name(obj: Mapping[str, Any]) -> str:
    return str(_mapping(obj.get("metadata")).get("name") or "")


def object_metadata(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    """`metadata`, or an empty mapping when it is missing or not a mapping."""
    return _mapping(obj.get("metadata"))


def mapping_at(obj: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    """`obj[key]` when it is a mapping, else an empty one (JSON from a server is untrusted)."""
    return _mapping(obj.get(key))


def object_resource_version(obj: Mapping[str, Any]) -> str:
    return str(_mapping(obj.get("metadata")).get("resourceVersion") or "")


def object_labels(obj: Mapping[str, Any]) -> dict[str, str]:
    labels = _mapping(_mapping(obj.get("metadata")).get("labels"))
    return {str(key): str(value) for key, value in labels.items() if value is not None}


def object_annotations(obj: Mapping[str, Any]) -> dict[str, str]:
    annotations = _mapping(_mapping(obj.get("metadata")).get("annotations"))
    return {str(key): str(value) for key, value in annotations.items() if value is not None}


def close_quietly(response: RawResponse) -> None:
    """Drop a (possibly half-read) response; its connection is not reused."""
    try:
        response.close()
        response.release_conn()
    except Exception:
        # The connection is being thrown away; a failure to close it changes nothing.
        pass


def _list(
    client: ApiClient,
    collection: Collection,
    *,
    field_selector: str,
    timeout: Timeout,
    **query: Any,
) -> RawResponse:
    if collection == NODES:
        return cast(
            RawResponse,
            CoreV1Api(client).list_node(
                field_selector=field_selector,
                _preload_content=False,
                _request_timeout=timeout,
                **query,
            ),
        )
    if collection.namespace is None:
        group, version, plural = cluster_path(collection)
        return cast(
            RawResponse,
            CustomObjectsApi(client).list_cluster_custom_object(
                group,
                version,
                plural,
                field_selector=field_selector,
                _preload_content=False,
                _request_timeout=timeout,
                **query,
            ),
        )
    group, version, namespace, plural = _custom(collection)
    return cast(
        RawResponse,
        CustomObjectsApi(client).list_namespaced_custom_object(
            group,
            version,
            namespace,
            plural,
            field_selector=field_selector,
            _preload_content=False,
            _request_timeout=timeout,
            **query,
        ),
    )


def namespaced_path(collection: Collection) -> tuple[str, str, str, str]:
    """(group, version, namespace, plural) of a namespaced API-group collection."""
    return _custom(collection)


def read_json(response: RawResponse) -> Json:
    """A response's JSON object body, its connection released for the next request."""
    return _read_json(response)


def _custom(collection: Collection) -> tuple[str, str, str, str]:
    if not collection.custom or collection.namespace is None:
        raise ValueError(f"{collection.kind} is not a namespaced custom resource")
    return collection.group, collection.version, collection.namespace, collection.plural


def cluster_path(collection: Collection) -> tuple[str, str, str]:
    """(group, version, plural) of a cluster-scoped API-group collection."""
    if not collection.custom or collection.namespace is not None:
        raise ValueError(f"{collection.kind} is not a cluster-scoped API-group resource")
    return collection.group, collection.version, collection.plural


def _parse_event(line: bytes) -> Json | None:
    if not line.strip():
        return None
    event = json.loads(line)
    return event if isinstance(event, dict) else None


def _read_json(response: RawResponse) -> Json:
    try:
        data = response.data
    except BaseException:
        close_quietly(response)
        raise
    # Fully read, so the connection can go back to the pool for the next request.
    response.release_conn()
    body = json.loads(data)
    if not isinstance(body, dict):
        raise ValueError("expected a JSON object from the API server")
    return body


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}
