"""The whole plugin as a process against the kubelet simulator (the foundation's contract).

Registration fields, the eight `dgx-a100` devices with their NUMA nodes,
Allocate and its rejection, re-registration after kubelet restarts, SIGTERM,
SIGHUP, and the inspection endpoint in each case.
"""

from __future__ import annotations

import signal
import time
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest

from kubelet.simulator import KubeletSimulator
from kubelet.simulator.client import PluginCallError
from kubelet.simulator.model import EventKind
from tests.integration.harness import PluginProcess, plugin_args

pytestmark = pytest.mark.integration

GPU = "nvidia.com/gpu"


@pytest.fixture
async def sim(sock_dir: Path) -> AsyncIterator[KubeletSimulator]:
    async with KubeletSimulator(sock_dir, write_snapshot_file=False) as simulator:
        yield simulator


@pytest.fixture
async def plugin(sim: KubeletSimulator) -> AsyncIterator[PluginProcess]:
    async with PluginProcess(plugin_args(sim.directory)) as process:
        await sim.wait_registered(GPU, timeout=20)
        yield process


async def test_registers_eight_gpus_with_numa(
    sim: KubeletSimulator, plugin: PluginProcess
) -> None:
    view = await sim.wait_devices(GPU, lambda devices: len(devices) == 8)
    assert view.endpoint == "nvidia-gpu.sock"
    assert view.options.get_preferred_allocation_available
    assert not view.options.pre_start_required
    assert len({d.id for d in view.devices}) == 8
    assert all(d.id.startswith("GPU-") and d.health == "Healthy" for d in view.devices)
    # dgx-a100: GPUs 0-3 on NUMA node 0, 4-7 on NUMA node 1 (advertised in index order).
    assert [d.numa_nodes for d in view.devices] == [(0,)] * 4 + [(1,)] * 4
    registered = sim.snapshot().events_of(EventKind.REGISTERED, GPU)
    assert len(registered) == 1


async def test_allocate_and_reject_unknown(sim: KubeletSimulator, plugin: PluginProcess) -> None:
    view = await sim.wait_devices(GPU, lambda devices: len(devices) == 8)
    ids = [d.id for d in view.devices]
    response = await sim.allocate(GPU, [[ids[0], ids[1]]])
    (container,) = response.container_responses
    assert dict(container.envs) == {"NVIDIA_VISIBLE_DEVICES": f"{ids[0]},{ids[1]}"}
    with pytest.raises(PluginCallError) as caught:
        await sim.allocate(GPU, [[ids[0], "GPU-does-not-exist"]])
    assert caught.value.code is grpc.StatusCode.INVALID_ARGUMENT
    assert "GPU-does-not-exist" in caught.value.details
    # The rejection changed nothing: the next allocation still works.
    again = await sim.allocate(GPU, [[ids[2]]])
    assert dict(again.container_responses[0].envs)["NVIDIA_VISIBLE_DEVICES"] == ids[2]


async def test_inspection_endpoint_when_serving(
    sim: KubeletSimulator, plugin: PluginProcess
) -> None:
    state = await plugin.wait_state(lambda s: s["state"] == "serving")
    assert state["reason"] is None
    assert state["since"].endswith("Z")
    (resource,) = state["resources"]
    assert resource["name"] == GPU
    assert resource["endpoint"] == "nvidia-gpu.sock"
    assert resource["registered"] is True
    assert len(resource["devices"]) == 8
    assert {d["health"] for d in resource["devices"]} == {"Healthy"}
    assert [(h["source"], h["trigger"], h["dest"]) for h in state["history"]] == [
        ("init", "initialized", "serving")
    ]
    assert all(h["at"] for h in state["history"])
    assert (await plugin.get("/readyz")).status == 200
    assert (await plugin.get("/healthz")).status == 200
    assert (await plugin.get("/nope")).status == 404
    assert (await plugin.get("/state?x=1")).status == 200


async def test_reregisters_after_three_kubelet_restarts(
    sim: KubeletSimulator, plugin: PluginProcess
) -> None:
    for round_ in range(2, 5):
        await sim.restart()
        started = time.monotonic()
        view = await sim.wait_registered(GPU, min_registrations=round_, timeout=5)
        assert time.monotonic() - started < 1.0, "re-registration took longer than 1 s"
        assert view.endpoint == "nvidia-gpu.sock"
        await sim.wait_devices(GPU, lambda devices: len(devices) == 8)
    state = await plugin.wait_state(
        lambda s: sum(h["trigger"] == "kubelet_restarted" for h in s["history"]) == 3
    )
    assert state["state"] == "serving"
    assert state["resources"][0]["registered"] is True


