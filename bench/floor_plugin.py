"""The floor: the least a device plugin can be, to measure the real one against.

It imports grpc and the v1beta1 stubs and nothing else, serves the
DevicePlugin service on a unix socket with canned answers (the same bytes the
real plugin gave, so both put messages of the same size on the wire), and,
with `--kubelet-socket`, registers once. What the real plugin costs beyond
this process (config, discovery, state machine, health) is what the ratio
rows show; gRPC and the interpreter are common to both and cancel out.

With `--settings` it is the second floor: before registering it reads its
kubelet socket and resource name through a two-field pydantic-settings class
(from the arguments and the environment), the least the plugin's settings
mechanism can cost at start-up.

Run as a script, not as part of the `bench` package, so that its start-up
time is the interpreter plus grpc (plus pydantic-settings):

    python bench/floor_plugin.py --socket DIR/floor.sock --canned FILE
        [--kubelet-socket DIR/kubelet.sock --resource nvidia.com/gpu] [--settings]

`--canned` is a JSON object of hex-encoded serialized messages
(`list`, `allocate`, `preferred`); without it the list holds `--devices`
placeholder devices and the other answers are empty.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from grpc import aio

from kubelet.api import api_pb2, api_pb2_grpc


class Floor(api_pb2_grpc.DevicePluginServicer):
    def __init__(self, canned: dict[str, str], devices: int) -> None:
        self.options = api_pb2.DevicePluginOptions(get_preferred_allocation_available=True)
        self.list = api_pb2.ListAndWatchResponse()
        if "list" in canned:
            self.list.ParseFromString(bytes.fromhex(canned["list"]))
        else:
            self.list.devices.extend(
                api_pb2.Device(ID=f"GPU-floor-{n:04d}", health="Healthy") for n in range(devices)
            )
        self.allocate = api_pb2.AllocateResponse.FromString(
            bytes.fromhex(canned.get("allocate", ""))
        )
        self.preferred = api_pb2.PreferredAllocationResponse.FromString(
            bytes.fromhex(canned.get("preferred", ""))
        )
        self.stopping = asyncio.Event()

    async def GetDevicePluginOptions(self, request: Any, context: Any) -> Any:
        return self.options

    async def ListAndWatch(self, request: Any, context: Any) -> AsyncIterator[Any]:
        yield self.list
        await self.stopping.wait()

    async def Allocate(self, request: Any, context: Any) -> Any:
        return self.allocate

    async def GetPreferredAllocation(self, request: Any, context: Any) -> Any:
        return self.preferred

    async def PreStartContainer(self, request: Any, context: Any) -> Any:
        return api_pb2.PreStartContainerResponse()


def _through_settings(kubelet_socket: Path | None, resource: str | None) -> tuple[Path | None, str]:
    """The two values, validated by a pydantic-settings class (arguments over environment)."""
    from pydantic_settings import BaseSettings

    class FloorSettings(BaseSettings):
        kubelet_socket: Path | None = None
        resource: str = "nvidia.com/gpu"

    given = {"kubelet_socket": kubelet_socket, "resource": resource}
    settings = FloorSettings(**{key: value for key, value in given.items() if value is not None})
    return settings.kubelet_socket, settings.resource


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--socket", type=Path, required=True)
    parser.add_argument("--canned", type=Path)
    parser.add_argument("--devices", type=int, default=8)
    parser.add_argument("--kubelet-socket", type=Path)
    parser.add_argument("--resource")
    parser.add_argument("--settings", action="store_true", help="read these two through settings")
    args = parser.parse_args()
    canned = json.loads(args.canned.read_text()) if args.canned else {}
    kubelet_socket, resource = args.kubelet_socket, args.resource or "nvidia.com/gpu"
    if args.settings:
        kubelet_socket, resource = _through_settings(args.kubelet_socket, args.resource)

    floor = Floor(canned, args.devices)
    server = aio.server()
    api_pb2_grpc.add_DevicePluginServicer_to_server(floor, server)
    server.add_insecure_port(f"unix://{args.socket.absolute()}")
    await server.start()

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)

    if kubelet_socket is not None:
        async with aio.insecure_channel(f"unix://{kubelet_socket.absolute()}") as channel:
            await api_pb2_grpc.RegistrationStub(channel).Register(
                api_pb2.RegisterRequest(
                    version="v1beta1",
                    endpoint=args.socket.name,
                    resource_name=resource,
                    options=floor.options,
                ),
                timeout=10,
            )

    await stop.wait()
    floor.stopping.set()
    await server.stop(0.2)


if __name__ == "__main__":
    asyncio.run(main())
