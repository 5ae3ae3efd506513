"""Binding the DevicePlugin servicer to a server, with requests parsed by us.

The generated binding lets gRPC parse each request before our code runs; a
body that is not valid protobuf (a cut message, a string that is not UTF-8)
then fails inside gRPC and reaches the kubelet as UNKNOWN, with a traceback in
our log. Here every handler receives the raw bytes and parses them itself, so
such a request is answered INVALID_ARGUMENT in one line like any other bad
request.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
from google.protobuf.message import DecodeError, Message

from kubelet.api import api_pb2
from kubelet.servicer import DevicePluginServicer

SERVICE = "v1beta1.DevicePlugin"
Context = grpc.aio.ServicerContext[Any, Any]


async def _parse(kind: type[Message], raw: bytes, context: Context) -> Any:
    try:
        return kind.FromString(raw)
    except DecodeError as err:
        await context.abort(
            grpc.StatusCode.INVALID_ARGUMENT, f"malformed {kind.DESCRIPTOR.name}: {err}"
        )


def unary(
    kind: type[Message], behaviour: Callable[[Any, Context], Awaitable[Message]]
) -> grpc.RpcMethodHandler[Any, Any]:
    async def handle(raw: bytes, context: Context) -> Message:
        return await behaviour(await _parse(kind, raw, context), context)

    return grpc.unary_unary_rpc_method_handler(
        handle, response_serializer=lambda message: message.SerializeToString()
    )


def _streaming(
    kind: type[Message], behaviour: Callable[[Any, Context], AsyncIterator[Message]]
) -> grpc.RpcMethodHandler[Any, Any]:
    async def handle(raw: bytes, context: Context) -> AsyncIterator[Message]:
        async for message in behaviour(await _parse(kind, raw, context), context):
            yield message

    return grpc.unary_stream_rpc_method_handler(
        handle, response_serializer=lambda message: message.SerializeToString()
    )


def device_plugin_handler(servicer: DevicePluginServicer) -> grpc.GenericRpcHandler:
    """The `v1beta1.DevicePlugin` service of `servicer`, for `server.add_generic_rpc_handlers`."""
    return grpc.method_handlers_generic_handler(
        SERVICE,
        {
            "GetDevicePluginOptions": unary(api_pb2.Empty, servicer.GetDevicePluginOptions),
            "ListAndWatch": _streaming(api_pb2.Empty, servicer.ListAndWatch),
            "GetPreferredAllocation": unary(
                api_pb2.PreferredAllocationRequest, servicer.GetPreferredAllocation
            ),
            "Allocate": unary(api_pb2.AllocateRequest, servicer.Allocate),
            "PreStartContainer": unary(
                api_pb2.PreStartContainerRequest, servicer.PreStartContainer
            ),
        },
    )
