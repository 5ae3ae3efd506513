"""Kubernetes API faults while the plugin follows its node label.

The plugin runs with `--node-name`, `KUBECONFIG` pointing at an emulated API
server (kmock, see tests/unit/kube/apiserver.py) and `--config-directory` holding
two configs; the node label picks one. The API server then misbehaves: it
goes away (open connections dropped), answers 500, answers 410 Gone, or
never answers. Throughout, serving must not stop: `/readyz` stays 200 and the
kubelet keeps its registration and devices. After each fault the label is
changed and the plugin must follow it, proving that the watch came back.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import kmock
import pytest

from kubelet_sim import KubeletSimulator
from tests.e2e.harness import PluginProcess, plugin_args
from tests.unit.kube.apiserver import (
    ApiServer,
    Outage,
    Script,
    error_response,
    kubeconfig,
    running_apiserver,
)
from tests.waiting import eventually

NODE = "gpu-node-1"
LABEL = "nvidia.com/device-plugin.config"
GPU = "nvidia.com/gpu"
DEVICES = {"two": 16, "four": 32}  # dgx-a100: 8 GPUs, time-sliced 2 or 4 ways
HANG_SECONDS = 1.0
RECOVERY = 35.0  # the watch backs off 1 s doubling to 30 s: that long, at worst


def time_sliced(replicas: int) -> str:
    return (
        "version: v1\nsharing:\n  timeSlicing:\n    resources:\n"
        f"    - name: {GPU}\n      replicas: {replicas}\n"
    )


@dataclass
class Cluster:
    api: ApiServer
    sim: KubeletSimulator
    plugin: PluginProcess
    value: str = "two"
    faults: list[str] = field(default_factory=list)

    async def relabel(self) -> None:
        """Flip the label and wait for the other config to reach the kubelet."""
        self.value = "four" if self.value == "two" else "two"
        await self.api.set_labels(NODE, {LABEL: self.value})
        want = DEVICES[self.value]
        await self.sim.wait_devices(GPU, lambda d: len(d) == want, timeout=RECOVERY)
        state = await self.plugin.wait_state(
            lambda s: s["selection"]["selected"] == self.value and s["state"] == "serving"
        )
        assert state["selection"]["label"] == self.value

    async def warnings(self) -> int:
        return self.plugin.stderr.count("node label watch:")


@pytest.fixture
async def cluster(sim: KubeletSimulator, tmp_path: Path) -> AsyncIterator[Cluster]:
    configs = tmp_path / "configs"
    configs.mkdir()
    (configs / "two").write_text(time_sliced(2))
    (configs / "four").write_text(time_sliced(4))
    async with running_apiserver() as api:
        await api.add_node(NODE, {LABEL: "two"})
        env = {"KUBECONFIG": str(kubeconfig(tmp_path / "kubeconfig", api.url))}
        args = plugin_args(
            sim.directory, "dgx-a100", "--node-name", NODE, "--config-directory", str(configs)
        )
        async with PluginProcess(args, env=env) as plugin:
            await sim.wait_devices(GPU, lambda d: len(d) == DEVICES["two"], timeout=30)
            state = await plugin.wait_state(lambda s: s["state"] == "serving")
            assert state["selection"]["selected"] == "two"
            yield Cluster(api=api, sim=sim, plugin=plugin)


class Watchdog:
    """Checks, every 50 ms while a fault lasts, that serving goes on."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.lapses: list[str] = []
        self.samples = 0
        self._task: asyncio.Task[None] | None = None

    async def _watch(self) -> None:
        want = DEVICES[self.cluster.value]
        while True:
            ready = await self.cluster.plugin.get("/readyz")
            view = self.cluster.sim.snapshot().resource(GPU)
            self.samples += 1
            if ready.status != 200:
                self.lapses.append(f"/readyz {ready.status}")
            if view is None or not view.registered or len(view.devices) != want:
                self.lapses.append(f"kubelet view {view}")
            await asyncio.sleep(0.05)

    async def __aenter__(self) -> Watchdog:
        self._task = asyncio.create_task(self._watch(), name="serving-watchdog")
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)
        assert self.samples > 0
        assert not self.lapses, f"serving stopped during the fault: {self.lapses[:5]}"


def internal_error() -> Any:
    return error_response(500, "InternalError", "etcd is unhappy")


def gone() -> Any:
    return error_response(410, "Gone", "too old resource version")


async def drop_connections(cluster: Cluster) -> None:
    """The API server restarts: open watches are cut, and it is away for a moment."""
    seen = await cluster.warnings()
    await cluster.api.down()
    await eventually(lambda: _more(cluster, seen), what="the plugin to notice", timeout=RECOVERY)
    await cluster.api.up()


async def _more(cluster: Cluster, than: int) -> bool:
    return await cluster.warnings() > than


async def server_errors(cluster: Cluster) -> None:
    outage = Outage(internal_error)
    cluster.api.handler[kmock.action.LIST] << outage
    await drop_connections(cluster)
    await eventually(lambda: _served(outage, 1), what="a relist refused", timeout=RECOVERY)
    outage.end()


async def gone_on_watch(cluster: Cluster) -> None:
    script = Script(gone)
    cluster.api.handler[kmock.action.WATCH] << script
    await drop_connections(cluster)
    await eventually(lambda: _served(script, 1), what="the script served", timeout=RECOVERY)


async def hanging_list(cluster: Cluster) -> None:
    outage = Outage()
    cluster.api.handler[kmock.action.LIST] << outage
    await drop_connections(cluster)
    await eventually(lambda: _reached(outage), what="the hang reached", timeout=RECOVERY)
    # The relist now hangs; nothing in the plugin can show it, so the hang is
    # simply kept for a while (the watchdog checks serving meanwhile).
    await asyncio.sleep(HANG_SECONDS)
    outage.end()


async def _served(payload: Outage | Script, count: int) -> bool:
    return payload.served >= count


async def _reached(outage: Outage) -> bool:
    return outage.reached.is_set()


FAULTS: dict[str, Callable[[Cluster], Awaitable[None]]] = {
    "connection-drop": drop_connections,
    "http-500": server_errors,
    "http-410": gone_on_watch,
    "hang": hanging_list,
}


async def test_serving_survives_each_api_fault_in_turn(cluster: Cluster) -> None:
    # One plugin through each fault once (the long form goes through them twice):
    # after each, serving went on throughout, the label is followed again, and
    # the plugin says nothing is wrong.
    for fault in sorted(FAULTS):
        async with Watchdog(cluster):
            await FAULTS[fault](cluster)
        await cluster.relabel()
        state = await cluster.plugin.state()
        assert state["state"] == "serving", fault
        assert state["reason"] is None, fault
        assert "Traceback" not in cluster.plugin.stderr, fault
        cluster.faults.append(fault)
    assert cluster.faults == sorted(FAULTS)


@pytest.mark.long
@pytest.mark.timeout(600)
async def test_every_fault_in_a_row(cluster: Cluster) -> None:
    # One plugin through all of them, twice: the watch's backoff grows as
    # failures accumulate, and must still come back every time.
    for fault in [*sorted(FAULTS), *sorted(FAULTS)]:
        async with Watchdog(cluster):
            await FAULTS[fault](cluster)
        await cluster.relabel()
        cluster.faults.append(fault)
    assert len(cluster.faults) == 2 * len(FAULTS)
