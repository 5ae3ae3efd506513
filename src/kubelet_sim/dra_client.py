"""The kubelet's side of the DRA plugin APIs: a registration client and a DRAPlugin client.

`RegistrationClient` dials a socket found in plugins_registry and makes the plugin
watcher's two calls (GetInfo, NotifyRegistrationStatus); `DraClient` dials the
endpoint a plugin named and makes the DRA manager's calls (NodePrepareResources,
NodeUnprepareResources) in the service version chosen at registration, and opens
its device-health stream (`DRAResourceHealth.NodeWatchResources`, KEP-4680) in the
version asked for. Both versions of each service have the same messages on the
wire, so the client always speaks in one version's classes (v1, v1beta1 for health)
and only the method path names the version, as the kubelet's own client does.
Failures are `PluginCallError`s carrying the gRPC status unchanged, like the
device-plugin client's.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from grpc import aio

from kubelet.api.dra.v1 import api_pb2 as dra_v1
from kubelet.api.dra.v1beta1 import api_pb2 as dra_v1beta1
from kubelet.api.dra_health.v1alpha1 import api_pb2 as health_v1alpha1
from kubelet.api.dra_health.v1beta1 import api_pb2 as health_v1beta1
from kubelet.api.pluginregistration.v1 import api_pb2 as registration_pb2
from kubelet.api.pluginregistration.v1 import api_pb2_grpc as registration_grpc
from kubelet.dra.types import (
    V1_SERVICE,
    V1ALPHA1_HEALTH_SERVICE,
    V1BETA1_HEALTH_SERVICE,
    V1BETA1_SERVICE,
    ClaimRef,
)
from kubelet_sim.client import ChannelClient, call_error, dial

#: The kubelet's "<version>.DRAPlugin" names -> the gRPC service they stand for.
SERVICE_PATHS = {
    V1_SERVICE: dra_v1.DESCRIPTOR.services_by_name["DRAPlugin"].full_name,
    V1BETA1_SERVICE: dra_v1beta1.DESCRIPTOR.services_by_name["DRAPlugin"].full_name,
}
#: The services this kubelet speaks; a plugin's list is searched in its own order.
KUBELET_SERVICES = tuple(SERVICE_PATHS)
#: The "<version>.DRAResourceHealth" names this kubelet speaks, newest first.
HEALTH_SERVICE_PATHS = {
    V1BETA1_HEALTH_SERVICE: health_v1beta1.DESCRIPTOR.services_by_name[
        "DRAResourceHealth"
    ].full_name,
    V1ALPHA1_HEALTH_SERVICE: health_v1alpha1.DESCRIPTOR.services_by_name[
        "DRAResourceHealth"
    ].full_name,
}
HealthCall = aio.UnaryStreamCall[Any, health_v1beta1.NodeWatchResourcesResponse]


class RegistrationClient(ChannelClient):
    """One channel to a registration socket in plugins_registry."""

    @classmethod
    async def connect(
        cls, socket_path: Path, *, dial_timeout: float = 5.0, call_timeout: float = 5.0
    ) -> RegistrationClient:
        return cls(socket_path, await dial(socket_path, dial_timeout), call_timeout)

    async def get_info(self) -> registration_pb2.PluginInfo:
        stub = registration_grpc.RegistrationStub(self._channel)
        try:
            return await stub.GetInfo(registration_pb2.InfoRequest(), timeout=self.timeout)
        except aio.AioRpcError as exc:
            raise call_error("GetInfo", exc) from exc

    async def notify(self, registered: bool, error: str = "") -> None:
        stub = registration_grpc.RegistrationStub(self._channel)
        status = registration_pb2.RegistrationStatus(plugin_registered=registered, error=error)
        try:
            await stub.NotifyRegistrationStatus(status, timeout=self.timeout)
        except aio.AioRpcError as exc:
            raise call_error("NotifyRegistrationStatus", exc) from exc


def _claims(claims: Sequence[ClaimRef]) -> list[dra_v1.Claim]:
    return [dra_v1.Claim(namespace=c.namespace, uid=c.uid, name=c.name) for c in claims]


class DraClient(ChannelClient):
    """One channel to a DRA plugin's endpoint, speaking the service chosen at registration."""

    def __init__(
        self, socket_path: Path, channel: aio.Channel, call_timeout: float, service: str
    ) -> None:
        super().__init__(socket_path, channel, call_timeout)
        path = SERVICE_PATHS[service]
        self.service = service
        self._prepare = channel.unary_unary(
            f"/{path}/NodePrepareResources",
            request_serializer=dra_v1.NodePrepareResourcesRequest.SerializeToString,
            response_deserializer=dra_v1.NodePrepareResourcesResponse.FromString,
        )
        self._unprepare = channel.unary_unary(
            f"/{path}/NodeUnprepareResources",
            request_serializer=dra_v1.NodeUnprepareResourcesRequest.SerializeToString,
            response_deserializer=dra_v1.NodeUnprepareResourcesResponse.FromString,
        )

    @classmethod
    async def connect(
        cls,
        socket_path: Path,
        *,
        service: str = V1_SERVICE,
        dial_timeout: float = 5.0,
        call_timeout: float = 5.0,
    ) -> DraClient:
        """Dial `socket_path`; `service` is one of `KUBELET_SERVICES` (ValueError otherwise)."""
        if service not in SERVICE_PATHS:
            raise ValueError(f"unknown DRA service {service!r}; known: {', '.join(SERVICE_PATHS)}")
        return cls(socket_path, await dial(socket_path, dial_timeout), call_timeout, service)

    async def prepare(self, claims: Sequence[ClaimRef]) -> dra_v1.NodePrepareResourcesResponse:
        request = dra_v1.NodePrepareResourcesRequest(claims=_claims(claims))
        try:
            response: dra_v1.NodePrepareResourcesResponse = await self._prepare(
                request, timeout=self.timeout
            )
        except aio.AioRpcError as exc:
            raise call_error("NodePrepareResources", exc) from exc
        return response

    async def unprepare(self, claims: Sequence[ClaimRef]) -> dra_v1.NodeUnprepareResourcesResponse:
        request = dra_v1.NodeUnprepareResourcesRequest(claims=_claims(claims))
        try:
            response: dra_v1.NodeUnprepareResourcesResponse = await self._unprepare(
                request, timeout=self.timeout
            )
        except aio.AioRpcError as exc:
            raise call_error("NodeUnprepareResources", exc) from exc
        return response


