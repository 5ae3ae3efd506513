"""`make demo`: the plugin on a simulated DGX A100 node, talking to a simulated kubelet.

Everything runs on this machine in a temporary directory: the kubelet
simulator serves the registration socket, the plugin discovers the eight GPUs
of the `dgx-a100` profile and registers `nvidia.com/gpu`, then the demo asks
for a preferred allocation and an allocation the way the kubelet does when a
pod requests two GPUs. It keeps running (so you can open /state) until Ctrl-C. With
`KUBELET_API=dra` the same node is served through DRA instead (`demo_dra`).

The inspection endpoint takes port 9040 when it is free and any free port
otherwise (`STATE_ADDRESS` chooses one), and the simulator's sockets live in
a fresh temporary directory, so the demo never collides with a plugin or a
demo already running. The plugin's own log lines are shown prefixed with
`plugin |`; if it exits early, the demo says so at once instead of waiting
for a registration that will not come, and exits 1.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sys
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

from google.protobuf import json_format

from kubelet_sim.engine import KubeletSimulator

PROFILE = os.environ.get("MOCK_NVML", "dgx-a100")
# DEMO_ONCE=1 stops after the allocation instead of waiting for Ctrl-C (used by the tests).
ONCE = os.environ.get("DEMO_ONCE", "") not in ("", "0")
PREFERRED_PORT = 9040
REGISTRATION_SECONDS = 30.0

T = TypeVar("T")


class PluginExited(Exception):
    def __init__(self, code: int) -> None:
        super().__init__(f"the plugin exited with code {code}")
        self.code = code


def say(text: str) -> None:
    print(f"demo | {text}", flush=True)


def state_address() -> str:
    """STATE_ADDRESS, else 127.0.0.1:9040 when free, else a port the kernel picks."""
    given = os.environ.get("STATE_ADDRESS")
    if given:
        return given
    for port in (PREFERRED_PORT, 0):
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return f"127.0.0.1:{probe.getsockname()[1]}"
    raise OSError("no free port on 127.0.0.1")


async def unless_exited(plugin: asyncio.subprocess.Process, step: Awaitable[T]) -> T:
    """`step`'s result, or PluginExited as soon as the plugin process ends."""
    work = asyncio.ensure_future(step)
    ended = asyncio.ensure_future(plugin.wait())
    try:
        await asyncio.wait({work, ended}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        ended.cancel()
    if work.done():
        return work.result()
    work.cancel()
    raise PluginExited(plugin.returncode if plugin.returncode is not None else -1)


async def show(sim: KubeletSimulator, plugin: asyncio.subprocess.Process, address: str) -> None:
    view = await unless_exited(
        plugin, sim.wait_registered("nvidia.com/gpu", timeout=REGISTRATION_SECONDS)
    )
    view = await unless_exited(plugin, sim.wait_devices("nvidia.com/gpu", timeout=10))
    devices = view.devices
    say(
        f"registered nvidia.com/gpu ({view.endpoint}) with {len(devices)} devices, "
        f"{len(view.healthy_ids)} healthy:"
    )
    for device in devices:
        numa = ",".join(map(str, device.numa_nodes)) or "-"
        say(f"  {device.id}  {device.health}  NUMA {numa}")
    ids = [d.id for d in devices]
    answer = await sim.preferred("nvidia.com/gpu", ids, [], 2)
    chosen = list(answer.container_responses[0].deviceIDs)
    say(f"GetPreferredAllocation(size=2) -> {chosen}")
    response = await sim.allocate("nvidia.com/gpu", [chosen])
    flat = json_format.MessageToJson(response, indent=None)
    say(f"Allocate({chosen}) -> {flat}")
    say(f"plugin state: http://{address}/state")


async def until_stopped(plugin: asyncio.subprocess.Process) -> None:
    say("Ctrl-C to stop")
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    done = asyncio.create_task(plugin.wait())
    waiter = asyncio.create_task(stop.wait())
    await asyncio.wait({done, waiter}, return_when=asyncio.FIRST_COMPLETED)
    waiter.cancel()
    if stop.is_set():
        # Ctrl-C reached the whole process group, the plugin too: give it its
        # own clean stop before insisting.
        await asyncio.wait({done}, timeout=5)
    done.cancel()


async def relay(stream: asyncio.StreamReader) -> None:
    """Show the plugin's log lines as they come (a pipe must be drained anyway)."""
    while line := await stream.readline():
        print(f"plugin | {line.decode(errors='replace').rstrip()}", flush=True)


async def run(
    command: list[str], show_it: Callable[[asyncio.subprocess.Process], Awaitable[None]],
    env: dict[str, str] | None = None,
) -> int:  # fmt: skip
    """Start the plugin, show what it serves, wait for Ctrl-C (unless DEMO_ONCE), stop it."""
    plugin = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "reconciler", *command, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    assert plugin.stdout is not None
    output = asyncio.create_task(relay(plugin.stdout))
    code = 0
    try:
        await show_it(plugin)
        if not ONCE:
            await until_stopped(plugin)
    except PluginExited as exited:
        await output  # everything it said is on the screen first
        say(f"{exited} before it served (its output is above)")
        code = 1
    finally:
        if plugin.returncode is None:
            plugin.send_signal(signal.SIGTERM)
            await plugin.wait()
        await output
        if code == 0:
            say(f"plugin exited with code {plugin.returncode}")
    return code


async def main() -> int:
    address = state_address()
    if os.environ.get("KUBELET_API", "device-plugin") == "dra":
        import demo_dra

        return await demo_dra.main(address)
    with tempfile.TemporaryDirectory(prefix="dp-demo-", dir="/tmp") as tmp:
        plugin_dir = Path(tmp)
        async with KubeletSimulator(plugin_dir) as sim:
            say(f"kubelet simulator listening on {plugin_dir / 'kubelet.sock'}")
            command = ["--mock-nvml", PROFILE, "--kubelet-socket", str(plugin_dir / "kubelet.sock"),
                       "--state-address", address]  # fmt: skip
            return await run(command, lambda plugin: show(sim, plugin, address))


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
