"""The device manager's ListAndWatch streams: one per accepted registration.

Each registration the simulator accepts gets a task that follows the plugin's
ListAndWatch stream and records every list in the `Ledger` under the
registration's id, so a late message from a replaced stream never overwrites the
current one. Closing a stream is recorded before it is cancelled, so the ledger
says who ended it (the plugin, an error, or the simulator and why).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from grpc import aio

from kubelet.api import api_pb2
from kubelet_sim.client import PluginClient
from kubelet_sim.ledger import Ledger
from kubelet_sim.model import DeviceInfo


@dataclass(slots=True)
class Registration:
    id: int
    resource: str
    client: PluginClient
    task: asyncio.Task[None] | None = None


async def watch(registration: Registration, ledger: Ledger) -> None:
    """Follow one registration's device stream until it ends or is cancelled."""
    resource, reg_id = registration.resource, registration.id
    call = registration.client.list_and_watch()
    ledger.stream_opened(resource, reg_id)
    try:
        async for response in call:
            ledger.list_received(resource, reg_id, devices_of(response))
    except aio.AioRpcError as exc:
        detail = f"{exc.code().name}: {exc.details() or ''}"
        ledger.stream_ended(resource, reg_id, error=True, detail=detail)
        return
    except Exception as exc:
        # A malformed stream is a fact to report, not a reason to stop simulating.
        ledger.stream_ended(resource, reg_id, error=True, detail=repr(exc))
        return
    finally:
        call.cancel()
    ledger.stream_ended(resource, reg_id, error=False, detail="ended by the plugin")


def close_stream(registration: Registration, ledger: Ledger, reason: str) -> None:
    """Record that we are closing a still-open stream (before cancelling it)."""
    task = registration.task
    if task is not None and not task.done():
        task.cancel()
        ledger.stream_ended(registration.resource, registration.id, error=False, detail=reason)


async def teardown(registration: Registration) -> None:
    task = registration.task
    if task is not None:
        task.cancel()
        # `wait` does not re-raise the task's CancelledError, but still propagates
        # a cancellation of the caller.
        await asyncio.wait({task})
    await registration.client.close()


def devices_of(response: api_pb2.ListAndWatchResponse) -> tuple[DeviceInfo, ...]:
    return tuple(
        DeviceInfo(
            id=device.ID,
            health=device.health,
            numa_nodes=tuple(node.ID for node in device.topology.nodes),
        )
        for device in response.devices
    )