def watch_health(client: DraClient, service: str) -> HealthCall:
    """Open the plugin's device-health stream in `service` (one of `HEALTH_SERVICE_PATHS`).

    No deadline: the stream lasts as long as the registration. Errors (UNIMPLEMENTED
    from a plugin that does not serve it) come out of the first read.
    """
    method = client.channel.unary_stream(
        f"/{HEALTH_SERVICE_PATHS[service]}/NodeWatchResources",
        request_serializer=health_v1beta1.NodeWatchResourcesRequest.SerializeToString,
        response_deserializer=health_v1beta1.NodeWatchResourcesResponse.FromString,
    )
    call: HealthCall = method(health_v1beta1.NodeWatchResourcesRequest())
    return call


def health_services(versions: Sequence[str]) -> tuple[str, ...]:
    """The health versions to try, in order, for a plugin that registered `versions`.

    Those it lists, newest first, as a kubelet that reads the list for them does;
    when it lists none, every one this kubelet speaks, newest first (the first
    kubelets with the feature called v1alpha1 whatever the list said).
    """
    listed = tuple(service for service in HEALTH_SERVICE_PATHS if service in versions)
    return listed or tuple(HEALTH_SERVICE_PATHS)


def choose_service(versions: Sequence[str]) -> str | None:
    """The kubelet's choice: the first of the plugin's versions it speaks, None if none."""
    return next((v for v in versions if v in SERVICE_PATHS), None)
