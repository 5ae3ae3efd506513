"""The plugin process on the real NVML backend: pynvml over the fake `libnvidia-ml.so.1`.

No `--mock-nvml`: the plugin finds the fake library under its driver root
(`--driver-root-ctr-path`, as in the DaemonSet) and reads a DGX A100 through
the NVML C API. Against the kubelet simulator it must register, advertise
the node's GPUs, answer a preferred allocation from the topology it read
through NVLink and topology queries, allocate, and follow XID events from
an NVML event set: a transient XID makes one GPU unhealthy and it recovers
by itself; a GPU that falls off the bus stays out until it is reset, and
costs no other GPU: not when the devices are read again while it is lost,
not when the plugin starts with it lost (the reference exits at start-up
then, upstream #231).
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from kubelet_sim import KubeletSimulator
from kubelet_sim.model import DeviceInfo
from tests.e2e.harness import PluginProcess
from tests.unit.devices.fake_nvml_driver import FakeDriver, fake_nvml_library, install_driver

__all__ = ["fake_nvml_library"]  # the session fixture that compiles the library
GPU = "nvidia.com/gpu"
HEALTH = "version: v1\nhealth:\n  quietPeriod: 0.3\n  probeInterval: 0.2\n"


@pytest.fixture
def driver(fake_nvml_library: Path, tmp_path: Path) -> FakeDriver:
    return install_driver(fake_nvml_library, tmp_path / "node", "dgx-a100")


def real_backend(sim: KubeletSimulator, driver: FakeDriver, config: Path) -> PluginProcess:
    args = [
        "--kubelet-socket", str(sim.directory / "kubelet.sock"),
        "--driver-root-ctr-path", str(driver.root),
        "--config-file", str(config),
    ]  # fmt: skip
    return PluginProcess(args, env=driver.env)


def unhealthy(devices: tuple[DeviceInfo, ...]) -> set[str]:
    return {d.id for d in devices if d.health == "Unhealthy"}


async def test_plugin_serves_a_node_read_through_the_nvml_c_api(
    sim: KubeletSimulator, driver: FakeDriver, tmp_path: Path
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(HEALTH)
    uuids = [gpu.uuid for gpu in driver.inventory.gpus]
    async with real_backend(sim, driver, config) as plugin:
        view = await sim.wait_devices(GPU, lambda d: len(d) == 8, timeout=20)
        assert sorted(d.id for d in view.devices) == sorted(uuids)
        await plugin.wait_state(lambda s: s["state"] == "serving")
        preferred = await sim.preferred(GPU, available=uuids, must_include=[uuids[5]], size=4)
        # Every pair is 12 NVSwitch lanes apart; PCIe says GPUs 4-7 share the must-have's socket.
        assert set(preferred.container_responses[0].deviceIDs) == set(uuids[4:8])
        response = await sim.allocate(GPU, [uuids[:2]])
        assert dict(response.container_responses[0].envs) == {
            "NVIDIA_VISIBLE_DEVICES": ",".join(uuids[:2])
        }


async def test_xids_from_an_nvml_event_set_reach_the_kubelet_and_recover(
    sim: KubeletSimulator, driver: FakeDriver, tmp_path: Path
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(HEALTH)
    uuids = [gpu.uuid for gpu in driver.inventory.gpus]
    async with real_backend(sim, driver, config) as plugin:
        await sim.wait_devices(GPU, lambda d: len(d) == 8, timeout=20)
        await plugin.wait_state(lambda s: s["health"] is not None)

        driver.xid(uuids[2], 94)  # contained: the GPU recovers by itself
        await sim.wait_devices(GPU, lambda d: unhealthy(d) == {uuids[2]}, timeout=5)
        await sim.wait_devices(GPU, lambda d: not unhealthy(d), timeout=10)

        driver.xid(uuids[6], 79)  # fallen off the bus: out until reset
        driver.lost(uuids[6])
        await sim.wait_devices(GPU, lambda d: unhealthy(d) == {uuids[6]}, timeout=5)
        state = await plugin.wait_state(
            lambda s: "GPU is lost" in str(s["health"]["devices"][uuids[6]].get("detail"))
        )
        assert state["health"]["devices"][uuids[6]]["reason"] == "xid 79"
        # Reading the devices again (a reload) still works, and the lost GPU stays listed.
        plugin.signal(signal.SIGHUP)
        await plugin.wait_state(lambda s: s["history"][-1]["trigger"] == "reconfigured")
        view = sim.snapshot().resource(GPU)
        assert view is not None
        assert len(view.devices) == 8
        assert unhealthy(view.devices) == {uuids[6]}
        driver.reset(uuids[6])
        await sim.wait_devices(GPU, lambda d: not unhealthy(d), timeout=10)
        # /state is published at the end of the pass that sent the kubelet its list.
        state = await plugin.wait_state(
            lambda s: s["health"]["devices"][uuids[6]]["health"] == "Healthy"
        )
        history = state["health"]["devices"][uuids[6]]["history"]
        assert [h["to"] for h in history][-3:] == ["unhealthy", "recovering", "healthy"]


async def test_a_gpu_lost_at_start_up_costs_only_itself(
    sim: KubeletSimulator, driver: FakeDriver, tmp_path: Path
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(HEALTH)
    uuids = [gpu.uuid for gpu in driver.inventory.gpus]
    driver.lost(uuids[6])
    async with real_backend(sim, driver, config) as plugin:
        view = await sim.wait_devices(GPU, lambda d: len(d) == 7, timeout=20)
        assert {d.id for d in view.devices} == set(uuids) - {uuids[6]}
        assert not unhealthy(view.devices)
        state = await plugin.wait_state(lambda s: s["state"] == "serving")
        assert state["reason"] is None
        assert "GPU 6: nvmlDeviceGetHandleByIndex failed: GPU is lost: left out" in plugin.stderr
