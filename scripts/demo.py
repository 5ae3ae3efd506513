"""`make demo`: the plugin on a simulated DGX A100 node, talking to a simulated kubelet.

Everything runs on this machine in a temporary directory: the kubelet
simulator serves the registration socket, the plugin discovers the eight GPUs
of the `dgx-a100` profile and registers `nvidia.com/gpu`, then the demo asks
for a preferred allocation and an allocation the way the kubelet does when a
pod requests two GPUs. It keeps running (so you can open /state) until Ctrl-C.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import tempfile
from pathlib import Path

from google.protobuf import json_format

from kubelet.simulator.engine import KubeletSimulator

STATE_ADDRESS = os.environ.get("STATE_ADDRESS", "127.0.0.1:9040")
PROFILE = os.environ.get("MOCK_NVML", "dgx-a100")
# DEMO_ONCE=1 stops after the allocation instead of waiting for Ctrl-C (used by the tests).
ONCE = os.environ.get("DEMO_ONCE", "") not in ("", "0")


def say(text: str) -> None:
    print(f"demo | {text}", flush=True)


async def main() -> int:
    with tempfile.TemporaryDirectory(prefix="dp-demo-", dir="/tmp") as tmp:
        plugin_dir = Path(tmp)
        async with KubeletSimulator(plugin_dir) as sim:
            say(f"kubelet simulator listening on {plugin_dir / 'kubelet.sock'}")
            plugin = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "reconciler",
                "--mock-nvml",
                PROFILE,
                "--kubelet-socket",
                str(plugin_dir / "kubelet.sock"),
                "--state-address",
                STATE_ADDRESS,
            )
            try:
                view = await sim.wait_registered("nvidia.com/gpu", timeout=30)
                view = await sim.wait_devices("nvidia.com/gpu", timeout=10)
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
                say(f"plugin state: http://{STATE_ADDRESS}/state")
                if ONCE:
                    return 0
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
                    # Ctrl-C reached the whole process group, the plugin too:
                    # give it its own clean stop before insisting.
                    await asyncio.wait({done}, timeout=5)
                done.cancel()
            finally:
                if plugin.returncode is None:
                    plugin.send_signal(signal.SIGTERM)
                    await plugin.wait()
                say(f"plugin exited with code {plugin.returncode}")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
