"""Binding the DevicePlugin servicer to a server, with requests parsed by us.

The generated binding lets gRPC parse each request before our code runs; a
body that is not valid protobuf (a cut message, a string that is not UTF-8)
then fails inside gRPC and reaches the kubelet as UNKNOWN, with a traceback in
our log. Here every handler receives the raw bytes and parses them itself, so
such a request is answered INVALID_ARGUMENT in one line like any other bad
request.

ListAndWatch (and the DRA health stream, `kubelet.dra.health_stream`) writes its own
messages rather than handing gRPC a generator.
The kubelet never ends the stream itself: it hangs up, and a restarting
kubelet hangs up on every stream at once, often with a list still being sent
(it had stopped reading). gRPC's own writer then fails the write and, unless
it has already seen the hang-up, logs an ERROR with a traceback for each
stream. Here that write is ours, so the stream ends in one DEBUG line.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Awaitable, Callable
from contextlib import aclosing
from typing import Any

import grpc
from google.protobuf.message import DecodeError, Message
from loguru import logger

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


def streaming(
    kind: type[Message],
    behaviour: Callable[[Any, Context], AsyncGenerator[Message, None]],
    *,
    method: str,
    resource: str,
) -> grpc.RpcMethodHandler[Any, Any]:
    log = logger.bind(resource=resource)

    async def handle(raw: bytes, context: Context) -> None:
        request = await _parse(kind, raw, context)
        writing = False
        try:
            # Closed on every exit, so a stream that ends early stops following
            # the device list at once (`LatestValue.drained` counts followers).
            async with aclosing(behaviour(request, context)) as messages:
                async for message in messages:
                    writing = True
                    try:
                        await context.write(message)
                    except grpc.aio.InternalError:
                        # gRPC fails a write (ExecuteBatchError) only when the call is
                        # over: the client hung up or the server is cutting its calls.
                        # End the call as gRPC ends one whose client cancelled: with
                        # CancelledError, which it takes quietly, and no status to send.
                        raise asyncio.CancelledError from None
                    writing = False
        except asyncio.CancelledError:
            # Also how gRPC stops a stream whose client hung up, when it learns
            # of it before the write does (or while we wait for the next list).
            cut = " while a list was being sent" if writing else ""
            log.debug(
                "{method} stream ended: the kubelet hung up or the server stopped" + cut,
                method=method,
            )
            raise

    return grpc.unary_stream_rpc_method_handler(
        handle, response_serializer=lambda message: message.SerializeToString()
    )


def device_plugin_handler(servicer: DevicePluginServicer) -> grpc.GenericRpcHandler:
    """The `v1beta1.DevicePlugin` service of `servicer`, for `server.add_generic_rpc_handlers`."""
    return grpc.method_handlers_generic_handler(
        SERVICE,
        {
            "GetDevicePluginOptions": unary(api_pb2.Empty, servicer.GetDevicePluginOptions),
            "ListAndWatch": streaming(
                api_pb2.Empty,
                servicer.ListAndWatch,
                method="ListAndWatch",
                resource=servicer.resource,
            ),
            "GetPreferredAllocation": unary(
                api_pb2.PreferredAllocationRequest, servicer.GetPreferredAllocation
            ),
            "Allocate": unary(api_pb2.AllocateRequest, servicer.Allocate),
            "PreStartContainer": unary(
                api_pb2.PreStartContainerRequest, servicer.PreStartContainer
            ),
        },
    )
