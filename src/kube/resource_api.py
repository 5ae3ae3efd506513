"""Writes of the `resource.k8s.io` objects DRA uses, as plain JSON like `raw`'s.

The ResourceSlice publisher creates, replaces and deletes cluster-scoped
ResourceSlices; the claim helpers create a ResourceClaim and set its status.
They talk to the generated API without model decoding, for the reasons given
in `raw`, and every call takes an explicit `(connect, read)` timeout.
"""

from __future__ import annotations

from typing import cast

from kube import raw
from kube.official import ApiClient, CustomObjectsApi

__all__ = [
    "create_cluster_object",
    "delete_cluster_object",
    "get_cluster_object",
    "replace_cluster_object",
    "replace_object_status",
]


def create_cluster_object(
    client: ApiClient, collection: raw.Collection, body: raw.Json, *, timeout: raw.Timeout
) -> raw.Json:
    group, version, plural = raw.cluster_path(collection)
    response = cast(
        raw.RawResponse,
        CustomObjectsApi(client).create_cluster_custom_object(
            group, version, plural, body, _preload_content=False, _request_timeout=timeout
        ),
    )
    return raw.read_json(response)


def get_cluster_object(
    client: ApiClient, collection: raw.Collection, name: str, *, timeout: raw.Timeout
) -> raw.Json:
    """One cluster-scoped object (raises `ApiException` 404 when there is none)."""
    group, version, plural = raw.cluster_path(collection)
    response = cast(
        raw.RawResponse,
        CustomObjectsApi(client).get_cluster_custom_object(
            group, version, plural, name, _preload_content=False, _request_timeout=timeout
        ),
    )
    return raw.read_json(response)


def replace_cluster_object(
    client: ApiClient,
    collection: raw.Collection,
    name: str,
    body: raw.Json,
    *,
    timeout: raw.Timeout,
) -> raw.Json:
    """An UPDATE (PUT) carrying `metadata.resourceVersion`: a concurrent change gives 409."""
    group, version, plural = raw.cluster_path(collection)
    response = cast(
        raw.RawResponse,
        CustomObjectsApi(client).replace_cluster_custom_object(
            group, version, plural, name, body, _preload_content=False, _request_timeout=timeout
        ),
    )
    return raw.read_json(response)


def delete_cluster_object(
    client: ApiClient, collection: raw.Collection, name: str, *, timeout: raw.Timeout
) -> None:
    group, version, plural = raw.cluster_path(collection)
    response = cast(
        raw.RawResponse,
        CustomObjectsApi(client).delete_cluster_custom_object(
            group, version, plural, name, _preload_content=False, _request_timeout=timeout
        ),
    )
    raw.read_json(response)


def replace_object_status(
    client: ApiClient,
    collection: raw.Collection,
    name: str,
    body: raw.Json,
    *,
    timeout: raw.Timeout,
) -> raw.Json:
    """An UPDATE (PUT) of a namespaced object's `status` subresource."""
    group, version, namespace, plural = raw.namespaced_path(collection)
    response = cast(
        raw.RawResponse,
        CustomObjectsApi(client).replace_namespaced_custom_object_status(
            group, version, namespace, plural, name, body,
            _preload_content=False, _request_timeout=timeout,
        ),
    )  # fmt: skip
    return raw.read_json(response)
