"""Load for the `loop` benchmark, from a process of its own.

    python -m bench.pressure state --port P --clients 300 --seconds S
    python -m bench.pressure preferred --socket PATH --ids-file F --size N --seconds S

`state` keeps `--clients` GET /state requests in flight against the plugin's
inspection endpoint; `preferred` calls GetPreferredAllocation back to back
on a plugin socket, asking for `--size` of the IDs in `--ids-file` (one per
line). Both stop after `--seconds` and print one JSON line: how many calls,
how many were refused (HTTP 503), and their latencies in milliseconds.

Running the load in another process keeps the benchmark's own event loop
free to time the plugin's answers: reading 300 responses of a megabyte each
in the timing process would slow the timer, not the plugin. `--nice` lowers
the load's priority; it is 0 by default because a slower load would no
longer show the stall it is there to catch (an endpoint that serializes
`/state` on the event loop keeps up with a niced reader). On a two-core
machine the load then competes with the plugin for the CPUs, which shows in
the tail of the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from grpc import aio

from kubelet.api import api_pb2, api_pb2_grpc


async def _get(port: int, path: str, buffer: bytearray) -> int:
    """The status of one GET; the body is read into `buffer` and dropped.

    Reading with `sock_recv_into` into one reused buffer keeps this process's
    own cost to the kernel's copy, so the load lands on the plugin.
    """
    loop = asyncio.get_running_loop()
    with socket.socket() as sock:
        sock.setblocking(False)
        await loop.sock_connect(sock, ("127.0.0.1", port))
        await loop.sock_sendall(sock, f"GET {path} HTTP/1.1\r\nHost: bench\r\n\r\n".encode())
        view = memoryview(buffer)
        received = await loop.sock_recv_into(sock, view)
        status = int(bytes(view[:received]).split(b" ", 2)[1]) if received else 0
        while received:
            received = await loop.sock_recv_into(sock, view)
    return status


async def state(port: int, clients: int, seconds: float) -> dict[str, object]:
    deadline = time.monotonic() + seconds
    latencies: list[float] = []
    refused = 0

    async def client() -> None:
        nonlocal refused
        buffer = bytearray(1 << 20)
        while time.monotonic() < deadline:
            started = time.perf_counter()
            try:
                status = await _get(port, "/state", buffer)
            except OSError:
                refused += 1
                continue
            latencies.append((time.perf_counter() - started) * 1000)
            refused += status == 503

    await asyncio.gather(*(client() for _ in range(clients)))
    return {"calls": len(latencies), "refused": refused, "ms": latencies}


async def preferred(socket: Path, ids: list[str], size: int, seconds: float) -> dict[str, object]:
    deadline = time.monotonic() + seconds
    latencies: list[float] = []
    request = api_pb2.PreferredAllocationRequest(
        container_requests=[
            api_pb2.ContainerPreferredAllocationRequest(
                available_deviceIDs=ids, allocation_size=size
            )
        ]
    )
    async with aio.insecure_channel(f"unix://{socket}") as channel:
        stub = api_pb2_grpc.DevicePluginStub(channel)
        while time.monotonic() < deadline:
            started = time.perf_counter()
            answer = await stub.GetPreferredAllocation(request, timeout=30)
            latencies.append((time.perf_counter() - started) * 1000)
            if len(answer.container_responses[0].deviceIDs) != size:
                raise SystemExit(f"asked for {size}, got {answer}")
    return {"calls": len(latencies), "refused": 0, "ms": latencies}


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.pressure")
    parser.add_argument("kind", choices=["state", "preferred"])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--clients", type=int, default=300)
    parser.add_argument("--socket", type=Path)
    parser.add_argument("--ids-file", type=Path)
    parser.add_argument("--size", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--nice", type=int, default=0, help="lower this process's priority")
    args = parser.parse_args(argv)
    os.nice(args.nice)
    if args.kind == "state":
        result = asyncio.run(state(args.port, args.clients, args.seconds))
    else:
        ids = args.ids_file.read_text().split()
        result = asyncio.run(preferred(args.socket, ids, args.size, args.seconds))
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
