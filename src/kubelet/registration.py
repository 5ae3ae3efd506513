"""Registering one resource with the kubelet (`v1beta1.Registration/Register`)."""

from __future__ import annotations

from pathlib import Path

import grpc

from kubelet.api import api_pb2, api_pb2_grpc
from kubelet.errors import RegistrationError
from kubelet.paths import address

API_VERSION = "v1beta1"


async def register(
    *, kubelet_socket: Path, endpoint: str, resource: str, timeout: float = 5.0
) -> None:
    """Register `resource`, served on `endpoint` (a socket base name), with the kubelet.

    Raises:
        RegistrationError: the kubelet socket is missing, refused, or did not answer in time.
    """
    request = api_pb2.RegisterRequest(
        version=API_VERSION,
        endpoint=endpoint,
        resource_name=resource,
        options=api_pb2.DevicePluginOptions(get_preferred_allocation_available=True),
    )
    if not kubelet_socket.exists():
        raise RegistrationError(f"kubelet socket {kubelet_socket} does not exist")
    # A private subchannel pool: a kubelet socket re-created at the same path
    # must not inherit the reconnect backoff of a channel to the old one.
    async with grpc.aio.insecure_channel(
        address(kubelet_socket), options=[("grpc.use_local_subchannel_pool", 1)]
    ) as channel:
        try:
            await api_pb2_grpc.RegistrationStub(channel).Register(
                request, timeout=timeout, wait_for_ready=True
            )
        except grpc.aio.AioRpcError as err:
            raise RegistrationError(
                f"kubelet refused registration of {resource}: "
                f"{err.code().name}: {err.details()}"
            ) from err
