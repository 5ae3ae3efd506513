"""Inputs that used to stall the plugin's one event loop, end to end.

* A named pipe at the config path: at start-up a one-line error and exit 1
  (it used to hang until something wrote to the pipe); as an edit while
  serving, a rejection while the running config keeps serving.
* `replicas: 1000000`: rejected from the size estimate before anything is
  built (it used to block about 70 s and take 2.5 GB, long enough for the
  liveness probe to kill the plugin), while `/healthz` and Allocate keep
  answering.

While the bad input is handled, a prober calls `/healthz` and Allocate in a
loop, and every call must be answered (a stalled loop would also keep the
rejection from showing in `/state` within the wait). How fast they answer
under such load is measured by `make bench` (the `loop` group).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

from kubelet_sim import KubeletSimulator
from tests.e2e.harness import PluginProcess, plugin_args

GPU = "nvidia.com/gpu"


def sliced(replicas: int) -> str:
    return (
        "version: v1\nsharing:\n  timeSlicing:\n    resources:\n"
        f"    - name: {GPU}\n      replicas: {replicas}\n"
    )


@dataclass
class Prober:
    """Calls /healthz and Allocate back to back until stopped; each must be answered."""

    plugin: PluginProcess
    sim: KubeletSimulator
    device: str
    calls: int = 0

    async def _one(self, what: str) -> None:
        if what == "healthz":
            assert (await self.plugin.get("/healthz")).status == 200
        else:
            response = await self.sim.allocate(GPU, [[self.device]])
            assert len(response.container_responses) == 1

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            await asyncio.gather(self._one("healthz"), self._one("allocate"))
            self.calls += 1
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(0.02):
                    await stop.wait()


@contextlib.asynccontextmanager
async def probing(plugin: PluginProcess, sim: KubeletSimulator) -> AsyncIterator[Prober]:
    view = await sim.wait_devices(GPU, lambda devices: len(devices) > 0)
    prober = Prober(plugin, sim, view.devices[0].id)
    stop = asyncio.Event()
    task = asyncio.create_task(prober.run(stop))
    try:
        yield prober
    finally:
        stop.set()
        await task
    assert prober.calls > 0


def replace_with_fifo(path: Path) -> None:
    fifo = path.with_suffix(".fifo")
    os.mkfifo(fifo)
    os.replace(fifo, path)


async def test_a_pipe_at_the_config_path_at_start_up_exits_with_one_line(
    sock_dir: Path, tmp_path: Path
) -> None:
    config = tmp_path / "config.yaml"
    os.mkfifo(config)
    plugin = PluginProcess(plugin_args(sock_dir, "t4x4", "--config-file", str(config)))
    await plugin.start()
    try:
        assert await plugin.wait_exit(timeout=20) == 1
    finally:
        await plugin.kill()
    assert plugin.stderr.strip().splitlines() == [
        f"nvidia-device-plugin: {config}: error opening config file: "
        "not a regular file (a named pipe (FIFO))"
    ]


async def test_a_pipe_as_an_edit_is_rejected_while_serving(
    sim: KubeletSimulator, tmp_path: Path
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(sliced(2))
    args = plugin_args(sim.directory, "t4x4", "--config-file", str(config))
    async with PluginProcess(args) as plugin:
        await sim.wait_devices(GPU, lambda d: len(d) == 8, timeout=20)
        async with probing(plugin, sim):
            replace_with_fifo(config)
            state = await plugin.wait_state(lambda s: s["reason"] is not None, timeout=10)
            assert state["state"] == "serving"
            assert "not a regular file (a named pipe (FIFO))" in state["reason"]
            assert (await plugin.get("/readyz")).status == 200
        view = sim.snapshot().resource(GPU)
        assert view is not None
        assert len(view.devices) == 8  # the running config still serves

        config.unlink()
        config.write_text(sliced(3))
        await sim.wait_devices(GPU, lambda d: len(d) == 12, timeout=10)
        await plugin.wait_state(lambda s: s["reason"] is None)


async def test_a_million_replicas_are_rejected_while_probes_and_allocate_answer(
    sim: KubeletSimulator, tmp_path: Path
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(sliced(2))
    args = plugin_args(sim.directory, "dgx-a100", "--config-file", str(config))
    async with PluginProcess(args) as plugin:
        await sim.wait_devices(GPU, lambda d: len(d) == 16, timeout=20)
        async with probing(plugin, sim):
            tmp = config.with_suffix(".tmp")
            tmp.write_text(sliced(1_000_000))
            os.replace(tmp, config)
            state = await plugin.wait_state(lambda s: s["reason"] is not None, timeout=10)
        assert state["state"] == "serving"
        assert "(8 x 1000000 replicas = 8000000 devices)" in state["reason"]
        assert "at most 7960 replicas fit" in state["reason"]
        view = sim.snapshot().resource(GPU)
        assert view is not None
        assert len(view.devices) == 16