async def test_sigterm_removes_sockets_and_exits_zero(
    sim: KubeletSimulator, plugin: PluginProcess
) -> None:
    socket_path = sim.directory / "nvidia-gpu.sock"
    assert socket_path.exists()
    started = time.monotonic()
    code = await plugin.terminate(timeout=5)
    assert code == 0, plugin.stderr
    assert time.monotonic() - started < 2.0
    assert not socket_path.exists()
    assert (sim.directory / "kubelet.sock").exists()  # the kubelet's own socket is not ours


async def test_sighup_reloads_without_touching_unchanged_resources(
    sim: KubeletSimulator, plugin: PluginProcess
) -> None:
    await sim.wait_devices(GPU, lambda devices: len(devices) == 8)
    plugin.signal(signal.SIGHUP)
    state = await plugin.wait_state(
        lambda s: [h["trigger"] for h in s["history"]][-2:] == ["reload_requested", "reconfigured"]
    )
    assert state["state"] == "serving"
    assert state["history"][-1]["detail"]["changed"] is False
    view = sim.snapshot().resource(GPU)
    assert view is not None
    assert view.counters.registrations == 1
    assert view.counters.streams_opened == 1


async def test_node_without_gpus_is_a_quiet_ready_idle(sim: KubeletSimulator) -> None:
    async with PluginProcess(plugin_args(sim.directory, "no-gpus")) as plugin:
        state = await plugin.wait_state(lambda s: s["state"] == "serving")
        assert state["resources"] == []
        assert state["reason"] is None
        assert (await plugin.get("/readyz")).status == 200
        assert sim.snapshot().resources == ()


async def test_fail_on_init_error_true_exits_one_with_one_line(sock_dir: Path) -> None:
    process = PluginProcess(plugin_args(sock_dir, "nvml-broken"))
    await process.start()
    code = await process.wait_exit(timeout=10)
    assert code == 1
    banner, *lines = [line for line in process.stderr.splitlines() if line.strip()]
    assert banner.endswith(" starting")  # the first line names the version
    assert len(lines) == 1, process.stderr
    assert "start-up failed" in lines[0]
    assert "NVML" in lines[0]
    assert "Traceback" not in process.stderr


async def test_fail_on_init_error_false_blocks_then_recovers(
    sim: KubeletSimulator, tmp_path: Path
) -> None:
    profile = tmp_path / "node.yaml"
    profile.write_text(broken_profile())
    args = plugin_args(sim.directory, str(profile), "--fail-on-init-error=false")
    async with PluginProcess(args) as plugin:
        state = await plugin.wait_state(lambda s: s["state"] == "blocked_on_error")
        assert "NVML" in state["reason"]
        assert "retrying in" in state["reason"]
        assert state["history"][-1]["trigger"] == "failed"
        assert (await plugin.get("/readyz")).status == 503
        assert (await plugin.get("/healthz")).status == 200
        # The driver "arrives": the next retry serves without a restart.
        profile.write_text(broken_profile().replace("initError:", "# initError:"))
        await sim.wait_registered(GPU, timeout=10)
        state = await plugin.wait_state(lambda s: s["state"] == "serving")
        assert state["reason"] is None
        assert [h["trigger"] for h in state["history"]][-2:] == ["retry", "initialized"]
        assert (await plugin.get("/readyz")).status == 200


def broken_profile() -> str:
    return (
        "driverVersion: '550.54.15'\n"
        "cudaDriverVersion: '12.4'\n"
        "initError: 'NVML_ERROR_DRIVER_NOT_LOADED: NVIDIA driver is not loaded'\n"
        "gpus:\n"
        "  - uuid: GPU-11111111-2222-4333-8444-555555555555\n"
        "    name: Tesla T4\n"
        "    memoryMiB: 15360\n"
        "    pciBusID: '00000000:3B:00.0'\n"
        "    numaNode: 0\n"
        "    computeCapability: '7.5'\n"
    )


async def test_registration_waits_for_a_late_kubelet(sock_dir: Path) -> None:
    async with PluginProcess(plugin_args(sock_dir)) as plugin:
        state = await plugin.wait_state(lambda s: s["state"] == "blocked_on_error")
        assert "kubelet socket" in state["reason"]
        async with KubeletSimulator(sock_dir, write_snapshot_file=False) as sim:
            # The directory watch sees kubelet.sock appear and registers at once,
            # well before the backoff timer would.
            await sim.wait_registered(GPU, timeout=5)
            await plugin.wait_state(lambda s: s["state"] == "serving")
            await plugin.terminate()
    assert not (sock_dir / "nvidia-gpu.sock").exists()


async def test_sockets_are_served_before_registration(sim: KubeletSimulator) -> None:
    # Registration dials the plugin's socket synchronously (as the kubelet does),
    # so a registration the simulator accepted proves the socket answered first.
    async with PluginProcess(plugin_args(sim.directory)) as plugin:
        await sim.wait_registered(GPU, timeout=20)
        rejected = sim.snapshot().events_of(EventKind.REJECTED)
        assert rejected == ()
        await plugin.terminate()
