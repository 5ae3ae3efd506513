"""Read a ResourceClaim's allocation for NodePrepareResources; make allocated claims for tests.

The kubelet names a claim (namespace, name, uid) and the plugin must find
out which of its devices the scheduler allocated to it, and with which
opaque configuration: that is the claim's `status.allocation.devices`
(`results[]{request, driver, pool, device}` and `config[]{requests, opaque{driver,
parameters}}`). `ClaimReader.get` reads it with one GET and returns a frozen
`ResourceClaimView`; choosing this driver's and this pool's results, and
checking the uid the kubelet gave, is the caller's job.

Failures are `KubeError`s with one line and the HTTP status kept: a missing
claim reads `resourceclaim <ns>/<name> not found`, a refused read (RBAC)
`... forbidden: <the server's reason>`. Each request is bounded by the
client timeout. `get` may be called from several threads at once: each
thread gets an API client of its own, kept for its next call.

`claim_object` and `allocation_status` build a claim that requests devices of
a class and the status that allocates given devices to it; `create_allocated_claim`
creates both in the API as the scheduler would leave them (the claim, then
its status subresource). Tests and `kubelet-sim prepare --api` use them.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

from kube import raw, resource_api
from kube.claim_values import AllocatedDevice, OpaqueConfig, ResourceClaimView
from kube.client import ApiAccess, close_client
from kube.errors import KubeError, describe
from kube.official import ApiClient, ApiException

__all__ = [
    "AllocatedDevice",
    "ClaimReader",
    "OpaqueConfig",
    "ResourceClaimView",
    "allocation_status",
    "claim_object",
    "create_allocated_claim",
]

_NOT_FOUND = 404
_FORBIDDEN = 403


class ClaimReader:
    """Reads ResourceClaims with one bounded GET each."""

    def __init__(self, api: ApiAccess, *, timeout: float = 10.0) -> None:
        self._api = api
        self._bounds: raw.Timeout = (timeout, timeout)
        self._local = threading.local()
        self._clients: list[ApiClient] = []
        self._lock = threading.Lock()
        self._closed = False

    def get(self, namespace: str, name: str) -> ResourceClaimView:
        """The claim's allocation as the API holds it now.

        Raises:
            KubeError: the claim is missing, the read is refused or fails (one line).
        """
        what = f"resourceclaim {namespace}/{name}"
        try:
            obj = raw.get_object(
                self._client(), raw.resource_claims(namespace), name, timeout=self._bounds
            )
        except ApiException as exc:
            if exc.status == _NOT_FOUND:
                raise KubeError(f"{what} not found", status=_NOT_FOUND) from exc
            if exc.status == _FORBIDDEN:
                raise KubeError(f"{what}: forbidden: {_reason(exc)}", status=_FORBIDDEN) from exc
            raise KubeError.wrap(f"reading {what}", exc) from exc
        except Exception as exc:
            raise KubeError.wrap(f"reading {what}", exc) from exc
        try:
            return parse_claim(obj)
        except ValueError as exc:
            raise KubeError(f"{what}: {exc}") from exc

    def close(self) -> None:
        with self._lock:
            self._closed = True
            clients, self._clients = self._clients, []
        for client in clients:
            close_client(client)

    def _client(self) -> ApiClient:
        client: ApiClient | None = getattr(self._local, "client", None)
        if client is None:
            with self._lock:
                if self._closed:
                    raise KubeError("the claim reader is closed")
                client = self._api.new_client()
                self._clients.append(client)
            self._local.client = client
        return client


def parse_claim(obj: Mapping[str, Any]) -> ResourceClaimView:
    """The parts of a ResourceClaim object that preparing it needs.

    Raises:
        ValueError: the allocation is malformed (a result without a device, ...).
    """
    metadata = raw.object_metadata(obj)
    allocation = raw.mapping_at(raw.mapping_at(obj, "status"), "allocation")
    devices = raw.mapping_at(allocation, "devices")
    results = []
    for index, item in enumerate(_list_at(devices, "results")):
        values = {key: item.get(key) for key in ("request", "driver", "pool", "device")}
        missing = [key for key, value in values.items() if not isinstance(value, str) or not value]
        if missing:
            raise ValueError(f"status.allocation.devices.results[{index}]: no {', '.join(missing)}")
        results.append(AllocatedDevice(**{key: str(value) for key, value in values.items()}))
    configs = []
    for index, item in enumerate(_list_at(devices, "config")):
        opaque = raw.mapping_at(item, "opaque")
        if not opaque:
            continue  # not for a driver: nothing a driver reads
        driver = opaque.get("driver")
        parameters = opaque.get("parameters")
        if not isinstance(driver, str) or not driver:
            raise ValueError(f"status.allocation.devices.config[{index}].opaque: no driver")
        if parameters is not None and not isinstance(parameters, Mapping):
            raise ValueError(
                f"status.allocation.devices.config[{index}].opaque.parameters: not an object"
            )
        requests = item.get("requests") or []
        if not isinstance(requests, list) or not all(isinstance(r, str) for r in requests):
            raise ValueError(f"status.allocation.devices.config[{index}].requests: not a list")
        configs.append(
            OpaqueConfig(tuple(requests), driver, MappingProxyType(dict(parameters or {})))
        )
    return ResourceClaimView(
        namespace=str(metadata.get("namespace") or ""),
        name=str(metadata.get("name") or ""),
        uid=str(metadata.get("uid") or ""),
        allocated=bool(allocation),
        results=tuple(results),
        config=tuple(configs),
    )


def claim_object(
    namespace: str,
    name: str,
    results: Sequence[AllocatedDevice],
    *,
    device_class: str = "gpu.nvidia.com",
    config: Sequence[OpaqueConfig] = (),
) -> raw.Json:
    """A ResourceClaim asking, per request name in `results`, for as many devices of the class."""
    counts: dict[str, int] = {}
    for result in results:
        counts[result.request] = counts.get(result.request, 0) + 1
    spec: dict[str, Any] = {
        "devices": {
            "requests": [
                {"name": request, "exactly": {"deviceClassName": device_class,
                                              "allocationMode": "ExactCount", "count": count}}
                for request, count in counts.items()
            ]
        }
    }  # fmt: skip
    if config:
        spec["devices"]["config"] = [item.to_json(source="") for item in config]
    return {
        "apiVersion": f"{raw.RESOURCE_GROUP}/{raw.RESOURCE_VERSION}",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


def allocation_status(
    results: Sequence[AllocatedDevice], config: Sequence[OpaqueConfig] = ()
) -> raw.Json:
    """The status the scheduler writes when it allocates `results` to a claim."""
    devices: dict[str, Any] = {"results": [result.to_json() for result in results]}
    if config:
        devices["config"] = [item.to_json() for item in config]
    return {"allocation": {"devices": devices}}


def create_allocated_claim(
    api: ApiAccess,
    namespace: str,
    name: str,
    results: Sequence[AllocatedDevice],
    *,
    config: Sequence[OpaqueConfig] = (),
    device_class: str = "gpu.nvidia.com",
    timeout: float = 10.0,
) -> ResourceClaimView:
    """Create the claim, then allocate it (its status), as a scheduler would leave it.

    Raises:
        KubeError: a request failed (one line).
    """
    bounds = (timeout, timeout)
    what = f"resourceclaim {namespace}/{name}"
    collection = raw.resource_claims(namespace)
    body = claim_object(namespace, name, results, device_class=device_class, config=config)
    client = api.new_client()
    try:
        try:
            created = raw.create_object(client, collection, body, timeout=bounds)
        except Exception as exc:
            raise KubeError.wrap(f"creating {what}", exc) from exc
        created["status"] = allocation_status(results, config)
        try:
            allocated = resource_api.replace_object_status(
                client, collection, name, created, timeout=bounds
            )
        except Exception as exc:
            raise KubeError.wrap(f"allocating {what}", exc) from exc
    finally:
        close_client(client)
    return parse_claim(allocated)


def _list_at(obj: Mapping[str, Any], key: str) -> list[Mapping[str, Any]]:
    value = obj.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise ValueError(f"status.allocation.devices.{key}: not a list")
    return [item if isinstance(item, Mapping) else {} for item in value]


def _reason(exc: ApiException) -> str:
    text = describe(exc)
    return text.split(": ", 1)[1] if ": " in text else text
