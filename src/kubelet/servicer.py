"""The v1beta1 DevicePlugin service for one resource.

Every handler is async (a sync handler in an aio server can hang shutdown) and
reads only immutable objects: the device list comes from a `LatestValue` the
resource's server (`kubelet.server`) publishes into, and allocation goes
through the resource's `Allocator`, which the server may swap in place when a
reconfiguration only changes devices.

GetPreferredAllocation is a search that can take tens of milliseconds on a
large node, so it runs in a small thread pool of its own (`PREFERRED_WORKERS`
threads, shared by every resource), never on the event loop: Allocate,
ListAndWatch and the probes keep answering meanwhile. Threads, not
processes: the search is bounded in time by itself, its inputs are small, a
thread gives the loop the GIL back at every switch interval, and forking
after gRPC has started is unsafe.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import grpc

from foundation.latest import LatestValue
from kubelet import translate
from kubelet.api import api_pb2, api_pb2_grpc
from resources.allocation import Allocator
from resources.errors import AllocationError, InvalidRequest
from resources.model import PluginDevice

# (resource, method, seconds, status code name) -> None; the reconciler feeds metrics from it.
RpcObserver = Callable[[str, str, float, str], None]

# Threads computing preferred allocations, for all resources together. The
# kubelet asks one pod at a time, so two leave room for a retry that overlaps.
PREFERRED_WORKERS = 2

# (available, required, size) for each container request of one call.
_Requests = list[tuple[list[str], list[str], int]]


class PreferredPool:
    """The threads GetPreferredAllocation searches in, made on first use, shared by resources.

    The plugin makes one and hands it to its fleet; its supervisor shuts it
    down once the servers are stopped. Used and shut down on the event loop's
    thread (`shutdown(wait=True)` may then join the threads from another).
    """

    def __init__(self, workers: int = PREFERRED_WORKERS) -> None:
        self._workers = workers
        self._executor: ThreadPoolExecutor | None = None
        self._closed = False

    def executor(self) -> ThreadPoolExecutor:
        """The pool's executor (made now if this is the first search).

        Raises:
            RuntimeError: the pool was shut down.
        """
        if self._closed:
            raise RuntimeError("the preferred-allocation pool is shut down")
        if self._executor is None:
            self._executor = ThreadPoolExecutor(
                max_workers=self._workers, thread_name_prefix="preferred"
            )
        return self._executor

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Take no new search; with `wait`, return once the searches in progress are over."""
        self._closed = True
        if self._executor is not None:
            self._executor.shutdown(wait=wait, cancel_futures=cancel_futures)


def _preferred_all(allocator: Allocator, requests: _Requests) -> list[list[str]]:
    return [allocator.preferred(*request) for request in requests]


@dataclass
class ResourceState:
    """What the handlers of one resource read; swapped, never mutated in place."""

    allocator: Allocator
    devices: LatestValue[tuple[PluginDevice, ...]]


class DevicePluginServicer(api_pb2_grpc.DevicePluginServicer):
    def __init__(
        self,
        state: ResourceState,
        *,
        observe: RpcObserver | None = None,
        preferred: PreferredPool | None = None,
    ) -> None:
        self._state = state
        self._observe = observe
        self._preferred = preferred if preferred is not None else PreferredPool()

    @property
    def resource(self) -> str:
        """The resource name this service answers for (the kubelet's name for it)."""
        return self._state.allocator.name

    def _record(self, method: str, started: float, code: grpc.StatusCode) -> None:
        if self._observe is not None:
            seconds = time.perf_counter() - started
            self._observe(self._state.allocator.name, method, seconds, code.name)

    async def GetDevicePluginOptions(
        self, request: api_pb2.Empty, context: grpc.aio.ServicerContext[object, object]
    ) -> api_pb2.DevicePluginOptions:
        return api_pb2.DevicePluginOptions(
            pre_start_required=False, get_preferred_allocation_available=True
        )

    async def ListAndWatch(
        self, request: api_pb2.Empty, context: grpc.aio.ServicerContext[object, object]
    ) -> AsyncGenerator[api_pb2.ListAndWatchResponse, None]:
        # A full list first, then a full list on every change; the stream ends
        # when the server closes the value (resource stopped or socket re-created).
        async for devices in self._state.devices.follow():
            yield translate.list_and_watch_response(devices)

    async def Allocate(
        self, request: api_pb2.AllocateRequest, context: grpc.aio.ServicerContext[object, object]
    ) -> api_pb2.AllocateResponse:
        started = time.perf_counter()
        allocator = self._state.allocator
        try:
            responses = [
                translate.container_response(allocator.allocate(list(req.devices_ids)))
                for req in request.container_requests
            ]
        except InvalidRequest as err:
            self._record("Allocate", started, grpc.StatusCode.INVALID_ARGUMENT)
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(err))
        except AllocationError as err:
            self._record("Allocate", started, grpc.StatusCode.INTERNAL)
            await context.abort(grpc.StatusCode.INTERNAL, str(err))
        self._record("Allocate", started, grpc.StatusCode.OK)
        return api_pb2.AllocateResponse(container_responses=responses)

    async def GetPreferredAllocation(
        self,
        request: api_pb2.PreferredAllocationRequest,
        context: grpc.aio.ServicerContext[object, object],
    ) -> api_pb2.PreferredAllocationResponse:
        started = time.perf_counter()
        allocator = self._state.allocator
        requests: _Requests = [
            (list(req.available_deviceIDs), list(req.must_include_deviceIDs), req.allocation_size)
            for req in request.container_requests
        ]
        try:
            answers: Sequence[list[str]] = await asyncio.get_running_loop().run_in_executor(
                self._preferred.executor(), _preferred_all, allocator, requests
            )
            responses = [
                api_pb2.ContainerPreferredAllocationResponse(deviceIDs=ids) for ids in answers
            ]
        except InvalidRequest as err:
            self._record("GetPreferredAllocation", started, grpc.StatusCode.INVALID_ARGUMENT)
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"error getting list of preferred allocation devices: {err}",
            )
        self._record("GetPreferredAllocation", started, grpc.StatusCode.OK)
        return api_pb2.PreferredAllocationResponse(container_responses=responses)

    async def PreStartContainer(
        self,
        request: api_pb2.PreStartContainerRequest,
        context: grpc.aio.ServicerContext[object, object],
    ) -> api_pb2.PreStartContainerResponse:
        return api_pb2.PreStartContainerResponse()
